"""Evaluation for the recipe: benchmark registry, loaders, scoring helpers, production commands, report.

``eval.registry`` lists every benchmark the paper reports for stages 00–03 with its public source, scorer,
k and aggregation and the embedded metric that stands for it at tiny scale; ``eval.loaders`` reads each
benchmark's public release format from local files; ``eval.production`` renders the SGLang + lm-eval
commands of the production runbook; ``eval.report`` writes the stagewise table and training plots.
"""
