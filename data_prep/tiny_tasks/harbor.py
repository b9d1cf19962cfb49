"""The ``terminal_agent`` tiny family: Harbor-format terminal tasks for the embedded scale of stage 05.

:func:`tiny_tasks_root` writes, once per generator version, :data:`TASKS` task folders in Harbor's layout
(``instruction.md``, ``environment/``, ``tests/test.sh``, ``solution/solve.sh``; written and checked by
:mod:`data_prep.harbor_generate` from the specs of :mod:`.harbor_specs`: coreutils text work, a crashing
Python script, a broken JSON/INI file, a failing unittest suite) into ``$RUFUS_DATA_CACHE``
(default ``~/.cache/rufus/data``). The split is fixed, like the task root:

* **held-out variants**: :data:`HELDOUT_VARIANTS` (``tail`` beside the seen ``head``, ``ini-value`` beside
  the seen ``json-value``) never appear in training;
* **held-out tasks**: every fourth instance of each other variant (unseen files and values);
* **train**: the remaining instances (SFT conversations and RL prompts).

Each task is a row of the ``agent`` environment running ``harbor_tiny`` (:mod:`.harbor_env`: the built-in
``harbor`` environment over this root with tiny budgets), scored by the task's own tests
(``harbor_tests``). :func:`gold_conversations` runs each task's reference commands through the
``execute_command`` tool in a fresh sandbox and returns the SFT conversations (real tool output, GLM tool
calls) of the SFT mix's Coding Agent terminal family; a conversation whose tests do not pass is left out.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

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
from data_prep.tiny_tasks.common import is_repeat as is_repeat  # re-exported for this family's users
from data_prep.tiny_tasks.harbor_specs import VARIANTS, instance_of, make_task, variant_of

FAMILY = "terminal_agent"
METRIC = "terminal_task_success"
REWARD = "harbor_tests"
ENV = "harbor_tiny"
ROOT_SEED = 0
INSTANCES = 24  # per variant: 20 variants -> 480 tasks, 324 train and 156 held out
TASKS = INSTANCES * len(VARIANTS)
HELDOUT_VARIANTS = (("text", "tail"), ("config", "ini-value"))
#: Episode budgets at the embedded scale: run the command, answer (one spare turn, one spare error).
LIMITS = dict(AGENT_LIMITS)
#: The ``harbor`` environment's runtime options at this scale: one spare sandbox per task, small outputs.
RUNTIME = {
    "spares": 1,
    "runtimes": 16,
    "command_timeout": 10,
    "verifier_timeout": 30,
    "output_tokens": 80,
    "workspace_mb": 16,
}
DONE = "Done."


def _code_key() -> str:
    from data_prep import harbor_generate, harbor_verifier
    from data_prep.tiny_tasks import harbor_specs

    return code_key(harbor_generate, harbor_verifier, harbor_specs)


def tiny_tasks_root() -> Path:
    """Return the folder of the tiny task set, generating it on first use (atomic rename).

    One task set for every run seed (generator seed :data:`ROOT_SEED`): the run seed orders the tasks, as a
    benchmark stays fixed while training seeds vary. The key holds the generator code's hash and the count.
    """
    from data_prep.harbor_generate import generate

    out = cache_root() / "harbor_tiny" / f"seed{ROOT_SEED}-t{TASKS}-{_code_key()}"
    if out.is_dir():
        return out
    instructions = [make_task(ROOT_SEED, i).spec.instruction for i in range(TASKS)]
    if len(set(instructions)) != TASKS:  # the held-out screens would drop train tasks equal to held-out ones
        raise RuntimeError(f"data_prep.tiny_tasks.harbor_specs: {TASKS} tasks share instructions")
    return build_once(out, lambda tmp: generate(tmp, seed=ROOT_SEED, n=TASKS, make=make_task))


def index_of(name: str) -> int:
    """Return the index of task folder ``name`` (``<kind>-<variant>-<index>``)."""
    return int(name.rsplit("-", 1)[1])


def is_heldout(index: int) -> bool:
    """True for a held-out task: a held-out variant, or every fourth instance of the others."""
    return variant_of(index) in HELDOUT_VARIANTS or instance_of(index) % 4 == 3


def rl_only(name: str) -> bool:
    """True for a train task SFT never demonstrates, kept for RL (a third of each variant's train instances).

    Stage 05 trains on these: tasks whose names the policy has never seen demonstrated, as on the held-out
    set, so RL rewards copying names from the prompt rather than recalling a memorized command.
    """
    return not is_repeat(name) and not is_heldout(index_of(name)) and instance_of(index_of(name)) % 4 == 2


def sft_demo(task: TinyTask) -> bool:
    """True for a train task whose gold trajectory SFT may show: not a cycled repeat, not in the RL third."""
    return not is_repeat(task.id) and not rl_only(task.id)


def _pool(env: Any, seed: int, split: str) -> list[str]:
    names = sorted(n for n in env.catalog.tasks if is_heldout(index_of(n)) == (split == "heldout"))
    rng_for("harbor_pool", seed, split).shuffle(names)
    return names


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tasks of ``split`` (cycling with an ``-rK`` id suffix past the end of the pool)."""
    check_split(split)
    from data_prep.tiny_tasks.harbor_env import TinyHarborEnv

    env = TinyHarborEnv()
    return agent_tiny_tasks(
        n, _pool(env, seed, split), lambda name: env.task_of(env.catalog.task(name)), lambda _: DONE,
        env=ENV, reward=REWARD, family=FAMILY, category="Coding Agent",
    )  # fmt: skip


def reference_commands(task_dir: Path) -> list[str]:
    """Return the commands of a task's ``solution/solve.sh`` (one per line; comments and blanks skipped)."""
    lines = (Path(task_dir) / "solution" / "solve.sh").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _call_tool(tool: Any, call_id: str, command: str) -> str:
    from infra.agents.tools import result_text

    async def run() -> dict[str, Any]:
        use = {"toolUseId": call_id, "name": tool.tool_name, "input": {"command": command}}
        events = [event async for event in tool.stream(use, {})]
        return events[-1]["tool_result"]

    return result_text(asyncio.run(run()))


def _conversation(env: Any, opts: Any, cache: Any, task: TinyTask) -> dict[str, Any] | None:
    from infra.agents.harbor.local_runtime import open_session
    from infra.agents.harbor.runtime import execute_command_tool
    from infra.agents.tools import chat_tool_specs

    harbor_task = env.catalog.task(str(task.metadata["task"]))
    key, session = open_session(harbor_task, opts, cache)
    try:
        tool = execute_command_tool(session, budget_tokens=opts.output_tokens)
        messages = [dict(m) for m in task.prompt]
        for k, command in enumerate(reference_commands(harbor_task.task_dir)):
            call = f"{task.id}-call{k}"
            fn = {"name": tool.tool_name, "arguments": json.dumps({"command": command})}
            messages += [
                {"role": "assistant", "content": "",
                 "tool_calls": [{"id": call, "type": "function", "function": fn}]},
                {"role": "tool", "tool_call_id": call, "name": tool.tool_name,
                 "content": _call_tool(tool, call, command)},
            ]  # fmt: skip
        result = session.verify()
    finally:
        session.close()
        cache.release(key)
    if result.score != 1.0 or result.aborted:
        return None
    messages.append({"role": "assistant", "content": task.answer})
    return {"id": task.id, "messages": messages, "tools": chat_tool_specs([tool])}


def gold_conversations(tasks: list[TinyTask], workers: int = 4) -> list[dict[str, Any]]:
    """Return OpenAI-format conversations of ``tasks``' reference commands, run in the sandbox.

    One assistant turn per command (a GLM ``execute_command`` call), the command's real output as the tool
    message (stdout, ``[stderr]``, ``[exit code]``, or ``(no output)``), then the final answer. Each task
    runs in a fresh sandbox of its files and its tests run at the end: a task they fail is left out (the
    generator self-checks, so that means the task set changed under us). A sandbox that does not boot
    raises ``EnvironmentFailure``.
    """
    if not tasks:
        return []
    from data_prep.tiny_tasks.harbor_env import TinyHarborEnv
    from infra.agents.harbor.local_runtime import runtime_cache

    env = TinyHarborEnv()
    opts, cache = replace(env.options, spares=0), runtime_cache()  # each task runs once: boot on demand
    with ThreadPoolExecutor(max(1, workers)) as pool:
        rows = list(pool.map(lambda t: _conversation(env, opts, cache, t), tasks))
    return [row for row in rows if row is not None]
