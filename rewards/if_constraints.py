"""The hand-written single-constraint pool of IF RL (paper §3.4): checker + prompt phrasing per constraint.

It covers IFEval's 25 instruction ids with IFEval's semantics (``CONSTRAINTS[id].check(response, **kw)``
and ``CONSTRAINTS[id].phrase(**kw)``), plus two ids of our own that short tiny-scale answers can satisfy
(``change_case:all_lowercase``, ``startend:start_checker``). Code rubrics (``rewards.instruction_following``)
name a checker by id with its kwargs; the embedded task generator and the teacher prompt draw from here.

Why not lm-eval's copy: ``lm_eval`` is not installed in this environment, and its IFEval module downloads
NLTK data at import time, which cannot work offline. The checkers below reimplement the same rules with
regular expressions; where IFEval tokenises with NLTK (word and sentence counts) we count ``\\w+`` runs
and split sentences on terminal punctuation, which agree with NLTK on ordinary prose. Language checks use
``langdetect`` with a fixed seed, as IFEval does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RELATIONS = ("less than", "at least")


def _compare(count: int, relation: str, n: int) -> bool:
    if relation == "less than":
        return count < n
    if relation == "at least":
        return count >= n
    raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")


def detect_language(text: str) -> str:
    """Return langdetect's ISO 639-1 code for ``text`` (seeded, so the answer is reproducible)."""
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return "unknown"


def count_words(text: str) -> int:
    """Return the number of ``\\w+`` runs (IFEval's word count)."""
    return len(re.findall(r"\w+", text))


def split_sentences(text: str) -> list[str]:
    """Return the sentences of ``text``: split after . ! ? followed by whitespace, empty pieces dropped."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def _paragraphs_stars(text: str) -> int | None:
    parts = re.split(r"\s?\*\*\*\s?", text)
    count = len(parts)
    for i, part in enumerate(parts):
        if not part.strip():
            if i in (0, len(parts) - 1):
                count -= 1
            else:
                return None
    return count


def _existence(r: str, keywords: list[str]) -> bool:
    return all(re.search(re.escape(k), r, flags=re.IGNORECASE) for k in keywords)


def _frequency(r: str, keyword: str, frequency: int, relation: str) -> bool:
    return _compare(len(re.findall(re.escape(keyword), r, flags=re.IGNORECASE)), relation, frequency)


def _forbidden(r: str, forbidden_words: list[str]) -> bool:
    return not any(re.search(r"\b" + re.escape(w) + r"\b", r, flags=re.IGNORECASE) for w in forbidden_words)


def _letter_frequency(r: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    return _compare(r.lower().count(letter.lower()), let_relation, let_frequency)


def _language(r: str, language: str) -> bool:
    return detect_language(r) == language


def _sentences(r: str, num_sentences: int, relation: str) -> bool:
    return _compare(len(split_sentences(r)), relation, num_sentences)


def _paragraphs(r: str, num_paragraphs: int) -> bool:
    return _paragraphs_stars(r) == num_paragraphs


def _words(r: str, num_words: int, relation: str) -> bool:
    return _compare(count_words(r), relation, num_words)


def _nth_first_word(r: str, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    paragraphs = [p for p in re.split(r"\n\n", r) if p.strip()]
    if len(paragraphs) != num_paragraphs or not 1 <= nth_paragraph <= len(paragraphs):
        return False
    words = paragraphs[nth_paragraph - 1].strip().split()
    if not words:
        return False
    head = re.sub(r"^[^\w]+|[^\w]+$", "", words[0]).lower()
    return head == first_word.lower()


def _placeholders(r: str, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", r)) >= num_placeholders


def _postscript(r: str, postscript_marker: str = "P.S.") -> bool:
    marker = postscript_marker.strip().lower()
    pattern = r"\s*p\.\s?s\..*$" if marker == "p.s." else r"\s*" + re.escape(marker) + r".*$"
    return bool(re.findall(pattern, r.lower(), flags=re.MULTILINE))


def _bullets(r: str, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", r, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", r, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def _constrained(r: str) -> bool:
    return any(opt in r.strip() for opt in CONSTRAINED_OPTIONS)


def _highlights(r: str, num_highlights: int) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", r) if h.strip("*").strip()]
    double = [
        h for h in re.findall(r"\*\*[^\n\*]*\*\*", r) if h.removeprefix("**").removesuffix("**").strip()
    ]
    return len(single) + len(double) >= num_highlights


def _sections(r: str, section_spliter: str, num_sections: int) -> bool:
    parts = re.split(r"\s?" + re.escape(section_spliter) + r"\s?\d+\s?", r)
    return len(parts) - 1 >= num_sections


def _json(r: str) -> bool:
    body = r.strip()
    body = re.sub(r"^```(?:json|JSON|Json)?\s*", "", body)
    body = re.sub(r"\s*```$", "", body).strip()
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _title(r: str) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", r))


def _two_responses(r: str) -> bool:
    parts = r.split("******")
    valid = [p.strip() for p in parts if p.strip()]
    blanks_ok = all(p.strip() or i in (0, len(parts) - 1) for i, p in enumerate(parts))
    return blanks_ok and len(valid) == 2 and valid[0] != valid[1]


def _repeat_prompt(r: str, prompt_to_repeat: str) -> bool:
    return r.strip().lower().startswith(prompt_to_repeat.strip().lower())


def _end(r: str, end_phrase: str) -> bool:
    return r.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def _start(r: str, start_phrase: str) -> bool:
    return r.strip().strip('"').lower().startswith(start_phrase.strip().lower())


def _quotation(r: str) -> bool:
    body = r.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'


def _capital_words(r: str, capital_frequency: int, capital_relation: str) -> bool:
    caps = [w for w in re.findall(r"\w+", r) if w.isupper()]
    return _compare(len(caps), capital_relation, capital_frequency)


def _english_capital(r: str) -> bool:
    return r.isupper() and detect_language(r) == "en"


def _english_lowercase(r: str) -> bool:
    return r.islower() and detect_language(r) == "en"


def _all_lowercase(r: str) -> bool:
    return r.islower()


def _no_comma(r: str) -> bool:
    return "," not in r


def _words_list(ws: list[str]) -> str:
    return ", ".join(ws)


@dataclass(frozen=True)
class Constraint:
    """One atomic constraint: its id, checker, prompt phrasing and keyword-argument names."""

    id: str
    check_fn: Callable[..., bool]
    phrase_fn: Callable[..., str]
    args: tuple[str, ...] = ()
    ifeval: bool = True

    def check(self, response: str, **kwargs: Any) -> bool:
        """Return whether ``response`` satisfies the constraint with ``kwargs``."""
        unknown = set(kwargs) - set(self.args)
        if unknown:
            raise ValueError(f"constraint {self.id}: unknown kwargs {sorted(unknown)}; expected {self.args}")
        return bool(self.check_fn(response, **kwargs))

    def phrase(self, **kwargs: Any) -> str:
        """Return the instruction sentence a prompt carries for this constraint."""
        return self.phrase_fn(**kwargs)


def _c(
    id_: str, check: Callable[..., bool], phrase: Callable[..., str], *args: str, ifeval: bool = True
) -> Constraint:
    return Constraint(id_, check, phrase, args, ifeval)


_POOL = (
    _c(
        "keywords:existence",
        _existence,
        lambda keywords: f"Use the words {_words_list(keywords)}.",
        "keywords",
    ),
    _c(
        "keywords:frequency",
        _frequency,
        lambda keyword, frequency, relation: f"Use the word {keyword} {relation} {frequency} times.",
        "keyword",
        "frequency",
        "relation",
    ),
    _c(
        "keywords:forbidden_words",
        _forbidden,
        lambda forbidden_words: f"Do not use the words {_words_list(forbidden_words)}.",
        "forbidden_words",
    ),
    _c(
        "keywords:letter_frequency",
        _letter_frequency,
        lambda letter, let_frequency, let_relation: (
            f"Use the letter {letter} {let_relation} {let_frequency} times."
        ),
        "letter",
        "let_frequency",
        "let_relation",
    ),
    _c(
        "language:response_language",
        _language,
        lambda language: f"Answer only in the language with ISO code {language}.",
        "language",
    ),
    _c(
        "length_constraints:number_sentences",
        _sentences,
        lambda num_sentences, relation: f"Write {relation} {num_sentences} sentences.",
        "num_sentences",
        "relation",
    ),
    _c(
        "length_constraints:number_paragraphs",
        _paragraphs,
        lambda num_paragraphs: f"Write {num_paragraphs} paragraphs separated by ***.",
        "num_paragraphs",
    ),
    _c(
        "length_constraints:number_words",
        _words,
        lambda num_words, relation: f"Use {relation} {num_words} words.",
        "num_words",
        "relation",
    ),
    _c(
        "length_constraints:nth_paragraph_first_word",
        _nth_first_word,
        lambda num_paragraphs, nth_paragraph, first_word: (
            f"Write {num_paragraphs} paragraphs split by blank lines; paragraph {nth_paragraph} starts with "
            f"{first_word}."
        ),
        "num_paragraphs",
        "nth_paragraph",
        "first_word",
    ),
    _c(
        "detectable_content:number_placeholders",
        _placeholders,
        lambda num_placeholders: f"Add at least {num_placeholders} placeholder like [name].",
        "num_placeholders",
    ),
    _c(
        "detectable_content:postscript",
        _postscript,
        lambda postscript_marker="P.S.": f"Add a postscript starting {postscript_marker}",
        "postscript_marker",
    ),
    _c(
        "detectable_format:number_bullet_lists",
        _bullets,
        lambda num_bullets: f"Use exactly {num_bullets} bullet points like * item.",
        "num_bullets",
    ),
    _c(
        "detectable_format:constrained_response",
        _constrained,
        lambda: "Answer with one of: My answer is yes. / My answer is no. / My answer is maybe.",
    ),
    _c(
        "detectable_format:number_highlighted_sections",
        _highlights,
        lambda num_highlights: f"Highlight at least {num_highlights} part with *stars*.",
        "num_highlights",
    ),
    _c(
        "detectable_format:multiple_sections",
        _sections,
        lambda section_spliter, num_sections: (
            f"Write {num_sections} sections, each starting {section_spliter} X."
        ),
        "section_spliter",
        "num_sections",
    ),
    _c("detectable_format:json_format", _json, lambda: "Wrap the whole answer in JSON."),
    _c("detectable_format:title", _title, lambda: "Add a title like <<title>>."),
    _c(
        "combination:two_responses",
        _two_responses,
        lambda: "Give two different answers separated by six asterisks ******.",
    ),
    _c(
        "combination:repeat_prompt",
        _repeat_prompt,
        lambda prompt_to_repeat: f"First repeat the request word for word: {prompt_to_repeat}",
        "prompt_to_repeat",
    ),
    _c("startend:end_checker", _end, lambda end_phrase: f"End with: {end_phrase}", "end_phrase"),
    _c("startend:quotation", _quotation, lambda: "Wrap the answer in double quotes."),
    _c(
        "change_case:capital_word_frequency",
        _capital_words,
        lambda capital_frequency, capital_relation: (
            f"Use {capital_relation} {capital_frequency} ALL-CAPS words."
        ),
        "capital_frequency",
        "capital_relation",
    ),
    _c("change_case:english_capital", _english_capital, lambda: "Answer in English, all in capital letters."),
    _c("change_case:english_lowercase", _english_lowercase, lambda: "Answer in English, all in lowercase."),
    _c("punctuation:no_comma", _no_comma, lambda: "No commas."),
    _c("change_case:all_lowercase", _all_lowercase, lambda: "Use lowercase only.", ifeval=False),
    _c(
        "startend:start_checker",
        _start,
        lambda start_phrase: f"Start with: {start_phrase}",
        "start_phrase",
        ifeval=False,
    ),
)
CONSTRAINTS: dict[str, Constraint] = {c.id: c for c in _POOL}
IFEVAL_IDS: tuple[str, ...] = tuple(c.id for c in _POOL if c.ifeval)


def get_constraint(constraint_id: str) -> Constraint:
    """Return the constraint ``constraint_id``; the error lists the known ids."""
    try:
        return CONSTRAINTS[constraint_id]
    except KeyError:
        raise KeyError(f"unknown constraint {constraint_id!r}; known: {', '.join(CONSTRAINTS)}") from None


def check_constraint(constraint_id: str, response: str, kwargs: dict[str, Any] | None = None) -> bool:
    """Return whether ``response`` satisfies constraint ``constraint_id`` with ``kwargs``."""
    return get_constraint(constraint_id).check(response, **(kwargs or {}))
