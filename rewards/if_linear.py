"""IF checkers that replace the reference's own code on purpose (:mod:`rewards.if_constraints` uses them).

Two kinds, both tested against the reference verdict (``tests/test_if_agreement.py``):

* **Same verdict, linear time.** Four reference checkers use regular expressions that backtrack
  quadratically on adversarial answers (about 3 s at 20 KB, minutes at 80 KB): placeholders
  ``\\[.*?\\]`` (a long line of ``[``), bullet lists ``^\\s*\\*[^\\*].*$`` (a long run of blank lines),
  postscript ``\\s*p\\.\\s?s\\..*$`` (long whitespace) and title ``<<[^\\n]+>>`` (a long line of ``<<``).
  The functions below compute what those regexes find in one pass; a differential fuzz test checks they
  agree with the regexes on random strings over the characters that matter.
* **Deliberate differences** (documented in :data:`DELIBERATE_DIFFERENCES`), where the reference has a
  bug: language checks pass when ``langdetect`` finds no language at all (a digits-only or
  punctuation-only answer "is French"); nth-paragraph lookup indexes the raw ``\\n\\n`` split, so a
  repeated blank line shifts which paragraph is read; JSON nested deeper than Python's recursion limit
  raises ``RecursionError`` out of the reference.
"""

from __future__ import annotations

import json
import re

DELIBERATE_DIFFERENCES: dict[str, str] = {
    "language:response_language": (
        "no detectable language (digits, symbols only) fails; the reference passes it"
    ),
    "change_case:english_capital": "no detectable language fails; the reference passes it",
    "change_case:english_lowercase": "no detectable language fails; the reference passes it",
    "length_constraints:nth_paragraph_first_word": (
        "the nth non-empty paragraph is read; the reference indexes the raw split, so extra blank lines "
        "make it read an empty or earlier paragraph"
    ),
    "detectable_format:json_format": "JSON nested past the recursion limit is not JSON; the reference raises",
    "keywords:*, detectable_format:multiple_sections, custom postscript markers": (
        "keywords, section splitters and markers are literal text; the reference pastes them into a "
        "regular expression unescaped ('C++' raises there, '.' matches any character)"
    ),
}


def count_placeholders(text: str) -> int:
    """Return ``len(re.findall(r"\\[.*?\\]", text))`` in linear time."""
    count = 0
    for line in text.split("\n"):
        i = 0
        while (start := line.find("[", i)) >= 0 and (end := line.find("]", start + 1)) >= 0:
            count += 1
            i = end + 1
    return count


def _count_line_items(text: str, lead: str) -> int:
    """Return how many matches ``^\\s*<lead>…$`` (MULTILINE) finds, ``*`` needing a non-``*`` after it."""
    n, count, p = len(text), 0, 0
    while p <= n:
        q = p
        while q < n and text[q].isspace():
            q += 1
        if lead == "*":
            matched, rest = q + 1 < n and text[q] == "*" and text[q + 1] != "*", q + 2
        else:
            matched, rest = q < n and text[q] == "-", q + 1
        if matched:
            count += 1
            end = text.find("\n", rest)
            end = n if end < 0 else end
            p = end if end > 0 and text[end - 1] == "\n" else end + 1
        else:
            newline = text.find("\n", q)
            if newline < 0:
                break
            p = newline + 1
    return count


def count_bullets(text: str) -> int:
    """Return the reference's bullet count (``*`` items plus ``-`` items) in linear time."""
    return _count_line_items(text, "*") + _count_line_items(text, "-")


def has_postscript(text: str, marker: str) -> bool:
    """Return whether the reference's postscript pattern occurs (custom markers taken literally)."""
    if marker == "P.P.S":
        core = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        core = r"p\.\s?s\."
    else:
        core = re.escape(marker.lower())
    # The reference's leading \s* and trailing .*$ match the empty string, so only the core decides.
    return re.search(core, text.lower()) is not None


def has_title(text: str) -> bool:
    """Return the reference's title verdict (``<<[^\\n]+>>`` with non-blank content) in linear time."""
    for line in text.split("\n"):
        start = line.find("<<")
        if start < 0:
            continue
        end = line.rfind(">>")
        if end >= start + 3 and line[start : end + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


def detect_language(text: str) -> str | None:
    """Return langdetect's ISO 639-1 code for ``text`` (seeded), or None when it finds no language."""
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return None


def response_language(text: str, language: str) -> bool:
    """Return whether ``text`` is in ``language``; undetectable text fails (deliberate difference)."""
    return detect_language(text) == language


def english_capital(text: str) -> bool:
    """Return whether ``text`` is all capitals and English; undetectable text fails."""
    return text.isupper() and detect_language(text) == "en"


def english_lowercase(text: str) -> bool:
    """Return whether ``text`` is all lowercase and English; undetectable text fails."""
    return text.islower() and detect_language(text) == "en"


def nth_paragraph_first_word(text: str, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    """Return the reference's verdict, reading the nth *non-empty* paragraph (deliberate difference)."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    if not 1 <= nth_paragraph <= len(paragraphs):
        return False
    word = paragraphs[nth_paragraph - 1].split()[0].strip().lstrip("'").lstrip('"')
    head = ""
    for letter in word:
        if letter in {".", ",", "?", "!", "'", '"'}:
            break
        head += letter.lower()
    return len(paragraphs) == num_paragraphs and head == first_word.lower()


def json_format(text: str) -> bool:
    """Return the reference's JSON verdict; nesting past the recursion limit is not JSON (no raise)."""
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        body = body.removeprefix(fence)
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True
