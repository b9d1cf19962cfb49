"""Gold knowledge-work trajectories for the SFT mix (``workspace_agent``) and the SFT/RL split of ``kw_tiny``.

The embedded SFT mix's workspace family, built as the terminal family is for stage 05 (:mod:`.harbor`):
:func:`gold_conversations` runs each train task of the ``kw_tiny`` task set (:mod:`infra.agents.kw.family`)
as an episode of the real environment (:class:`~infra.agents.kw.tiny.TinyKwEnv` with ``kw_tiny``'s options,
:data:`infra.agents.kw.family.OPTIONS`, as stage 08's RL runs it: a fresh Feather sandbox holding the task's
documents, a fresh system-of-record server) and records:

* the prompt the environment gives the policy (Feather's system prompt and the instruction);
* the tools it offers (``kw_tiny``: Feather's read, write and bash with compact specs, and the service's
  ``list_`` endpoint) as the agent loop shows them: the specs as Strands' ``ToolRegistry`` completes them
  (it adds a description to every property), rendered for the chat template by strands-sglang's own
  ``SGLangModel.format_tool_specs``;
* one assistant turn per call, each a GLM tool call: first the lookups that fetch the data the deliverable
  is made of (:func:`lookup_actions`: the system of record's ``list_`` endpoint, queried narrowly enough to
  fit the result budget, and the input document the reference does not read itself), then the reference's
  calls (:func:`~infra.agents.kw.family.gold_actions`: read, then ``write`` a text deliverable or ``bash``
  an openpyxl script for a workbook, whose totals are formulas over the amounts the lookups showed); a
  demonstration that wrote the answer without looking at the data would teach the policy to recall
  values, not to fetch them, and one that wrote a literal total, to add in its head;
* each call's real tool result, truncated as the loop's tool layer truncates it
  (:func:`infra.agents.tools.truncate_to_tokens`, ``tool_result_max_tokens`` of the tiny budgets, under
  the policy's tokenizer: the micro model's at this scale);
* the final answer ``Done.``.

The episode is then graded by the environment (``kw_rubric`` on the deliverables copied out of ``/app``).
Left out: a task whose plan exceeds the tiny tool-call budget, a call that fails, a result the budget cuts
(the demonstration would write values it never showed) and deliverables scoring below 1.0 (the generator
self-checks, so the last two mean the task set or the environment changed under us). A sandbox that does
not boot raises ``EnvironmentFailure``; a plan calling a tool the options do not offer raises
``ValueError``. Not checked here: a turn's length against the per-call budget (``max_new_tokens``; the
tests check that every gold turn fits it).

The split (fixed, like the task set): train task ``i`` is RL-only (:func:`rl_only`) when ``(i // 3) % 3 ==
2``, a third of each of the three environment types (``i % 3``); SFT demonstrates only the others
(:func:`sft_demo`), so RL keeps tasks whose values the policy never saw written out.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
from pathlib import Path
from typing import Any

from data_prep.tiny_tasks.common import TinyTask, is_repeat

FAMILY = "knowledge_work"
_NAME = re.compile(r"kw-(train|heldout)-\d+-(\d+)-[a-z]+\d+(?:-r\d+)?")


def task_index(name: str) -> tuple[str, int]:
    """Return ``(split, index)`` of a kw_tiny task name (``kw-<split>-<seed>-<index>-<proposer><k>[-rK]``)."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"knowledge_work task name {name!r}: expected kw-<split>-<seed>-<index>-<proposer><k>"
        )
    return match.group(1), int(match.group(2))


def rl_only(name: str) -> bool:
    """True for a train task SFT never demonstrates, kept for RL (a third of each environment type's)."""
    split, index = task_index(name)
    return split == "train" and not is_repeat(name) and (index // 3) % 3 == 2


def sft_demo(task: TinyTask) -> bool:
    """True for a train task whose gold trajectory SFT may show: not a cycled repeat, not in the RL third."""
    split, _ = task_index(task.id)
    return split == "train" and not is_repeat(task.id) and not rl_only(task.id)


def _column(path: Path, column: str) -> list[str]:
    with path.open(newline="") as fh:
        return [row[column] for row in csv.DictReader(fh)]


def lookup_actions(spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """The calls that fetch the data a task's reference deliverable is made of, per environment type.

    Queries narrow enough that every result fits the tiny budget's ``tool_result_max_tokens`` (a whole
    table of five rows does not): the tracker file, then the system's row of each ticket on it; the
    counterparty's active contracts (its name from the task's ground truth); the invoice file, then the
    ledger entry of each invoice on it.
    """
    from data_prep.kw_synthesis import read_task

    env_type, files = spec.metadata.get("env_type"), Path(spec.files_dir)
    if env_type == "ticket_tracker_update":
        tracker = next(files.glob("*_tracker.csv"))
        rows = [("list_tickets", {"ticket": t}) for t in _column(tracker, "ticket")]
        plan = [("read", {"file_path": tracker.name}), *rows]
    elif env_type == "contract_dates_memo":
        party = read_task(spec.task_dir)[2].facts["counterparty"]
        plan = [("list_contracts", {"counterparty": party, "status": "active"})]
    elif env_type == "invoice_ledger_reconciliation":
        invoices = next(files.glob("*_invoices.csv"))
        rows = [("list_gl_entries", {"ref": r}) for r in _column(invoices, "invoice_id")]
        plan = [("read", {"file_path": invoices.name}), *rows]
    else:
        raise ValueError(f"knowledge_work task {spec.name}: no lookup plan for environment type {env_type!r}")
    offered = {op for service in spec.services for op in service.operation_ids()}
    missing = sorted({name for name, _ in plan if name != "read"} - offered)
    if missing:
        raise ValueError(f"knowledge_work task {spec.name}: its services offer no {', '.join(missing)}")
    return plan


def gold_plan(spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """The trajectory's calls: :func:`lookup_actions`, then the reference's calls (a file read once)."""
    from infra.agents.kw.family import gold_actions

    lookups = lookup_actions(spec)
    return lookups + [a for a in gold_actions(spec.task_dir) if a[0] != "read" or a not in lookups]


def _micro_tokenizer() -> Any:
    from infra.agents.local_server import micro_model_dir
    from infra.embedded.models import load_tokenizer

    return load_tokenizer(micro_model_dir())


async def _episode(env: Any, task: TinyTask, tokenizer: Any) -> dict[str, Any] | None:
    from infra.agents.kw.family import DONE, LIMITS
    from infra.agents.tools import chat_tool_specs, result_text, truncate_to_tokens
    from rewards.contract import RewardRequest

    spec = env.catalog.task(str(task.metadata["task"]))
    agent_task = env.task_of(spec)
    actions = gold_plan(spec)
    if len(actions) > min(LIMITS["max_tool_calls"], LIMITS["max_iterations"]):
        return None
    await env.reset(agent_task)
    try:
        tools = {tool.tool_name: tool for tool in env.tools()}
        missing = sorted({name for name, _ in actions} - set(tools))
        if missing:
            raise ValueError(
                f"knowledge_work task {spec.name}: its gold plan calls {', '.join(missing)}, which the "
                f"environment's tools option does not offer ({', '.join(tools)})"
            )
        messages = [dict(m) for m in task.prompt]
        for k, (name, args) in enumerate(actions):
            call = f"{task.id}-call{k}"
            events = [
                e async for e in tools[name].stream({"toolUseId": call, "name": name, "input": args}, {})
            ]
            result = events[-1]["tool_result"]
            if result.get("status") != "success":
                return None
            text, cut = truncate_to_tokens(result_text(result), tokenizer, LIMITS["tool_result_max_tokens"])
            if cut:  # the demonstration would write values its episode never showed
                return None
            fn = {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}
            messages += [
                {"role": "assistant", "content": "",
                 "tool_calls": [{"id": call, "type": "function", "function": fn}]},
                {"role": "tool", "tool_call_id": call, "name": name, "content": text},
            ]  # fmt: skip
        request = RewardRequest(prompt=agent_task.messages, response=DONE, label=agent_task.ground_truth,
                                metadata=agent_task.metadata)  # fmt: skip
        graded = env.score(agent_task, request)
        rendered = chat_tool_specs(list(tools.values()))
    finally:
        await env.cleanup()
    if graded.aborted or graded.score != 1.0:
        return None
    messages.append({"role": "assistant", "content": DONE})
    return {"id": task.id, "messages": messages, "tools": rendered}


def gold_conversations(tasks: list[TinyTask], tokenizer: Any = None) -> list[dict[str, Any]]:
    """Return OpenAI-format conversations of ``tasks``' gold calls, run as episodes of ``kw_tiny``.

    ``tasks`` are rows of the ``knowledge_work`` family (:func:`infra.agents.kw.family.generate`);
    ``tokenizer`` truncates tool results as the agent loop does (default: the micro model's). Tasks whose
    calls fail or whose deliverables score below 1.0 are left out.
    """
    if not tasks:
        return []
    from infra.agents.kw.tiny import TinyKwEnv

    env, tok = TinyKwEnv(), tokenizer if tokenizer is not None else _micro_tokenizer()
    rows = [asyncio.run(_episode(env, task, tok)) for task in tasks]
    return [row for row in rows if row is not None]
