"""Sequence length under the production chat template, tool schemas included (paper §3.1).

The template decides the tokens: every role marker, reasoning wrapper, tool schema, call and observation
counts. Loss tokens are the template tokens each supervised message adds, measured as the growth of
the rendered prefix (the same per-message delta slime's token-delta helper uses), so they match what
the loss mask covers. Samples over the cap (120K tokens) are dropped; 32K–120K samples are marked for
bucketed batching. ``K`` is 1024 tokens, matching the 128K (131,072-token) context.
"""

from __future__ import annotations

from typing import Any

from data_prep.schema import Message, SFTSample

MAX_TOKENS = 120 * 1024
LONG_MIN_TOKENS = 32 * 1024


def message_to_template(msg: Message) -> dict[str, Any]:
    """The chat-template dict for one message (``reasoning_content`` and OpenAI-style ``tool_calls``)."""
    out: dict[str, Any] = {"role": msg.role, "content": msg.content}
    if msg.reasoning:
        out["reasoning_content"] = msg.reasoning
    if msg.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
            for c in msg.tool_calls
        ]
    if msg.tool_call_id:
        out["tool_call_id"] = msg.tool_call_id
    if msg.name:
        out["name"] = msg.name
    return out


def _render_len(tokenizer: Any, messages: list[dict], tools: list[dict] | None) -> int:
    ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return len(ids)


def measure(sample: SFTSample, tokenizer: Any) -> tuple[int, int]:
    """Return ``(total_tokens, loss_tokens)`` of ``sample`` under ``tokenizer``'s chat template."""
    rendered = [message_to_template(m) for m in sample.messages]
    total = _render_len(tokenizer, rendered, sample.tools)
    loss_tokens = 0
    prev = 0  # the first message is never supervised, so its delta (prefix, tool schemas) is not counted
    for i, msg in enumerate(sample.messages):
        cur = total if i == len(rendered) - 1 else _render_len(tokenizer, rendered[: i + 1], sample.tools)
        if msg.loss:
            loss_tokens += max(cur - prev, 0)
        prev = cur
    return total, loss_tokens


def loss_characters(sample: SFTSample) -> int:
    """Characters in supervised turns (reasoning, text, tool calls): the tokenizer-free size measure."""
    n = 0
    for m in sample.messages:
        if m.loss:
            n += len(m.content) + len(m.reasoning or "")
            n += sum(len(c.name) + len(str(c.arguments)) for c in m.tool_calls or [])
    return n


def apply_length(
    sample: SFTSample, tokenizer: Any, max_tokens: int = MAX_TOKENS, long_min: int = LONG_MIN_TOKENS
) -> tuple[SFTSample | None, int]:
    """Return the sample with ``num_tokens``/``long_bucket`` set (``None`` if over the cap) + loss tokens."""
    total, loss_tokens = measure(sample, tokenizer)
    if total > max_tokens:
        return None, loss_tokens
    return sample.model_copy(update={"num_tokens": total, "long_bucket": total >= long_min}), loss_tokens
