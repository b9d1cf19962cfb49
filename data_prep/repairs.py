"""Source-independent repairs applied after conversion, before the interleaved-thinking split.

* reasoning tags: ``<think>…</think>`` inside assistant text moves to ``reasoning``; a missing opening tag
  (text before a lone ``</think>``) is treated as reasoning; an unterminated ``<think>`` marks the turn
  truncated; stray tags elsewhere are removed;
* answer suffixes: ``<answer>…</answer>`` wrappers are unwrapped (unless the source's target format is the
  tag itself, e.g. the search agent's final answer: ``keep_answer_tags``) and trailing end-of-turn tokens of
  other chat formats (``<|im_end|>``, ``</s>``…) are cut;
* system prompts: empty ones are dropped, generator control lines (e.g. ``detailed thinking on``) are
  removed, several leading system turns are merged;
* incomplete final turns: a truncated last assistant turn and any trailing user/tool turns are cut;
* consecutive user turns are merged.

:func:`repair_conversation` returns the repaired messages and the names of the repairs applied, or
raises :class:`RowRejected` (e.g. ``no_supervised_reply``) for rows that cannot be used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from data_prep.schema import Message

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_ANSWER_RE = re.compile(r"^\s*<answer>\s*(.*?)\s*</answer>\s*$", re.DOTALL)
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<|end|>", "<|return|>")


class RowRejected(ValueError):
    """A row that cannot yield a training example; ``reason`` is the counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def split_reasoning(text: str) -> tuple[str | None, str, str | None]:
    """Split assistant text into ``(reasoning, content, problem)``; ``problem`` names the repair."""
    if _THINK_OPEN not in text and _THINK_CLOSE not in text:
        return None, text, None
    problem = None
    opens, closes = text.count(_THINK_OPEN), text.count(_THINK_CLOSE)
    if closes == 0:  # "<think>..." never closed: generation was cut inside the rationale
        return None, text, "truncated_reasoning"
    head, _, tail = text.rpartition(_THINK_CLOSE)
    if opens == 0:
        problem = "missing_think_open"
    elif opens != closes or not text.lstrip().startswith(_THINK_OPEN):
        problem = "unbalanced_think_tags"
    reasoning = head.replace(_THINK_OPEN, "").replace(_THINK_CLOSE, "").strip()
    content = tail.replace(_THINK_OPEN, "").strip()
    return reasoning or None, content, problem or "think_tags_moved"


def _strip_suffixes(text: str) -> str:
    stripped = text.rstrip()
    changed = True
    while changed:
        changed = False
        for tok in _END_TOKENS:
            if stripped.endswith(tok):
                stripped, changed = stripped[: -len(tok)].rstrip(), True
    return stripped


def _repair_assistant(msg: Message, applied: list[str], keep_answer_tags: bool) -> tuple[Message, bool]:
    """Return the repaired assistant turn and whether it is truncated."""
    reasoning, content, problem = split_reasoning(msg.content)
    if problem == "truncated_reasoning":
        return msg, True
    if problem:
        applied.append(problem)
    if msg.reasoning is not None:  # a separate field wins; inline tags in it are stripped
        extra = reasoning
        reasoning = msg.reasoning.replace(_THINK_OPEN, "").replace(_THINK_CLOSE, "").strip() or None
        if extra:
            reasoning = f"{reasoning}\n{extra}" if reasoning else extra
    cleaned = _strip_suffixes(content)
    if cleaned != content.rstrip():
        applied.append("end_token_suffix_removed")
    answer = None if keep_answer_tags else _ANSWER_RE.match(cleaned)
    if answer:
        cleaned = answer.group(1)
        applied.append("answer_tags_unwrapped")
    return msg.model_copy(update={"content": cleaned.strip(), "reasoning": reasoning}), False


def _clean_system(text: str, patterns: Sequence[re.Pattern[str]]) -> str:
    lines = [ln for ln in text.splitlines() if not any(p.match(ln) for p in patterns)]
    return "\n".join(lines).strip()


def repair_conversation(
    messages: Sequence[Message], system_prompt_patterns: Sequence[str] = (), keep_answer_tags: bool = False
) -> tuple[list[Message], list[str]]:
    """Return repaired messages and the repairs applied; raise :class:`RowRejected` for unusable rows.

    ``keep_answer_tags`` leaves ``<answer>…</answer>`` replies as they are, for sources whose reward reads
    the tag (an agent's committed final answer) rather than wrapping a plain reply in it.
    """
    patterns = [re.compile(p, re.IGNORECASE) for p in system_prompt_patterns]
    applied: list[str] = []
    out: list[Message] = []
    truncated_at: int | None = None
    for msg in messages:
        if msg.role == "system":
            content = _clean_system(msg.content, patterns) if patterns else msg.content.strip()
            if content != msg.content.strip():
                applied.append("system_control_line_removed")
            if not content:
                applied.append("empty_system_dropped")
                continue
            if out and out[-1].role == "system":
                out[-1] = out[-1].model_copy(update={"content": out[-1].content + "\n\n" + content})
                applied.append("system_prompts_merged")
                continue
            if out:
                raise RowRejected("system_after_dialogue", "a system turn appears after the dialogue started")
            out.append(msg.model_copy(update={"content": content}))
        elif msg.role == "assistant":
            fixed, truncated = _repair_assistant(msg, applied, keep_answer_tags)
            if truncated:
                truncated_at = len(out)
                break
            if not fixed.content and not fixed.tool_calls and not fixed.reasoning:
                applied.append("empty_assistant_dropped")
                continue
            out.append(fixed)
        elif msg.role == "user" and out and out[-1].role == "user":
            out[-1] = out[-1].model_copy(update={"content": out[-1].content + "\n\n" + msg.content})
            applied.append("user_turns_merged")
        else:
            out.append(msg)
    if truncated_at is not None:
        applied.append("truncated_final_turn_cut")
    # An incomplete ending (no assistant reply after the last user/tool turn) is cut back.
    while out and out[-1].role in ("user", "tool", "system"):
        out.pop()
        applied.append("trailing_turn_cut")
    if not any(m.role == "assistant" for m in out):
        raise RowRejected("no_supervised_reply", "no assistant reply left after repairs")
    if not any(m.role == "user" for m in out):
        raise RowRejected("no_user_turn", "no user request before the assistant reply")
    return out, applied
