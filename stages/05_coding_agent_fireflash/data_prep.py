"""Data prep of the FireFlash variant of Coding Agent RL: stage 05's Harbor tasks, FireFlash's task filter.

The steps are stage 05's (:mod:`data_prep.harbor_stage`: sources → structural → held-out screens →
learnability → ``templates.json``) with FireFlash's learnability rule: keep a task whose pass rate under
training conditions lies in [15%, 85%] over at least 4 scored episodes of the input policy
(``data.learnability.rule: band``). A task author checks a task folder with FireFlash's nine validation
gates by ``rufus validate-tasks DIR`` (:mod:`infra.agents.harbor.validate_tasks`) before it enters a source.
Embedded: the tiny Harbor tasks, whose tests give partial credit (:func:`data_prep.harbor_verifier.test_sh`);
the band filter is skipped there (``filter_samples: 0``) because the micro policy solves almost none.
"""

from __future__ import annotations

from typing import Any

from data_prep.harbor_stage import prepare_harbor_stage, production_steps

__all__ = ["prepare", "production_steps"]


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl, templates.json and manifest.json into ``ctx.out_dir``."""
    return prepare_harbor_stage(ctx, __file__)
