"""Data prep of Coding Agent RL (paper §3.6): Harbor terminal tasks as rows of the ``agent`` environment.

The steps live in :mod:`data_prep.harbor_stage`, shared with the FireFlash variant of this stage; this
stage uses the paper's learnability rule (``data.learnability.rule: never_or_always``, the default).

Steps, each counted in ``manifest.json``: held-out sets → the sources (Endless-Terminal, SETA-Env,
Scale-SWE: ``data_prep.harbor_sources``, hub revisions pinned in production) → ``loaded`` (task dirs that
do not parse are counted) → ``structural`` (missing instruction, tests or environment, multi-container,
multi-step, separate verifier image, symlinks; the runnable tasks are copied into ``tasks_dir``, the folder
the ``harbor:tasks=...`` environment reads) → exact overlap with the held-out prompts and the 8-gram screen
against the stage's benchmark files (Terminal-Bench, SWE-bench Verified) → ``learnability``
(``data_prep.agent_filters`` with no teacher: drop a task the initial policy never passes, or always passes,
in ``filter_samples`` episodes sampled from an SGLang ``/generate`` server; skipped without one). The paper
keeps ~4K tasks. The kept tasks' sandbox templates go to ``templates.json``, which the production plan's
``sandbox_templates`` step bakes (:func:`production_steps`).

Rows are the environment's own tasks (``HarborEnv.task_of``), so their ``metadata`` is what the environment
and slime's generate hook read back. ``manifest.json`` also says how many kept tasks the local (bubblewrap)
runtime can run (``runtime``): the rest need their image, which production's ``runtime=e2b`` boots from the
baked templates (the learnability filter's episodes run on that runtime, so bake before filtering).
Embedded: the tiny Harbor task set of :mod:`data_prep.tiny_tasks.harbor` (generated offline; that each
reference passes and doing nothing fails is checked by ``tests/test_tiny_harbor.py``, and a task whose
reference fails never becomes an SFT trajectory) → the held-out screens; learnability is left to DAPO's
online nonzero-std filter (``filter_samples: 0``).
"""

from __future__ import annotations

from typing import Any

from data_prep.harbor_stage import (
    FAMILY,
    REWARD,
    TEMPLATES,
    Params,
    environment_tasks,
    learnability,
    prepare_harbor_stage,
    production_steps,
    runtime_coverage,
)

__all__ = [
    "FAMILY",
    "REWARD",
    "TEMPLATES",
    "Params",
    "environment_tasks",
    "learnability",
    "prepare",
    "production_steps",
    "runtime_coverage",
]


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl, templates.json and manifest.json into ``ctx.out_dir``."""
    return prepare_harbor_stage(ctx, __file__)
