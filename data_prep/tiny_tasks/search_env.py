"""The ``search_tiny`` agent environment: the built-in ``search`` environment over the tiny generated world.

Kept apart from :mod:`data_prep.tiny_tasks.search` so importing the tiny task families does not import the
agent stack (Strands, bm25s); ``infra.agents.envs.base`` names it as a built-in, so held-out rows of
``search_accuracy`` roll out in any later stage without that stage importing stage 06. Each task searches
the page store of its own world (``metadata["world"]/pages.jsonl``, indexed once per process), with the
family's tool settings (:data:`~data_prep.tiny_tasks.search.TOOLS_CONFIG`, the ones its SFT conversations
were rendered with), system prompt and budgets, and the deterministic judge unless a row names another.
It takes the ``search`` options other than ``backend``, ``store`` and ``index``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data_prep.tiny_tasks.search import ENV, JUDGE, LIMITS, SYSTEM_PROMPT, TOOLS_CONFIG
from infra.agents.contract import AgentTask
from infra.agents.search.env import SearchEnv


class TinySearchEnv(SearchEnv):
    """The ``search`` environment over each task's tiny world, with the tiny budgets (``search_tiny``)."""

    name = ENV
    system_prompt = SYSTEM_PROMPT
    default_judge = JUDGE
    store_option_required = False

    def __init__(self, **options: Any) -> None:
        for key in ("backend", "store", "index"):
            if key in options:
                raise ValueError(f"{ENV} option {key}: the page store is each task's world; not an option")
        super().__init__(backend="local", **{**TOOLS_CONFIG, **LIMITS, **options})

    def store_of(self, task: AgentTask) -> str:
        """Return ``metadata["world"]/pages.jsonl`` of ``task``."""
        world = task.metadata.get("world")
        if not world:
            raise ValueError(f"{ENV} task {task.id!r}: metadata has no 'world' folder")
        return str((Path(str(world)) / "pages.jsonl").resolve())

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` train questions of the tiny world, as the family's rows describe them."""
        from data_prep.tiny_tasks.search import generate
        from infra.agents.slime_generate import task_from_parts

        return [task_from_parts(t.prompt, t.label, t.metadata, t.id) for t in generate(n, seed)]
