"""The ``search_agent`` tiny family: multi-hop questions over a generated offline wiki (stage 06, embedded).

The world and its questions come from :mod:`.search_world` (``pages.jsonl``, ``questions.jsonl`` under
``$RUFUS_DATA_CACHE``). The split is fixed by the world, like Harbor's task set:

* **held-out templates**: :data:`~.search_world.HELDOUT_TEMPLATES` never appear in training;
* **held-out regions**: every fourth region of the world, so no training trajectory reads their pages;
* **train**: the other (template, start entity) instances (SFT conversations and RL prompts).

Each question is a row of the ``agent`` environment running ``search_tiny`` (written separately: the
world's page store behind ``web_search`` and ``web_scrape``), scored by ``search_judge`` with the
deterministic judge; the row's metadata names the world folder and carries the gold answer, aliases and
tool plan. :func:`gold_conversations` renders each gold plan as an SFT conversation: one assistant tool
call per step, the tool's text as the tool message, then ``<answer>...</answer>``.

The tool texts are the environment's own: :func:`gold_conversations` calls ``infra.agents.search``'s
``web_search`` and ``web_scrape`` over the world's page store with :data:`TOOLS_CONFIG`, which
``search_tiny`` must use too, so the SFT text is exactly what the policy sees in an episode.
"""

from __future__ import annotations

import asyncio
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from data_prep.tiny_tasks.common import AGENT_LIMITS, TinyTask, check_split, rng_for
from data_prep.tiny_tasks.common import is_repeat as is_repeat  # re-exported for this family's users
from data_prep.tiny_tasks.search_world import load_questions, world_root

FAMILY = "search_agent"
METRIC = "search_accuracy"
EVAL_REWARD = "search_accuracy"  # held-out: the judge's grade, gates off (rewards.search_agent)
REWARD = "search_judge"
JUDGE = "deterministic"
ENV = "search_tiny"
TOOLS_ENABLED = ["web_search", "web_scrape"]
#: ``SearchToolsConfig`` of the tools at this scale (``search_tiny`` must use the same): three results; a
#: 60-character snippet shows a page's fact-free lead, so the facts need a scrape; pages fit the budget.
TOOLS_CONFIG = {"results": 3, "snippet_chars": 60, "page_budget_tokens": 160}
#: Episode budgets at the embedded scale: a search and a scrape per hop (4 hops at most), then the answer.
#: The tool limiter ends an episode once the last allowed call's result is back, so 8 calls need a budget
#: of 9 for the answering turn to happen.
LIMITS = {**AGENT_LIMITS, "max_tool_calls": 9, "max_iterations": 9, "max_context_tokens": 2048}
SYSTEM_PROMPT = (
    "Search each name with web_search, read its page with web_scrape, and follow the facts. "
    "Answer as <answer>...</answer>."
)


@lru_cache(maxsize=2)
def _questions(root: str) -> tuple[dict[str, Any], ...]:
    return tuple(load_questions(Path(root)))


def _pool(seed: int, split: str) -> list[dict[str, Any]]:
    pool = [q for q in _questions(str(world_root())) if q["split"] == split]
    rng_for("search_pool", seed, split).shuffle(pool)
    return pool


def _row(q: dict[str, Any], root: Path, task_id: str, options: Any) -> TinyTask:
    from infra.agents.contract import AgentTask, EpisodeLimits
    from infra.environments.agent import task_row

    label = {"answer": q["answer"], "aliases": list(q["aliases"])}
    meta = {
        "env": ENV,
        "world": str(root),
        "question_id": q["id"],
        "template": q["template"],
        "hops": q["hops"],
        "question": q["question"],
        "judge": JUDGE,
        "gold": {**label, "plan": q["plan"]},
    }
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q["question"]}]
    task = AgentTask(
        id=task_id, messages=messages, tools=TOOLS_ENABLED, ground_truth=label,
        limits=EpisodeLimits(**LIMITS), metadata=meta,
    )  # fmt: skip
    row = task_row(task, options, reward=REWARD)
    meta = {**row.metadata, "family": FAMILY, "source": "tiny_tasks", "category": "General Agent"}
    return TinyTask(task_id, messages, label, meta, "", f"<answer>{q['answer']}</answer>")


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` questions of ``split`` (cycling with an ``-rK`` id suffix past the end of the pool)."""
    from infra.environments.agent import AgentOptions

    check_split(split)
    root = world_root()
    options = AgentOptions(env=ENV)  # checks the spec once: search_tiny loads
    pool = _pool(seed, split)
    out = []
    for i in range(n):
        q = pool[i % len(pool)]
        suffix = f"-r{i // len(pool)}" if i >= len(pool) else ""
        out.append(_row(q, root, f"search-{q['id']}{suffix}", options))
    return out


# ---- gold conversations through the environment's tools -------------------------------------------------
@lru_cache(maxsize=2)
def _tools(root: str) -> dict[str, Any]:
    """The world's ``web_search`` and ``web_scrape`` tools by name (built once per world)."""
    from infra.agents.search.store import BM25Index, PageStore
    from infra.agents.search.tools import SearchToolsConfig, build_search_tools

    index = BM25Index.build(PageStore.load(Path(root) / "pages.jsonl"))
    tools = build_search_tools(SearchToolsConfig(**TOOLS_CONFIG), index=index, with_python=False)
    return {tool.tool_name: tool for tool in tools}


def tool_specs(root: Path | None = None) -> list[dict[str, Any]]:
    """Return the two tools in OpenAI format, as the chat template renders them in an episode."""
    from infra.agents.tools import chat_tool_specs

    return chat_tool_specs(list(_tools(str(root or world_root())).values()))


def call_tool(root: Path, call_id: str, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Return the text of one tool call on the world at ``root`` and whether it succeeded."""
    from infra.agents.tools import result_text

    async def run() -> dict[str, Any]:
        use = {"toolUseId": call_id, "name": name, "input": arguments}
        events = [event async for event in _tools(str(root))[name].stream(use, {})]
        return events[-1]["tool_result"]

    result = asyncio.run(run())
    return result_text(result), result.get("status") == "success"


def _conversation(task: TinyTask) -> dict[str, Any] | None:
    root, gold = Path(task.metadata["world"]), task.metadata["gold"]
    messages: list[dict[str, Any]] = [dict(m) for m in task.prompt]
    shown, last_page = "", ""
    for k, step in enumerate(gold["plan"][:-1]):
        name, args = step["name"], step["arguments"]
        if name not in TOOLS_ENABLED or (
            name == "web_scrape" and f"URL: {args['url']}\n" not in shown + "\n"
        ):
            return None  # an unknown step, or a scrape of a URL the search before it did not show
        call = f"{task.id}-call{k}"
        result, ok = call_tool(root, call, name, args)
        if not ok:
            return None
        shown, last_page = (result, last_page) if name == "web_search" else (shown, result)
        fn = {"name": name, "arguments": json.dumps(args)}
        tool_calls = [{"id": call, "type": "function", "function": fn}]
        messages += [
            {"role": "assistant", "content": "", "tool_calls": tool_calls},
            {"role": "tool", "tool_call_id": call, "name": name, "content": result},
        ]
    if gold["plan"][-1] != {"name": "answer", "arguments": {"answer": gold["answer"]}}:
        return None
    if gold["answer"].casefold() not in last_page.casefold():
        return None
    messages.append({"role": "assistant", "content": task.answer})
    return {"id": task.id, "messages": messages, "tools": tool_specs(root)}


def gold_conversations(tasks: list[TinyTask]) -> list[dict[str, Any]]:
    """Return OpenAI-format conversations of ``tasks``' gold tool plans, tool texts from the world's pages.

    One assistant turn per plan step (a GLM ``web_search`` or ``web_scrape`` call), the tool's text as the
    tool message, then ``<answer>...</answer>``. A plan with a failed call, a scrape of a URL its search
    did not show, or a last page without the answer is left out (the generator self-checks, so that means
    the world or the tools changed under us).
    """
    rows = (_conversation(t) for t in tasks)
    return [row for row in rows if row is not None]
