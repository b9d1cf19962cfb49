"""Rule-based validators for split SFT examples (paper §3.1, step iii).

Each check returns reason codes; an example with any reason is dropped and counted by the builder:
balanced ``<think>`` tags (none may be left inside text once reasoning is separated), valid role
transitions, and loss masks consistent with the split rule around tool calls.
"""

from __future__ import annotations

from data_prep.schema import Message, SFTSample
from data_prep.split import is_intermediate, last_user_index

_TAGS = ("<think>", "</think>")


def check_think_tags(messages: list[Message]) -> list[str]:
    """Reasons for leftover or unbalanced reasoning tags, and reasoning on non-assistant turns."""
    problems = []
    for msg in messages:
        if msg.reasoning is not None and msg.role != "assistant":
            problems.append("reasoning_on_non_assistant")
        for text in (msg.content, msg.reasoning or ""):
            if text.count(_TAGS[0]) != text.count(_TAGS[1]):
                problems.append("unbalanced_think_tags")
            elif msg.role == "assistant" and _TAGS[0] in text:
                problems.append("think_tags_left_in_text")
    return problems


def check_roles(messages: list[Message]) -> list[str]:
    """Reasons for invalid role transitions."""
    problems = []
    if not messages:
        return ["empty_example"]
    for i, msg in enumerate(messages):
        prev = messages[i - 1] if i else None
        if msg.role == "system" and i != 0:
            problems.append("system_not_first")
        if msg.role == "tool":
            if prev is None or not (prev.role == "tool" or (prev.role == "assistant" and prev.tool_calls)):
                problems.append("tool_without_call")
        if prev is not None and msg.role == prev.role and msg.role in ("user", "assistant"):
            problems.append(f"repeated_{msg.role}_turn")
    first_dialogue = next((m for m in messages if m.role != "system"), None)
    if first_dialogue is None or first_dialogue.role != "user":
        problems.append("dialogue_does_not_start_with_user")
    if messages[-1].role != "assistant":
        problems.append("does_not_end_with_assistant")
    return problems


def check_masks(messages: list[Message]) -> list[str]:
    """Reasons for loss masks that contradict the split rule."""
    problems = []
    boundary = last_user_index(messages, len(messages) - 1)
    for i, msg in enumerate(messages):
        if msg.role != "assistant":
            if msg.loss:
                problems.append(f"loss_on_{msg.role}")
            continue
        if i < boundary and (msg.loss or msg.reasoning):
            problems.append("context_turn_supervised_or_unstripped")
        if i > boundary and not msg.loss:
            problems.append("response_turn_unsupervised")
        if i < len(messages) - 1 and i > boundary and not is_intermediate(messages, i):
            problems.append("response_not_split_at_end")
    if not messages or messages[-1].role != "assistant" or not messages[-1].loss:
        problems.append("no_supervised_reply")
    return problems


def validate_sample(sample: SFTSample) -> list[str]:
    """All reasons ``sample`` is invalid (empty list: valid)."""
    msgs = sample.messages
    return sorted(set(check_think_tags(msgs) + check_roles(msgs) + check_masks(msgs)))
