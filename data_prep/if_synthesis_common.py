"""Pieces both IF RL synthesis kinds share: strict teacher-reply parsing, checker validation, the run loop.

* :func:`parse_reply` reads one teacher completion as a JSON object of a given pydantic shape; anything
  else raises :class:`ReplyError` with a countable reason (``reply_not_json``, ``reply_schema``), so a
  malformed reply is dropped and counted, never a crash;
* :func:`checker_drop_reason` runs teacher-written ``check(response) -> bool`` sources in the sandbox
  (``rewards.instruction_following.run_code_src``, the same path the reward uses) against a reference
  answer and names the first problem (syntax error, load error, exception, timeout, or the reference
  failing); a sandbox that cannot start raises, since that is the machine's fault, not the data's;
* :func:`run_items` maps one synthesis attempt per index over a small thread pool, keeps results in index
  order, and gathers kept rows and counted drops in a :class:`SynthesisStep`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from data_prep.io import MalformedCounter
from data_prep.rl_stage import endpoint_client
from data_prep.schema import PromptRow
from data_prep.teacher import ChatClient
from rewards.instruction_following import run_code_src

CHECKER_SIGNATURE = "def check(response: str) -> bool"
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
M = TypeVar("M", bound=BaseModel)


class StrictReply(BaseModel):
    """Base of the teacher reply shapes: unknown keys and type coercion are rejected."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ReplyError(ValueError):
    """A teacher reply that cannot be used; ``reason`` is the manifest's drop key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json|JSON)?\s*\n?(.*?)\n?```$", re.DOTALL)


def parse_reply(text: str, shape: type[M]) -> M:
    """Return ``text`` parsed as one JSON object of ``shape``; raise :class:`ReplyError` otherwise.

    Only a leading ``<think>`` block and one fence around the whole reply are removed: prose around the
    JSON is rejected rather than searched, so a reply is either exactly what was asked for or dropped.
    """
    body = _THINK.sub("", text).strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        detail = f"{type(exc).__name__}: {str(exc)[:120]}; reply began {body[:60]!r}"
        raise ReplyError("reply_not_json", detail) from None
    if not isinstance(data, dict):
        raise ReplyError("reply_schema", f"expected a JSON object, got {type(data).__name__}")
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ReplyError("reply_schema", f"{where}: {first['msg']}") from None


def response_format(shape: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI ``response_format`` that asks the server to decode only JSON of ``shape``'s schema.

    SGLang (xgrammar) and vLLM constrain generation to the schema; :func:`parse_reply` still validates,
    since a server may ignore the field.
    """
    schema = {"name": shape.__name__, "schema": shape.model_json_schema(), "strict": True}
    return {"type": "json_schema", "json_schema": schema}


def checker_drop_reason(sources: Sequence[str], reference: str) -> tuple[str, str] | None:
    """Return ``(reason, detail)`` for the first checker that fails on ``reference``, or None if all pass.

    Reasons: ``checker_syntax_error``, ``checker_load_error``, ``checker_defines_no_check``,
    ``checker_error`` (raised), ``checker_timeout``, ``checker_crashed``, ``checker_returned_<type>``,
    ``reference_fails_checker``. Raises ``InfraError`` when the sandbox is unavailable.
    """
    for i, source in enumerate(sources):
        passed, note = run_code_src(source, reference)
        if passed:
            continue
        if not note:
            return "reference_fails_checker", f"checker {i}"
        reason = note.split(":", 1)[0]
        if reason == "checker_load_error" and "SyntaxError" in note:
            reason = "checker_syntax_error"
        return reason, f"checker {i}: {note[:160]}"
    return None


def transcript(messages: Sequence[dict[str, Any]]) -> str:
    """Return the conversation as ``[role] content`` blocks, for prompts that show it to the teacher."""
    return "\n\n".join(f"[{m['role']}] {m['content']}" for m in messages)


def client_for(endpoint: Any) -> ChatClient:
    """Return a :class:`ChatClient` for an ``Endpoint`` with the long timeout synthesis replies need."""
    return endpoint_client(endpoint, timeout=300.0)


@dataclass
class Drop:
    """Why one synthesis attempt produced no row."""

    reason: str
    detail: str = ""


@dataclass
class SynthesisStep:
    """Rows one synthesis step kept, how many it attempted and its drops by reason (for the manifest)."""

    name: str
    attempted: int = 0
    rows: list[PromptRow] = field(default_factory=list)
    drops: MalformedCounter = field(default_factory=lambda: MalformedCounter(max_examples=10))

    def manifest_fields(self) -> dict[str, Any]:
        """Return the step's counts as keyword arguments for ``Manifest.step``."""
        return {"attempted": self.attempted, "kept": len(self.rows), "dropped": self.drops.as_dict()}


def run_items(
    name: str, n: int, attempt: Callable[[int], PromptRow | Drop], workers: int = 4
) -> SynthesisStep:
    """Run ``attempt(i)`` for ``i < n`` on ``workers`` threads; return kept rows (index order) and drops."""
    step = SynthesisStep(name, attempted=n)
    if n == 0:
        return step
    with ThreadPoolExecutor(max_workers=max(1, min(workers, n))) as pool:
        results = list(pool.map(attempt, range(n)))
    for i, result in enumerate(results):
        if isinstance(result, Drop):
            step.drops.add(result.reason, f"{name}#{i}", result.detail)
        else:
            step.rows.append(result)
    return step
