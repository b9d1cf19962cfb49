"""The embedded backend: tiny or small HF models trained locally (CPU, or one GPU) with the production math.

Modules: ``models`` (materialize ``micro`` / ``smollm2-135m`` / any HF folder), ``tokenizer_build``,
``chat_format`` (GLM-4.5 markup template and loss masks), ``generation`` (sampling with logprobs),
``sft`` and ``rl`` (trainers), ``sampling`` (dynamic sampling), ``checkpointing`` (exact resume),
``evaluate`` (held-out scoring) and ``backend`` (:class:`EmbeddedBackend`). Formulas live in
``infra.objectives``, shared with the production backend.
"""
