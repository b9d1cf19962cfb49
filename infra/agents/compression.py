"""Context compression of long agent episodes (FireFlash's harness): summarise at 85% of the window.

Off unless the environment sets ``compression`` to a :class:`CompressionOptions` (the ``harbor``
environment's ``compress_at=0.85[,context_window=N]``). :class:`ContextCompressor` is a Strands hook on
``BeforeModelCallEvent``, added by :func:`infra.agents.loop.run_episode`. Before each model call it
measures the occupied context: the tokens that call would send (the model's token trajectory so far plus
the new messages). At ``at`` × ``window`` tokens or more (``window``: ``context_window``, else the
episode's ``max_context_tokens``, the per-call budget the loop enforces):

1. a user message asking for a summary (:data:`SUMMARY_REQUEST`) is appended to the END of the existing
   conversation and the model's reply is sampled on that same context (FireFlash appends its summary
   prompt rather than rewriting the history, so the prefix cache stays valid);
2. the conversation becomes exactly ``[system prompt, the task's messages up to and including its
   instruction, one user message holding the summary]`` (:data:`SUMMARY_MESSAGE`, the reply with its
   reasoning, tool-call markup and role markers removed). Dropped from the model's context: every tool
   call and result, every later turn (simulated-user replies included), the summary request;
3. the model's token trajectory restarts from that conversation (the next call tokenizes it whole, the
   tool specs included).

What the episode keeps: its token trajectory (``RolloutResult`` ids, logprobs, loss mask) is the LAST
context only, the one that ends the episode and is scored. Each earlier context, its summary generation
included, is not trained on (the one-trajectory-per-episode contract cannot carry token sequences the
model never saw as one) and is counted in ``metrics["compressions"]``. The transcript keeps everything in
order (each earlier context, its summary request and summary, then the last context), so ``harbor_tests``
replays every command.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from strands.hooks import HookProvider, HookRegistry
from strands.hooks.events import BeforeModelCallEvent
from strands_sglang import SGLangModel
from strands_sglang.rollout import Rollout

SUMMARY_REQUEST = (
    "Your context is nearly full and is about to be compressed. Summarise the work so far for yourself: "
    "the task, what you have done and found (files, commands, results) and what remains to do. Do not call "
    "tools; this summary replaces the conversation so far."
)
SUMMARY_MESSAGE = (
    "Summary of the work so far (the earlier conversation was compressed):\n\n{summary}\n\nContinue the task."
)


@dataclass(frozen=True)
class CompressionOptions:
    """When to compress: at ``at`` of ``window`` tokens (None: the episode's ``max_context_tokens``)."""

    at: float = 0.85
    window: int | None = None

    @classmethod
    def parse(cls, owner: str, compress_at: Any, context_window: Any) -> CompressionOptions | None:
        """Return the options of env spec values ``compress_at``/``context_window`` (None: off);
        ValueError naming the bad option."""
        if compress_at is None:
            if context_window is not None:
                raise ValueError(
                    f"{owner} option context_window={context_window!r}: needs compress_at (e.g. 0.85)"
                )
            return None
        if (
            isinstance(compress_at, bool)
            or not isinstance(compress_at, (int, float))
            or not 0 < compress_at < 1
        ):
            raise ValueError(
                f"{owner} option compress_at={compress_at!r}: expected a fraction in (0, 1), e.g. 0.85"
            )
        if context_window is not None and (
            isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 64
        ):
            raise ValueError(
                f"{owner} option context_window={context_window!r}: expected a token count >= 64"
            )
        return cls(float(compress_at), context_window)


def summary_text(raw: str) -> str:
    """Return the visible summary of a model reply: no reasoning, tool-call markup or role markers."""
    text = raw.rsplit("</think>", 1)[-1]
    text = re.sub(r"<tool_call>.*?(</tool_call>|$)", "", text, flags=re.S)
    text = re.sub(r"<\|[a-z_]+\|>", "", text).strip()
    return text or "(no summary was given)"


class ContextCompressor(HookProvider):
    """Strands hook: summarise and restart the context when it reaches the threshold (module docstring)."""

    def __init__(self, options: CompressionOptions, model: SGLangModel, kept: int, max_context_tokens: int):
        self.model = model
        self.kept = kept  # the task's messages up to and including the instruction
        self.window = options.window or max_context_tokens
        self.threshold = math.ceil(options.at * self.window)
        self.archived: list[dict[str, Any]] = []  # earlier contexts, each summary exchange included
        self.compressions: list[dict[str, int]] = []

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register on ``BeforeModelCallEvent``."""
        registry.add_callback(BeforeModelCallEvent, self._before_model_call)

    def occupied(self, messages: list[dict[str, Any]], system_prompt: str | None) -> int:
        """Tokens the next call would send: the trajectory so far plus the new messages' tokens."""
        model = self.model
        if model.processed_messages == 0 or len(messages) <= model.processed_messages:
            return len(model.rollout.token_ids)
        new = SGLangModel.tokenize_prompt_messages(model, messages, system_prompt)  # no side effects
        return len(model.rollout.token_ids) + len(new)

    def conversation(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return the whole episode's messages: the earlier contexts, then ``messages`` past the task's."""
        return [*self.archived, *messages[self.kept :]] if self.archived else list(messages)

    async def _before_model_call(self, event: BeforeModelCallEvent) -> None:
        agent, model = event.agent, self.model
        if model.processed_messages == 0:  # a fresh context: nothing to compress
            return
        occupied = self.occupied(agent.messages, agent.system_prompt)
        if occupied < self.threshold:
            return
        request = {"role": "user", "content": [{"text": SUMMARY_REQUEST}]}
        before, raw = len(model.rollout.token_ids), ""
        specs = agent.tool_registry.get_all_tool_specs()
        async for ev in model.stream([*agent.messages, request], specs, agent.system_prompt):
            raw += ev.get("contentBlockDelta", {}).get("delta", {}).get("text", "")
        start = self.kept if self.archived else 0
        self.archived += [*agent.messages[start:], request, {"role": "assistant", "content": [{"text": raw}]}]
        self.compressions.append({
            "occupied_tokens": occupied,
            "threshold": self.threshold,
            "context_tokens": len(model.rollout.token_ids),
            "summary_tokens": sum(model.rollout.loss_mask[before:]),
        })  # fmt: skip
        summary = {"role": "user", "content": [{"text": SUMMARY_MESSAGE.format(summary=summary_text(raw))}]}
        agent.messages[:] = [*agent.messages[: self.kept], summary]
        model.rollout, model.processed_messages = Rollout(), 0


def compressor_for(
    env: Any, model: SGLangModel, kept: int, max_context_tokens: int
) -> ContextCompressor | None:
    """Return the compressor of ``env``'s ``compression`` options, or None when it has none (off)."""
    options = getattr(env, "compression", None)
    return None if options is None else ContextCompressor(options, model, kept, max_context_tokens)
