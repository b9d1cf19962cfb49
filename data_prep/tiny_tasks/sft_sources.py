"""The SFT stage's embedded sources: tiny-task conversations written as local files in public formats.

No hub exists at the embedded scale, so :func:`write_embedded_sources` writes one JSONL file per family in
the formats the SFT builder converts (ShareGPT ``conversations`` with Hermes tool calls, OpenAI
``messages`` with structured tool calls/results and separate or inline reasoning, prompt/response with a
``reasoning`` field), plus calculator and test-runner tool chats, AWM tool-task trajectories
(:mod:`.awm`), Harbor terminal-task trajectories (:mod:`.harbor`) and search trajectories
(:mod:`.search`) and knowledge-work trajectories in the Feather workspace (:mod:`.knowledge_work_sft`).
Every file is sprinkled with malformed rows (:data:`MALFORMED`) that the builder must drop and count, and
tasks are screened against the held-out sets first (:func:`screened_tasks`) so each family keeps its size.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from data_prep.decontam_pipeline import row_text
from data_prep.decontaminate import PhraseIndex, scan_texts
from data_prep.io import atomic_write_text
from data_prep.sources import SourceSpec, local_source
from data_prep.tiny_tasks import TinyTask, awm, generate, harbor, knowledge_work_sft, register_family, search
from data_prep.tiny_tasks.code import run_reference
from data_prep.tiny_tasks.rl_prep import screened_messages

# Table 3 category of each embedded family.
FAMILY_CATEGORY = {
    "math": "Math",
    "puzzle": "STEM",
    "science": "STEM",
    "code": "Code",
    "if_multi_constraint": "General Chat",
    "if_multiturn": "General Chat",
}
GENERATED = "generated offline (data_prep.tiny_tasks)"
CONTROL_LINES = (r"^\s*detailed thinking (on|off)\s*$",)  # generator mode switches, not personas


def _tool(name: str, description: str, arg: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


CALCULATOR = _tool("calculator", "Evaluate an arithmetic expression with + - * /.", "expression")
RUN_TESTS = _tool("run_tests", "Run the task's unit tests on Python code; returns pass/fail counts.", "code")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
# Malformed rows planted per format, cycled; each is named by the reason code the builder counts.
MALFORMED = {
    "sharegpt": ("invalid_json", "unknown_role", "no_supervised_reply", "not_an_object"),
    "openai": ("invalid_json", "missing_messages", "bad_tool_arguments", "no_supervised_reply"),
    "prompt_response": ("invalid_json", "missing_prompt_response", "bad_prompt_response", "not_an_object"),
}


def calculate(expression: str) -> str:
    """Return the value of an arithmetic expression (numbers, + - * /, unary minus) as text.

    A small AST walker rather than ``eval``: the calculator tool must evaluate arithmetic and nothing else.
    """

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"calculator: unsupported expression {expression!r}")

    value = ev(ast.parse(expression, mode="eval").body)
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _sharegpt_row(rid: str, task: TinyTask, variant: int) -> dict:
    """Inline ``<think>`` in the reply; variants exercise the repairs (control line, suffix, tags)."""
    reply = [
        f"<think>{task.reasoning}</think>\n{task.answer}",
        f"<think>{task.reasoning}</think>\n{task.answer}",
        f"<think>{task.reasoning}</think>\n{task.answer}<|im_end|>",
        f"<think>{task.reasoning}</think>\n<answer>{task.answer}</answer>",
        f"{task.reasoning}</think>\n{task.answer}",  # opening tag lost upstream
    ][variant % 5]
    system = [{"from": "system", "value": "detailed thinking on"}] if variant % 5 == 1 else []
    human = {"from": "human", "value": task.prompt[-1]["content"]}
    return {"id": rid, "conversations": [*system, human, {"from": "gpt", "value": reply}]}


def _openai_row(rid: str, task: TinyTask, i: int) -> dict:
    """Prompt turns as given; the reply's reasoning in ``reasoning_content`` (even ``i``) or inline parts."""
    last: dict[str, Any] = {"role": "assistant", "content": task.answer, "reasoning_content": task.reasoning}
    if i % 2:
        last = {"role": "assistant", "content": [{"type": "text", "text": task.response()}]}
    return {"id": rid, "messages": [*task.prompt, last]}


def _prompt_response_row(rid: str, task: TinyTask, _: int) -> dict:
    prompt = task.prompt[-1]["content"]
    return {"id": rid, "prompt": prompt, "response": task.answer, "reasoning": task.reasoning}


def _calculator_row(rid: str, requests: list[TinyTask], _: int) -> dict:
    """One or two requests, each a calculator call, its computed result and the final answer."""
    messages: list[dict[str, Any]] = []
    for k, task in enumerate(requests):
        expr, call = task.reasoning.split("=")[0].strip(), f"{rid}-call{k}"
        value = calculate(expr)
        fn = {"name": "calculator", "arguments": json.dumps({"expression": expr})}
        messages += [
            {"role": "user", "content": f"{task.prompt[-1]['content']} Use the calculator."},
            {"role": "assistant", "content": "", "reasoning_content": f"I need {expr}.",
             "tool_calls": [{"id": call, "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": call, "name": "calculator", "content": value},
            {"role": "assistant", "content": f"\\boxed{{{value}}}", "reasoning_content": f"So {value}."},
        ]  # fmt: skip
    return {"id": rid, "messages": messages, "tools": [CALCULATOR]}


def _test_runner_row(rid: str, task: TinyTask, _: int) -> dict:
    """Hermes-style ShareGPT: call the test tool on the code, read its real result, answer with the code."""
    try:
        passed = run_reference(task)
    except AssertionError:
        passed = False
    n = len(task.label["tests"])
    result = {"passed": n if passed else 0, "failed": 0 if passed else n}
    code = task.answer.removeprefix("```python\n").removesuffix("\n```")
    call = json.dumps({"name": "run_tests", "arguments": {"code": code}})
    turns = [
        ("system", f"You can run code before answering.\n<tools>{json.dumps([RUN_TESTS])}</tools>"),
        ("human", f"{task.prompt[-1]['content']} Run the tests first."),
        ("gpt", f"<think>Write it, then test.</think>\n<tool_call>{call}</tool_call>"),
        ("tool", f"<tool_response>{json.dumps(result)}</tool_response>"),
        ("gpt", f"<think>{result['passed']} passed.</think>\n{task.answer}"),
    ]
    return {"id": rid, "conversations": [{"from": f, "value": v} for f, v in turns]}


def _malformed_line(reason: str, fmt: str, rid: str) -> str:
    """One JSONL line in format ``fmt`` that the builder must drop with ``reason``."""
    if reason == "invalid_json":
        return f'{{"id": "{rid}", "messages": [{{"role": "user", "content": "cut'
    if reason == "not_an_object":
        return json.dumps([rid, "not a row"])
    user, cut = "Add 2 and 2.", "<think>2 + 2 is"  # a reply whose generation stopped inside <think>
    call = {"function": {"name": "calculator", "arguments": "[2, 2]"}}
    rows: dict[str, dict] = {
        "unknown_role": {"conversations": [{"from": "narrator", "value": user}]},
        "missing_messages": {"messages": []},
        "bad_tool_arguments": {"messages": [{"role": "user", "content": user},
                                            {"role": "assistant", "tool_calls": [call]}]},
        "missing_prompt_response": {"prompt": user},
        "bad_prompt_response": {"prompt": user, "response": 4},
        "no_supervised_reply": {"conversations": [{"from": "human", "value": user},
                                                  {"from": "gpt", "value": cut}]}
        if fmt == "sharegpt"
        else {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": cut}]},
    }  # fmt: skip
    return json.dumps({"id": rid, **rows[reason]})


def _write_source(path: Path, rows: list[dict], fmt: str, every: int) -> dict[str, int]:
    """Write ``rows`` with a malformed row after every ``every - 1`` good ones; return planted reasons."""
    lines: list[str] = []
    planted: dict[str, int] = {}
    for i, row in enumerate(rows):
        lines.append(json.dumps(row, ensure_ascii=False))
        if (i + 1) % (every - 1) == 0:
            reason = MALFORMED[fmt][sum(planted.values()) % len(MALFORMED[fmt])]
            lines.append(_malformed_line(reason, fmt, f"{path.stem}-bad{i}"))
            planted[reason] = planted.get(reason, 0) + 1
    atomic_write_text(path, "\n".join(lines) + "\n")
    return planted


# family -> (source file, format, row builder); tool families are built from math/code tasks.
SOURCE_FILES: dict[str, tuple[str, str, Callable[[str, Any, int], dict]]] = {
    "math": ("sharegpt_math", "sharegpt", _sharegpt_row),
    "puzzle": ("sharegpt_puzzle", "sharegpt", _sharegpt_row),
    "science": ("openai_science", "openai", _openai_row),
    "code": ("openai_code", "openai", _openai_row),
    "if_multi_constraint": ("prompt_response_if", "prompt_response", _prompt_response_row),
    "if_multiturn": ("openai_if_multiturn", "openai", _openai_row),
    "calculator": ("openai_calculator", "openai", _calculator_row),
    "test_runner": ("sharegpt_test_runner", "sharegpt", _test_runner_row),
    "awm_agent": ("openai_awm_agent", "openai", lambda rid, row, _: {**row, "id": rid}),
    "terminal_agent": ("openai_terminal_agent", "openai", lambda rid, row, _: {**row, "id": rid}),
    "search_agent": ("openai_search_agent", "openai", lambda rid, row, _: {**row, "id": rid}),
    "workspace_agent": ("openai_workspace_agent", "openai", lambda rid, row, _: {**row, "id": rid}),
}
#: Families whose reward reads the ``<answer>`` tag itself: the SFT repairs must not unwrap it.
ANSWER_TAG_FAMILIES = frozenset({"search_agent"})
CATEGORY = {
    **FAMILY_CATEGORY,
    "calculator": "General Agent",
    "test_runner": "Coding Agent",
    "awm_agent": "General Agent",
    "terminal_agent": "Coding Agent",
    "search_agent": "General Agent",
    "workspace_agent": "General Agent",  # app tools and documents (RA's General Agent: MCP-Atlas, tau2)
}


def screen_text(task: TinyTask) -> str:
    """Return the text the held-out screen reads for ``task``: its SFT conversation, as the mix screen does
    (an agent task's system turn left out: :func:`~data_prep.tiny_tasks.rl_prep.screened_messages`)."""
    sample = task.sft_sample().model_dump()
    sample["messages"] = screened_messages(sample["messages"], task.metadata)
    return row_text(sample) or ""


def screened_tasks(
    family: str, n: int, seed: int, index: PhraseIndex, oversample: int, keep: Callable[[TinyTask], bool]
) -> tuple[list[TinyTask], dict[str, int]]:
    """Return up to ``n`` train tasks of ``family`` that ``keep`` accepts and the held-out screen passes."""
    kept: list[TinyTask] = []
    tasks: list[TinyTask] = []
    for mult in sorted({min(m, oversample) for m in (2, 4, oversample)}):
        tasks = [t for t in generate(family, n * mult, seed, "train") if keep(t)]
        texts = [screen_text(t) for t in tasks]
        kept = [t for t, m in zip(tasks, scan_texts(index, texts), strict=True) if m is None][:n]
        if len(kept) >= n:
            break
    return kept, {"requested": n, "generated": len(tasks), "kept": len(kept)}


def write_embedded_sources(
    params: Any, seed: int, src_dir: Path, index: PhraseIndex
) -> tuple[list[SourceSpec], dict[str, Any]]:
    """Write the embedded source files and return their specs and what was written (for the manifest).

    ``params`` is the SFT stage's ``data`` section: ``families`` (count per family),
    ``calculator_conversations``, ``test_runner_conversations``, ``awm_conversations``,
    ``terminal_conversations``, ``search_conversations``, ``workspace_conversations``, ``oversample`` and
    ``malformed_every``.
    """
    screen: dict[str, dict[str, int]] = {}

    def pick(name: str, family: str, n: int, stream: int, keep: Callable = lambda t: True) -> list:
        tasks, screen[name] = screened_tasks(family, n, stream, index, params.oversample, keep)
        return tasks

    fam = {f: pick(f, f, n, seed) for f, n in params.families.items() if n}
    alt = seed + 1_000_003  # a second train stream, so tool chats ask other questions than the plain ones
    n_calc = params.calculator_conversations
    calc = pick("calculator", "math", n_calc + n_calc // 2, alt)
    calls = [[calc[i], calc[n_calc + i // 2]] if i % 2 and n_calc + i // 2 < len(calc) else [calc[i]]
             for i in range(min(n_calc, len(calc)))]  # fmt: skip
    code_fn = pick("test_runner", "code", params.test_runner_conversations, alt, lambda t: "tests" in t.label)
    n_awm = getattr(params, "awm_conversations", 0)
    unique = lambda t: not awm.is_repeat(t.id)  # noqa: E731 - the families cycle their pools past the end
    agent = pick("awm_agent", awm.FAMILY, n_awm, seed, awm.sft_demo) if n_awm else []
    n_term = getattr(params, "terminal_conversations", 0)
    term = pick("terminal_agent", harbor.FAMILY, n_term, seed, harbor.sft_demo) if n_term else []
    n_search = getattr(params, "search_conversations", 0)
    hunt = pick("search_agent", search.FAMILY, n_search, seed, unique) if n_search else []
    n_work, kw = getattr(params, "workspace_conversations", 0), knowledge_work_sft
    if n_work:  # stage 08 registers this same generator; SFT may run without importing stage 08
        from infra.agents.kw.family import generate as kw_generate

        register_family(kw.FAMILY, kw_generate)
    work = pick("workspace_agent", kw.FAMILY, n_work, seed, kw.sft_demo) if n_work else []
    items = {**fam, "calculator": calls, "test_runner": code_fn, "awm_agent": awm.gold_conversations(agent),
             "terminal_agent": harbor.gold_conversations(term),
             "search_agent": search.gold_conversations(hunt),
             "workspace_agent": kw.gold_conversations(work)}  # fmt: skip
    specs, info, total = [], {}, {}
    for family, (name, fmt, build) in SOURCE_FILES.items():
        if not items.get(family):
            continue
        path = src_dir / f"{name}.jsonl"
        rows = [build(f"{family}-{i}", item, i) for i, item in enumerate(items[family])]
        planted = _write_source(path, rows, fmt, params.malformed_every)
        for reason, k in planted.items():
            total[reason] = total.get(reason, 0) + k
        info[name] = {"format": fmt, "family": family, "rows": len(rows), "malformed_planted": planted}
        spec = local_source(path, name, fmt=fmt, category=CATEGORY[family])
        meta = {"license": GENERATED, "upstream_generators": ("data_prep.tiny_tasks",)}
        keep = family in ANSWER_TAG_FAMILIES
        specs.append(replace(spec, system_prompt_patterns=CONTROL_LINES, keep_answer_tags=keep, **meta))
    return specs, {"files": info, "malformed_planted": total, "heldout_prescreen": screen}
