"""``kw_tiny``: the ``kw`` environment over the embedded generators' task set, with the tiny options.

Kept apart from :mod:`.family` so the tiny family (data prep, held-out sets) imports without the agent
stack; ``infra.agents.envs.base`` names it as a built-in, so held-out rows of ``kw_rubric_score`` roll out
in any later stage without that stage importing stage 08.
"""

from __future__ import annotations

from typing import Any

from infra.agents.kw.env import KwEnv
from infra.agents.kw.family import ENV, OPTIONS, tiny_release


class TinyKwEnv(KwEnv):
    """The ``kw`` environment over :func:`tiny_release` with the tiny options (``kw_tiny``): budgets, sandbox
    sizes and the tools offered (:data:`~infra.agents.kw.family.OPTIONS`); ``options`` override them."""

    name = ENV

    def __init__(self, **options: Any) -> None:
        super().__init__(str(tiny_release()), **{**OPTIONS, **options})
