"""The tool layer of the agent loop: a Strands hook that enforces the recipe's tool-execution rules.

Strands executes the calls (``SequentialToolExecutor``, so in model order) and strands-sglang parses
them; this hook adds what neither does:

* a malformed call (see :mod:`infra.agents.tool_parsing`) is never executed: Strands would otherwise
  run it with ``{}`` as arguments; the model gets the parse error back as the tool result instead;
* a call is retried only when the tool raised :class:`ToolNotStartedError` (it provably never began),
  at most ``max_tool_retries`` times; anything else is never re-run;
* :class:`EnvironmentFailure` (or a call that still could not start after its retries) aborts the
  episode at the next message boundary; the sample is tagged aborted, not scored 0;
* failed or malformed calls are counted; past ``max_tool_errors`` the episode ends with ``tool_error``;
* results are merged into one text block (strands-sglang renders only a result's first block) and
  truncated to ``tool_result_max_tokens`` tokens with a visible marker.
"""

from __future__ import annotations

import json
from typing import Any

from strands.hooks import HookProvider, HookRegistry
from strands.hooks.events import AfterToolCallEvent, BeforeToolCallEvent, MessageAddedEvent
from transformers import PreTrainedTokenizerBase

from infra.agents.contract import (
    EnvironmentFailure,
    EpisodeAborted,
    EpisodeLimits,
    ToolErrorBudgetExceeded,
    ToolNotStartedError,
)


def truncate_to_tokens(text: str, tokenizer: PreTrainedTokenizerBase, max_tokens: int) -> tuple[str, bool]:
    """Return ``(text, truncated)`` with ``text`` cut to at most ``max_tokens`` tokens, marker included."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text, False
    marker = f"\n[truncated from {len(ids)} tokens]"
    keep = max(max_tokens - len(tokenizer.encode(marker, add_special_tokens=False)), 0)
    while True:
        cut = tokenizer.decode(ids[:keep]) + marker if keep > 0 else tokenizer.decode(ids[:max_tokens])
        if len(tokenizer.encode(cut, add_special_tokens=False)) <= max_tokens or keep == 0:
            return cut, True
        keep -= 1


def chat_tool_specs(tools: list[Any]) -> list[dict[str, Any]]:
    """The tools as the policy sees them in an episode, in the chat template's (OpenAI) format.

    Strands' ``ToolRegistry`` completes each spec when the agent registers it (a property without a
    description gets one), and strands-sglang renders them for the template; SFT demonstrations must
    show exactly these, so both library calls are used here rather than re-implemented.
    """
    from strands.tools.registry import ToolRegistry
    from strands_sglang import SGLangModel

    registry = ToolRegistry()
    registry.process_tools(list(tools))
    # the method does not use ``self``
    return SGLangModel.format_tool_specs(None, registry.get_all_tool_specs())  # type: ignore[arg-type]


def result_text(result: dict[str, Any]) -> str:
    """Return the content blocks of a Strands ``ToolResult`` joined into one string."""
    parts = []
    for block in result.get("content", []):
        if "text" in block:
            parts.append(str(block["text"]))
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False))
        else:
            parts.append(f"[{next(iter(block), 'unknown')} content omitted]")
    return "\n".join(parts)


class ToolLayer(HookProvider):
    """Strands hook applying the malformed-call, retry, abort, error-budget and truncation rules."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, limits: EpisodeLimits, malformed: dict[str, str]
    ) -> None:
        self.tokenizer = tokenizer
        self.limits = limits
        self.malformed = malformed  # shared with the episode's StrictGLMToolParser
        self.attempts: dict[str, int] = {}
        self.tool_errors = 0
        self.malformed_calls = 0
        self.retries = 0
        self.truncated_results = 0
        self.executed: list[str] = []  # tool names in execution order
        self.abort: BaseException | None = None

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register the before/after tool-call and message-added callbacks."""
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
        registry.add_callback(AfterToolCallEvent, self._after_tool)
        registry.add_callback(MessageAddedEvent, self._on_message)

    def metrics(self) -> dict[str, int]:
        """Return the tool-layer counters of the episode."""
        return {
            "tool_errors": self.tool_errors,
            "malformed_tool_calls": self.malformed_calls,
            "tool_retries": self.retries,
            "truncated_tool_results": self.truncated_results,
            "tools_executed": len(self.executed),
        }

    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        call_id = str(event.tool_use.get("toolUseId"))
        reason = self.malformed.get(call_id)
        if reason is not None:
            event.cancel_tool = (
                f"Error: malformed tool call ({reason}); it was not executed. Expected "
                "<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>."
            )
        elif self.abort is not None:
            event.cancel_tool = "Error: the environment failed; this call was not executed."

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        call_id = str(event.tool_use.get("toolUseId"))
        exc = event.exception
        if call_id in self.malformed:
            self.malformed_calls += 1
        elif isinstance(exc, ToolNotStartedError):
            self.attempts[call_id] = self.attempts.get(call_id, 0) + 1
            if self.attempts[call_id] <= self.limits.max_tool_retries:
                self.retries += 1
                event.retry = True
                return
            self.abort = EnvironmentFailure(f"tool {event.tool_use.get('name')!r} never started: {exc}")
        elif isinstance(exc, EnvironmentFailure):
            self.abort = exc
        elif event.cancel_message is None:
            self.executed.append(str(event.tool_use.get("name")))
        if event.result.get("status") == "error" and self.abort is None:
            self.tool_errors += 1
        text, cut = truncate_to_tokens(
            result_text(event.result), self.tokenizer, self.limits.tool_result_max_tokens
        )
        self.truncated_results += int(cut)
        event.result = {**event.result, "content": [{"text": text}]}

    def _on_message(self, event: MessageAddedEvent) -> None:
        message = event.message
        if message.get("role") != "user" or not any("toolResult" in c for c in message["content"]):
            return
        if self.abort is not None:
            raise EpisodeAborted(str(self.abort)) from self.abort
        budget = self.limits.max_tool_errors
        if budget is not None and self.tool_errors > budget:
            raise ToolErrorBudgetExceeded(
                f"{self.tool_errors} failed or malformed tool calls (budget {budget})"
            )
