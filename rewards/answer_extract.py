"""Pulling the canonical final answer out of a model response (shared by the reasoning and format rewards).

A response is ``<think>reasoning</think>`` followed by the final answer. The canonical answer is the
content of the last ``\\boxed{...}`` in the final part (braces matched, so ``\\boxed{\\frac{1}{2}}``
works), else the text after the last ``Answer:`` marker. Reasoning is never searched, so an answer
"found" while thinking aloud does not count. Written by hand because brace matching and the think/answer
split are three small functions, and math-verify's own extraction also searches the reasoning.
"""

from __future__ import annotations

import re

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_ANSWER_LINE = re.compile(r"(?im)^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]\s*(.+?)\s*$")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def split_thinking(response: str) -> tuple[str | None, str, str | None]:
    """Return ``(reasoning, final, problem)``: the think block, the text after it, and what is malformed.

    ``problem`` is ``None`` for a well-formed response (no think block at all, or exactly one balanced
    block that opens before it closes); ``"unbalanced_think"`` or ``"unterminated_think"`` otherwise. With
    an unterminated block the final part is empty: everything the model wrote is still reasoning.
    """
    opens, closes = response.count(THINK_OPEN), response.count(THINK_CLOSE)
    if opens == 0 and closes == 0:
        return None, response.strip(), None
    if closes == 0:
        return response.split(THINK_OPEN, 1)[1], "", "unterminated_think"
    head, _, final = response.rpartition(THINK_CLOSE)
    reasoning = head.split(THINK_OPEN, 1)[1] if THINK_OPEN in head else head
    problem = None
    if opens != 1 or closes != 1 or response.index(THINK_OPEN) > response.index(THINK_CLOSE):
        problem = "unbalanced_think"
    return reasoning, final.strip(), problem


def last_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}`` with matched braces, or None."""
    matches = list(_BOXED.finditer(text))
    for m in reversed(matches):
        depth, i = 1, m.end()
        while i < len(text):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[m.end() : i].strip()
            i += 1
    return None


def answer_line(text: str) -> str | None:
    """Return the text after the last ``Answer:`` marker, or None."""
    found = _ANSWER_LINE.findall(text)
    return found[-1].strip() if found else None


def final_answer(response: str) -> tuple[str | None, str | None]:
    """Return ``(answer, failure)``; failure is ``unterminated_think`` or ``no_answer`` when none is found."""
    _, final, problem = split_thinking(response)
    if problem == "unterminated_think":
        return None, problem
    answer = last_boxed(final)
    if answer is None:
        answer = answer_line(final)
    if not answer:
        return None, "no_answer"
    return answer, None
