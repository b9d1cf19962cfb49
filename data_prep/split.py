"""The interleaved-thinking split rule (paper §3.1): one training example per completed response.

An assistant turn is *intermediate* only if it issues a tool call and the very next message is a tool
result; any other assistant turn *ends a response*. For every response end ``e`` the example is
``messages[: e + 1]`` with loss assigned as follows:

* the last real user request before ``e`` (a non-empty ``user`` turn) is the boundary ``u``;
* assistant turns before ``u`` are context: their rationales are stripped and their loss is 0;
* assistant turns after ``u`` (the thought–action–observation chain and the final reply) keep their
  reasoning and are supervised (loss 1);
* system, user and tool messages always get loss 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from data_prep.schema import Message


def is_intermediate(messages: Sequence[Message], i: int) -> bool:
    """True if assistant turn ``i`` issues a tool call that a tool result immediately follows."""
    msg = messages[i]
    return bool(msg.tool_calls) and i + 1 < len(messages) and messages[i + 1].role == "tool"


def response_ends(messages: Sequence[Message]) -> list[int]:
    """Indices of the assistant turns that end a response."""
    return [i for i, m in enumerate(messages) if m.role == "assistant" and not is_intermediate(messages, i)]


def last_user_index(messages: Sequence[Message], end: int) -> int:
    """Index of the last non-empty user turn at or before ``end`` (-1 if none)."""
    for i in range(end, -1, -1):
        if messages[i].role == "user" and messages[i].content.strip():
            return i
    return -1


def split_example(messages: Sequence[Message], end: int) -> list[Message]:
    """Return the example that ends at response end ``end`` with rationales stripped and loss assigned."""
    boundary = last_user_index(messages, end)
    out: list[Message] = []
    for i, msg in enumerate(messages[: end + 1]):
        if msg.role != "assistant":
            out.append(msg.model_copy(update={"loss": 0}))
        elif i < boundary:
            out.append(msg.model_copy(update={"loss": 0, "reasoning": None}))
        else:
            out.append(msg.model_copy(update={"loss": 1}))
    return out


def split_interleaved(messages: Sequence[Message]) -> list[list[Message]]:
    """Split a repaired conversation into one example per completed response (possibly none)."""
    examples = []
    for end in response_ends(messages):
        if last_user_index(messages, end) < 0:
            continue  # an assistant turn with no user request before it supervises nothing sensible
        examples.append(split_example(messages, end))
    return examples
