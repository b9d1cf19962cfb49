"""Pulling the canonical final answer out of a model response (shared by the reasoning and format rewards).

A response is ``<think>reasoning</think>`` followed by the final answer. The canonical answer is the
content of the last ``\\boxed{...}`` in the final part (braces matched, so ``\\boxed{\\frac{1}{2}}``
works), else the text after the last ``Answer:`` marker. Reasoning is never searched, so an answer
"found" while thinking aloud does not count. Written by hand because brace matching and the think/answer
split are three small functions, and math-verify's own extraction also searches the reasoning.

Every function here is linear in the length of the text (model output is arbitrary: long whitespace
runs, thousands of unclosed ``\\boxed{``), with the same results as the plain regex and rescanning
definitions they replace (``tests/test_reward_fuzz.py`` compares them on generated text).
"""

from __future__ import annotations

import re

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# The marker of an answer line: at a line start, optional ``**``, optional ``final``, ``answer``, a colon.
# Whitespace may cross lines as in ``^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]``, but the match starts
# only on the line holding the first non-blank character and no two quantifiers can share a character, so
# a failed attempt costs its own line and whitespace run, never a rescan (no super-linear backtracking).
_MARKER = re.compile(r"(?im)^[^\S\n]*(?=\S)(?:\*+\s*)?(?:final\s+)?answer\s*(?:\*+\s*)?[:：]")
_SPACE = re.compile(r"\s*")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


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
    """Return the content of the last ``\\boxed{...}`` with matched braces, or None.

    One right-to-left pass matches every ``{`` with its ``}``; the answer is the last box whose brace
    closes (a box left open is skipped, as an earlier one may still close).
    """
    opens = {m.end() - 1 for m in _BOXED.finditer(text)}
    if not opens:
        return None
    pending: list[int] = []  # unmatched "}" positions, nearest last
    for m in reversed(list(_BRACE.finditer(text))):
        at = m.start()
        if text[at] == "}":
            pending.append(at)
        elif pending:
            close = pending.pop()
            if at in opens:
                return text[at + 1 : close].strip()
    return None


def answer_line(text: str) -> str | None:
    """Return the text after the last ``Answer:`` marker, or None.

    The answer is the first non-blank text after the marker (on its line or a later one) up to the end of
    that line, stripped; a marker followed only by blanks gives ``""``, one followed only by line breaks
    nothing. Scanning resumes after the answer's line, so an answer line is never itself a marker.
    """
    found: str | None = None
    pos = 0
    while (m := _MARKER.search(text, pos)) is not None:
        start = _SPACE.match(text, m.end()).end()
        if start == len(text):  # only blanks after the marker
            return "" if text[m.end() :].strip("\n") else found
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        found, pos = text[start:end].strip(), end
    return found


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
