"""Per-format converters from raw source rows to the project's role-aware message list.

Three source formats cover the Table 17 releases:

* ``sharegpt``: ``conversations`` of ``{"from", "value"}`` turns (``human``/``gpt``/``tool``…), with Hermes
  style ``<tool_call>{json}</tool_call>`` inside assistant text, ``<tool_response>`` observations and a
  ``<tools>[...]</tools>`` block in the system prompt;
* ``openai``: ``messages`` of ``{"role", "content"}`` with structured ``tool_calls``, ``tool`` (or legacy
  ``function``) results, reasoning in a separate field (``reasoning_content``/``reasoning``/``think``) or
  inline in ``<think>`` tags; messages/tools may be JSON-encoded strings;
* ``prompt_response``: single-turn pairs (``prompt``/``response``, ``input``/``output``, …).

Converters only restructure; reasoning tags inside text, system-prompt clean-up and truncated turns are
handled by :mod:`data_prep.repairs`. A row that cannot be converted raises :class:`ConversionError` with a
reason code that the builder counts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from data_prep.schema import Message, ToolCall

Conversation = tuple[list[Message], list[dict[str, Any]] | None]

_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
    "ipython": "tool",
    "function": "tool",
    "function_call": "assistant",
}
_OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
    "ipython": "tool",
}
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking", "think")
_PAIR_KEYS = (
    ("prompt", "response"),
    ("input", "output"),
    ("instruction", "output"),
    ("question", "answer"),
    ("problem", "solution"),
    ("query", "response"),
)
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE_RE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_TOOLS_BLOCK_RE = re.compile(r"<tools>\s*(.*?)\s*</tools>", re.DOTALL)


class ConversionError(ValueError):
    """A row that cannot be converted; ``reason`` is the counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _maybe_json(value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConversionError(f"bad_{what}_json", exc.msg) from None
    return value


def _text(content: Any) -> str:
    """Flatten OpenAI content (str, None or a list of parts) to text; non-text parts are rejected."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
            else:
                raise ConversionError("non_text_content", str(part)[:80])
        return "".join(parts)
    raise ConversionError("bad_content", type(content).__name__)


def _tool_call(raw: Any) -> ToolCall:
    """Build a ToolCall from ``{"function": {...}}``, ``{"name", "arguments"}`` or a JSON string of either."""
    raw = _maybe_json(raw, "tool_call")
    if not isinstance(raw, dict):
        raise ConversionError("bad_tool_call", f"expected an object, got {type(raw).__name__}")
    fn = raw.get("function", raw)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ConversionError("bad_tool_call", "missing function name")
    args = _maybe_json(fn.get("arguments", fn.get("parameters", {})) or {}, "tool_arguments")
    if not isinstance(args, dict):
        raise ConversionError("bad_tool_arguments", f"arguments are {type(args).__name__}, not an object")
    call_id = raw.get("id") or raw.get("call_id")
    return ToolCall(name=fn["name"], arguments=args, id=str(call_id) if call_id else None)


def _tools(value: Any) -> list[dict[str, Any]] | None:
    value = _maybe_json(value, "tools")
    if value in (None, "", []):
        return None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConversionError("bad_tools", "tools must be a list of JSON schemas")
    return value


def _reasoning_field(turn: dict) -> str | None:
    for key in _REASONING_KEYS:
        if isinstance(turn.get(key), str) and turn[key].strip():
            return turn[key]
    return None


def from_openai(row: dict, key: str = "messages") -> Conversation:
    """Convert an OpenAI-style ``messages`` row (tool calls, tool results, separate reasoning)."""
    turns = _maybe_json(row.get(key), "messages")
    if not isinstance(turns, list) or not turns:
        raise ConversionError("missing_messages", f"no non-empty list under {key!r}")
    messages: list[Message] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ConversionError("bad_turn", f"turn {i} is {type(turn).__name__}")
        role = _OPENAI_ROLES.get(str(turn.get("role", "")).lower())
        if role is None:
            raise ConversionError("unknown_role", f"turn {i}: {turn.get('role')!r}")
        calls = [_tool_call(c) for c in (_maybe_json(turn.get("tool_calls"), "tool_calls") or [])]
        if turn.get("function_call"):
            calls.append(_tool_call(turn["function_call"]))
        messages.append(
            Message(
                role=role,
                content=_text(turn.get("content")),
                reasoning=_reasoning_field(turn) if role == "assistant" else None,
                tool_calls=(calls or None) if role == "assistant" else None,
                tool_call_id=str(turn["tool_call_id"])
                if role == "tool" and turn.get("tool_call_id")
                else None,
                name=turn.get("name") if role == "tool" and isinstance(turn.get("name"), str) else None,
            )
        )
    return messages, _tools(row.get("tools"))


def _hermes_assistant(text: str) -> Message:
    calls = [_tool_call(m) for m in _TOOL_CALL_RE.findall(text)]
    content = _TOOL_CALL_RE.sub("", text).strip() if calls else text
    return Message(role="assistant", content=content, tool_calls=calls or None)


def from_sharegpt(row: dict, key: str = "conversations") -> Conversation:
    """Convert a ShareGPT ``conversations`` row, parsing Hermes tool calls, responses and tool schemas."""
    turns = _maybe_json(row.get(key), "conversations")
    if not isinstance(turns, list) or not turns:
        raise ConversionError("missing_conversations", f"no non-empty list under {key!r}")
    tools = _tools(row.get("tools"))
    messages: list[Message] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ConversionError("bad_turn", f"turn {i} has no string 'value'")
        source = str(turn.get("from", "")).lower()
        role = _SHAREGPT_ROLES.get(source)
        if role is None:
            raise ConversionError("unknown_role", f"turn {i}: {turn.get('from')!r}")
        value = turn["value"]
        if role == "system":
            block = _TOOLS_BLOCK_RE.search(value)
            if block and tools is None:
                tools = _tools(block.group(1))
            value = _TOOLS_BLOCK_RE.sub("", value).strip() if block else value
            messages.append(Message(role="system", content=value))
        elif role == "assistant" and source == "function_call":
            messages.append(Message(role="assistant", tool_calls=[_tool_call(value)]))
        elif role == "assistant":
            messages.append(_hermes_assistant(value))
        elif role == "tool":
            responses = _TOOL_RESPONSE_RE.findall(value) or [value]
            messages.extend(Message(role="tool", content=r) for r in responses)
        elif _TOOL_RESPONSE_RE.search(value):  # some releases put observations in the human role
            messages.extend(Message(role="tool", content=r) for r in _TOOL_RESPONSE_RE.findall(value))
        else:
            messages.append(Message(role="user", content=value))
    return messages, tools


def from_prompt_response(row: dict) -> Conversation:
    """Convert a single-turn pair (``prompt``/``response``, ``input``/``output``, …) to two or three turns."""
    for p_key, r_key in _PAIR_KEYS:
        if p_key in row and r_key in row:
            prompt, response = row[p_key], row[r_key]
            break
    else:
        raise ConversionError(
            "missing_prompt_response", f"none of {[k for pair in _PAIR_KEYS for k in pair]}"
        )
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise ConversionError("bad_prompt_response", "prompt and response must be strings")
    messages = []
    if isinstance(row.get("system"), str) and row["system"].strip():
        messages.append(Message(role="system", content=row["system"]))
    messages.append(Message(role="user", content=prompt))
    messages.append(Message(role="assistant", content=response, reasoning=_reasoning_field(row)))
    return messages, _tools(row.get("tools"))


def detect_format(row: dict) -> str:
    """Return the format name a row is in, judged from its keys."""
    for key in ("messages", "conversations", "conversation"):
        turns = row.get(key)
        if isinstance(turns, str):
            try:
                turns = json.loads(turns)
            except json.JSONDecodeError:
                continue
        if isinstance(turns, list) and turns and isinstance(turns[0], dict):
            return "sharegpt" if "from" in turns[0] else "openai"
    return "prompt_response"


def convert_row(row: dict, fmt: str = "auto") -> Conversation:
    """Convert ``row`` in format ``fmt`` (``auto`` detects it) to messages and tool schemas."""
    if fmt == "auto":
        fmt = detect_format(row)
    if fmt == "openai":
        key = next((k for k in ("messages", "conversations", "conversation") if k in row), "messages")
        return from_openai(row, key)
    if fmt == "sharegpt":
        key = next((k for k in ("conversations", "conversation", "messages") if k in row), "conversations")
        return from_sharegpt(row, key)
    if fmt == "prompt_response":
        return from_prompt_response(row)
    raise ConversionError("unknown_format", fmt)
