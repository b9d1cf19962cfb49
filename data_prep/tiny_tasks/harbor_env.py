"""The ``harbor_tiny`` agent environment: the built-in ``harbor`` environment over the tiny task set.

Kept apart from :mod:`data_prep.tiny_tasks.harbor` so importing the tiny task families does not import the
agent stack (Strands, the sandbox); ``infra.agents.envs.base`` names it as a built-in, so held-out rows of
``terminal_task_success`` roll out in any later stage without that stage importing stage 05. It takes
every ``harbor`` option, the FireFlash ones included (``harbor_tiny:partial_credit=1,redirect_outputs=1,
background_long_commands=1,compress_at=0.85``), over the tiny defaults.
"""

from __future__ import annotations

from typing import Any

from data_prep.tiny_tasks.harbor import ENV, LIMITS, RUNTIME, tiny_tasks_root
from infra.agents.harbor.env import HarborEnv


class TinyHarborEnv(HarborEnv):
    """The ``harbor`` environment over :func:`tiny_tasks_root` with the tiny budgets (``harbor_tiny``)."""

    name = ENV

    def __init__(self, **options: Any) -> None:
        super().__init__(str(tiny_tasks_root()), **{**RUNTIME, **LIMITS, **options})
