"""The ``awm_tiny`` agent environment: the built-in ``awm`` environment over the tiny generated release.

Kept apart from :mod:`data_prep.tiny_tasks.awm` so importing the tiny task families does not import the
agent stack (Strands, the sandbox pools); ``infra.agents.envs.base`` names it as a built-in, so held-out
rows of ``agent_task_success`` roll out in any later stage without that stage importing stage 04.
"""

from __future__ import annotations

from typing import Any

from data_prep.tiny_tasks.awm import ENV, LIMITS, tiny_release
from infra.agents.awm.env import AwmEnv


class TinyAwmEnv(AwmEnv):
    """The ``awm`` environment over :func:`tiny_release` with the tiny episode budgets (``awm_tiny``)."""

    name = ENV

    def __init__(self, workers: int = 24, **limits: Any) -> None:  # a warm server per scenario, and spares
        super().__init__(str(tiny_release()), workers=workers, **{**LIMITS, **limits})
