"""Condense a page that is over the scrape budget into evidence and a summary (paper §3.7), numbers kept.

The summarizer is an OpenAI-compatible chat model (:class:`infra.endpoints.ChatClient`, the teacher's
client, or anything with its ``chat(messages, ...) -> list[str]``). Its prompt asks for the page's
evidence with names, dates and numbers copied verbatim; a page over the summarizer's own input budget
is split on paragraph boundaries and each part condensed in turn.

Models drop numbers anyway, so the result is checked, not trusted: every number of the page (a digit
run with its ``, . : / -`` joiners, so ``1,234.5``, ``2019-03-12`` and ``10:30`` stay whole) that the
summary lacks is restored by appending the page's sentence that holds it after ``Facts kept verbatim:``.
A summarizer endpoint that fails is an infrastructure failure (:class:`SummarizerUnavailable`).
"""

from __future__ import annotations

import re
from typing import Any

from infra.agents.contract import EnvironmentFailure
from infra.agents.search.text_budget import CHARS_PER_TOKEN
from infra.endpoints import TeacherError

_NUMBER = re.compile(r"(?<![\w])\d+(?:[.,:/-]\d+)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
FACTS_PREFIX = "Facts kept verbatim:"

SYSTEM_PROMPT = (
    "You condense web pages for a research agent that cannot read the whole page. Write two sections.\n"
    "Evidence: a bullet list of every fact on the page that could answer a question about it: who, what, "
    "when, where, how many.\n"
    "Summary: a few sentences on what the page is about.\n"
    "Copy names, dates, numbers, quantities and units exactly as written on the page, character for "
    "character; never round, convert, translate or paraphrase them. Add no facts that are not on the page."
)


class SummarizerUnavailable(EnvironmentFailure):
    """The summarizer endpoint failed or answered nothing: infrastructure failure, the episode aborts."""


def numbers(text: str) -> list[str]:
    """Return the distinct numbers of ``text`` in order of first appearance."""
    return list(dict.fromkeys(_NUMBER.findall(text)))


def missing_numbers(original: str, summary: str) -> list[str]:
    """Return the numbers of ``original`` that ``summary`` does not contain as whole numbers."""
    present = set(_NUMBER.findall(summary))
    return [n for n in numbers(original) if n not in present]


def restore_numbers(original: str, summary: str) -> str:
    """Return ``summary`` plus a ``Facts kept verbatim:`` line: the page's sentences with lost numbers."""
    missing = set(missing_numbers(original, summary))
    if not missing:
        return summary
    facts: list[str] = []
    for sentence in _SENTENCE.split(original):
        sentence = " ".join(sentence.split())
        found = missing & set(_NUMBER.findall(sentence))
        if found:
            facts.append(sentence)
            missing -= found
        if not missing:
            break
    return f"{summary.rstrip()}\n{FACTS_PREFIX} " + " | ".join(facts)


def split_paragraphs(text: str, max_chars: int) -> list[str]:
    """Return ``text`` cut into pieces of at most ``max_chars``, on paragraph (else hard) boundaries."""
    pieces: list[str] = []
    current = ""
    for para in text.split("\n\n"):
        while len(para) > max_chars:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(para[:max_chars])
            para = para[max_chars:]
        if current and len(current) + 2 + len(para) > max_chars:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
    if current:
        pieces.append(current)
    return pieces


class Summarizer:
    """``condense(text, budget_tokens)`` → evidence + summary of a long page, its numbers restored."""

    def __init__(
        self,
        client: Any,
        *,
        max_input_tokens: int = 32_000,
        temperature: float = 0.0,
    ) -> None:
        self.client = client
        self.max_input_chars = max_input_tokens * CHARS_PER_TOKEN
        self.temperature = temperature

    def condense(self, text: str, budget_tokens: int, url: str = "") -> str:
        """Return the condensed page, aimed at ``budget_tokens`` tokens, every number of ``text`` kept."""
        parts = split_paragraphs(text, self.max_input_chars)
        words = max(budget_tokens * 3 // (4 * len(parts)), 50)
        summaries = []
        for i, part in enumerate(parts, 1):
            where = f"page {url}" if url else "the page"
            if len(parts) > 1:
                where += f", part {i} of {len(parts)}"
            user = f"Condense {where} in at most {words} words.\n\n<page>\n{part}\n</page>"
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
            try:
                out = self.client.chat(messages, temperature=self.temperature, include_reasoning=False)
            except TeacherError as exc:
                raise SummarizerUnavailable(f"summarizer: {exc}") from exc
            if not out or not out[0].strip():
                raise SummarizerUnavailable(f"summarizer answered nothing for {where}")
            summaries.append(out[0].strip())
        return restore_numbers(text, "\n\n".join(summaries))
