"""The ``awm_agent`` tiny family: AgentWorldModel-format tool tasks on generated single-table scenarios.

The embedded scale of stage 04 (General Agent). :func:`tiny_release` writes, once per generator version,
a release in the public AWM format (:mod:`data_prep.awm_generate` with ``split_tables`` and
``lean``: every table of the four domains is its own scenario with five tools, so the schemas fit the
micro model's context) into ``$RUFUS_DATA_CACHE`` (default ``~/.cache/rufus/data``). The split:

* **held-out scenarios**: :data:`HELDOUT_SCENARIOS` of the 18 scenarios never appear in training;
* **held-out tasks**: a quarter of each other scenario's tasks (unseen tasks of seen scenarios);
* **train**: the remaining tasks of the seen scenarios: a quarter is RL-only (:func:`rl_only`), the
  rest are SFT demonstrations (:func:`sft_demo`).

The generator makes task ``i`` of kind ``KINDS[i % 4]`` (create, update, delete, look-up), so a split on
``i % 4`` would give each split one kind only (SFT only creates and updates, RL only deletes, the held-out
tasks of seen scenarios only look-ups). :func:`split_slot` rotates the slot by the round ``i // 4``
instead: every split holds every kind, in the same proportions as before.

Each task is a row of the ``agent`` environment running ``awm_tiny`` (:mod:`.awm_env`: the built-in
``awm`` environment over this release with the tiny episode budgets), scored by the task's code verifier
(``awm_verifier``). :func:`gold_conversations`
replays the generator's gold actions through the sandboxed servers and returns the SFT conversations
(real tool results, GLM tool calls) the SFT mix's General Agent family is made of.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_prep.awm_tasks import KINDS
from data_prep.tiny_tasks.common import (
    AGENT_LIMITS,
    TinyTask,
    agent_tiny_tasks,
    build_once,
    cache_root,
    check_split,
    code_key,
    rng_for,
)
from data_prep.tiny_tasks.common import is_repeat as is_repeat  # re-exported: the SFT sources use it

FAMILY = "awm_agent"
METRIC = "agent_task_success"
TASKS_PER_SCENARIO = 24
RELEASE_SEED = 0
ENV = "awm_tiny"
HELDOUT_SCENARIOS = 3
#: Episode budgets at the embedded scale: look up, act, answer (three model turns, one spare error).
LIMITS = dict(AGENT_LIMITS)
DONE = "Done."


def _code_key() -> str:
    from data_prep import awm_domains, awm_generate, awm_tasks

    return code_key(awm_domains, awm_generate, awm_tasks)


def tiny_release() -> Path:
    """Return the folder of the tiny release, generating it on first use (atomic rename).

    One release for every run seed (generator seed :data:`RELEASE_SEED`): the run seed orders the tasks,
    as a benchmark stays fixed while training seeds vary.
    """
    from data_prep.awm_generate import generate

    seed = RELEASE_SEED
    out = cache_root() / "awm_tiny" / f"seed{seed}-t{TASKS_PER_SCENARIO}-{_code_key()}"
    return build_once(
        out,
        lambda tmp: generate(tmp, seed=seed, tasks=TASKS_PER_SCENARIO, split_tables=True, lean=True),
        lambda p: (p / "gold_actions.jsonl").is_file(),
    )


def task_index(task_id: str) -> int:
    """Return the task index of an ``awm-<scenario>-<index>`` id (``-rK`` repeats are not task ids)."""
    return int(task_id.rsplit("-", 1)[1])


#: Slots of :func:`split_slot`: held-out tasks of seen scenarios, and the train tasks kept for RL.
HELDOUT_SLOT, RL_SLOT = 3, 2


def split_slot(index: int) -> int:
    """Return the split slot (0-3) of task ``index``: one task of each slot per round of four, rotating.

    Round ``r = index // 4`` holds one task of each kind (``index % 4``); adding the round rotates which
    kind lands in which slot, so over a scenario's 24 tasks every slot holds every kind (once or twice).
    """
    n = len(KINDS)
    return (index + index // n) % n


def rl_only(task_id: str) -> bool:
    """True for a train task SFT never demonstrates, kept for RL (a third of each seen scenario's).

    Stage 04 trains on these, as stage 05 trains on :func:`data_prep.tiny_tasks.harbor.rl_only`: requests
    whose records the policy never saw handled, like the held-out ones, so RL rewards reading the request
    and the tool results rather than replaying a memorized call.
    """
    return not is_repeat(task_id) and split_slot(task_index(task_id)) == RL_SLOT


def sft_demo(task: TinyTask) -> bool:
    """True for a train task whose gold trajectory SFT may show: not a cycled repeat, not in the RL third."""
    return not is_repeat(task.id) and not rl_only(task.id)


def split_of(scenarios: list[str]) -> set[str]:
    """Return the held-out scenario names (fixed, like the release)."""
    names = sorted(scenarios)
    rng_for("awm_heldout_scenarios", RELEASE_SEED).shuffle(names)
    return set(names[:HELDOUT_SCENARIOS])


def _pool(seed: int, split: str) -> list[tuple[str, int]]:
    from infra.agents.awm.release import load_release

    scenarios = load_release(tiny_release())
    unseen = split_of(list(scenarios))
    pool = []
    for name in sorted(scenarios):
        texts: set[str] = set()
        for task in scenarios[name].verified_tasks():
            if task.text in texts:  # one task twice (a table with few distinct look-ups): keep the first
                continue
            texts.add(task.text)
            heldout = name in unseen or split_slot(task.index) == HELDOUT_SLOT
            if heldout == (split == "heldout"):
                pool.append((name, task.index))
    rng_for("awm_pool", seed, split).shuffle(pool)
    return pool


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tasks of ``split`` (cycling with an ``-rK`` id suffix past the end of the pool)."""
    check_split(split)
    from data_prep.tiny_tasks.awm_env import TinyAwmEnv
    from infra.agents.awm.selfcheck import load_gold

    env, gold = TinyAwmEnv(), load_gold(tiny_release())
    return agent_tiny_tasks(
        n, _pool(seed, split),
        lambda item: env.task_of(env.runtime.scenario(item[0]), item[1]),
        lambda item: str(gold[item].get("final_answer") or "") or DONE,
        env=ENV, reward="awm_verifier", family=FAMILY, category="General Agent",
    )  # fmt: skip


def _openai_tools(lease: Any) -> list[dict[str, Any]]:
    """The scenario's tools exactly as the RL episode shows them (the env's tools, completed by Strands)."""
    from infra.agents.awm.env import endpoint_tool
    from infra.agents.awm.schemas import compact_tool_spec
    from infra.agents.tools import chat_tool_specs

    return chat_tool_specs([endpoint_tool(lease, compact_tool_spec(s)) for s in lease.tool_specs])


def gold_conversations(tasks: list[TinyTask]) -> list[dict[str, Any]]:
    """Return OpenAI-format conversations of ``tasks``' gold actions, tool results from the sandboxed servers.

    One assistant turn per gold call (GLM tool call), the server's real reply as the tool message, then
    the final answer. A task whose gold call the server rejects is left out (the generator self-checks,
    so that means the release changed under us).
    """
    from infra.agents.awm.release import load_release
    from infra.agents.awm.selfcheck import load_gold
    from infra.agents.awm.server import AwmServerPool

    release = tiny_release()
    scenarios, gold = load_release(release), load_gold(release)
    pool = AwmServerPool(2)
    rows: dict[int, dict[str, Any]] = {}
    order = sorted(range(len(tasks)), key=lambda i: (str(tasks[i].metadata["scenario"]), i))
    try:  # grouped by scenario: each server boots once (~1 s) and is reset (~1 ms) between tasks
        for i in order:
            task = tasks[i]
            name, idx = str(task.metadata["scenario"]), int(task.metadata["task_idx"])
            lease = pool.acquire(scenarios[name])
            try:
                messages, ok = [dict(m) for m in task.prompt], True
                for k, action in enumerate(gold[(name, idx)]["actions"]):
                    args = json.dumps(action["arguments"])
                    reply = lease.call_tool(action["tool"], args)
                    ok = ok and int(reply["status"]) < 400
                    call = f"{task.id}-call{k}"
                    fn = {"name": action["tool"], "arguments": args}
                    messages += [
                        {"role": "assistant", "content": "",
                         "tool_calls": [{"id": call, "type": "function", "function": fn}]},
                        {"role": "tool", "tool_call_id": call, "name": action["tool"],
                         "content": str(reply["body"])},
                    ]  # fmt: skip
                tools = _openai_tools(lease)
            finally:
                pool.release(lease)
            if ok:
                messages.append({"role": "assistant", "content": task.answer})
                rows[i] = {"id": task.id, "messages": messages, "tools": tools}
    finally:
        pool.close()
    return [rows[i] for i in sorted(rows)]
