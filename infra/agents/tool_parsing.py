"""Strict parsing of GLM-4.5 tool calls out of sampled text.

strands-sglang's ``GLMToolParser`` is lenient: it skips stray text between argument pairs, accepts an
unclosed ``<tool_call>`` silently (the call just vanishes) and lets a later duplicate key overwrite an
earlier one. For RL that hides policy mistakes, so this subclass keeps its id scheme and result type but
rejects anything that is not exactly ``<tool_call>NAME(<arg_key>K</arg_key><arg_value>V</arg_value>)*
</tool_call>``. Malformed calls come back as ``ToolParseResult`` errors (the raw text is kept) and are
recorded in :attr:`StrictGLMToolParser.malformed`, so the tool layer can refuse to execute them and
answer the model with the reason instead; nothing is repaired.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from strands_sglang.tool_parsers import ToolParser, ToolParseResult
from strands_sglang.tool_parsers.base import register_tool_parser

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_MARKUP = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")


def parse_call_body(body: str) -> tuple[str, dict[str, Any]]:
    """Return ``(name, arguments)`` of one ``<tool_call>`` body; raise ``ValueError`` saying what is wrong."""
    head, sep, rest = body.partition("<arg_key>")
    name = head.strip()
    if not name:
        raise ValueError("missing function name")
    if not _NAME.match(name):
        raise ValueError(f"invalid function name {name[:40]!r}")
    arguments: dict[str, Any] = {}
    pos = 0
    rest = sep + rest
    for match in _PAIR.finditer(rest):
        if rest[pos : match.start()].strip():
            raise ValueError(f"unexpected text {rest[pos : match.start()].strip()[:40]!r} between arguments")
        key, raw_value = match.group(1).strip(), match.group(2)
        if not key or any(tag in key for tag in _MARKUP):
            raise ValueError(f"invalid argument key {key[:40]!r}")
        if key in arguments:
            raise ValueError(f"duplicate argument {key!r}")
        if any(tag in raw_value for tag in _MARKUP):
            raise ValueError(f"argument {key!r} contains unbalanced tool markup")
        try:
            arguments[key] = json.loads(raw_value)
        except ValueError:
            arguments[key] = raw_value
        pos = match.end()
    if rest[pos:].strip():
        raise ValueError(f"unexpected text {rest[pos:].strip()[:40]!r} after arguments")
    return name, arguments


@register_tool_parser("glm_strict")
class StrictGLMToolParser(ToolParser):
    """GLM-4.5 tool-call parser that turns every deviation from the format into a counted parse error."""

    def __init__(self) -> None:
        super().__init__()
        self.malformed: dict[str, str] = {}  # toolUseId -> reason, for the whole episode

    def parse(self, text: str) -> list[ToolParseResult]:
        """Parse the tool calls of one model turn (outside ``<think>`` blocks), in order."""
        visible = self.think_pattern.sub("", text)
        if self.think_start_token in visible:  # unclosed reasoning: everything after it is thinking
            visible = visible.split(self.think_start_token, 1)[0]
        prefix = uuid.uuid4().hex[:8]
        results: list[ToolParseResult] = []
        pos = 0
        start_tag, end_tag = self.tool_start_token, self.tool_end_token
        while True:
            start = visible.find(start_tag, pos)
            stray_end = visible.find(end_tag, pos)
            if stray_end != -1 and (start == -1 or stray_end < start):
                self._error(results, prefix, visible[pos : stray_end + len(end_tag)], f"stray {end_tag}")
                pos = stray_end + len(end_tag)
                continue
            if start == -1:
                break
            end = visible.find(end_tag, start)
            nxt = visible.find(start_tag, start + len(start_tag))
            if end == -1 or (nxt != -1 and nxt < end):
                stop = nxt if nxt != -1 else len(visible)
                self._error(results, prefix, visible[start:stop], f"unclosed {start_tag}")
                pos = stop
                continue
            body = visible[start + len(start_tag) : end]
            call_id = f"call_{prefix}{len(results):04d}"
            try:
                name, arguments = parse_call_body(body)
            except ValueError as exc:
                head = body.split("<arg_key>", 1)[0].strip()
                self._error(results, prefix, body, str(exc), name=head if _NAME.match(head) else None)
            else:
                results.append(ToolParseResult(id=call_id, name=name, input=arguments))
            pos = end + len(end_tag)
        return results

    def _error(
        self, results: list[ToolParseResult], prefix: str, raw: str, reason: str, name: str | None = None
    ) -> None:
        call_id = f"call_{prefix}{len(results):04d}"
        self.malformed[call_id] = reason
        results.append(ToolParseResult.from_parse_error(id=call_id, raw=raw or reason, name=name))
