"""The single-constraint pool of IF RL (paper §3.4): a checker and a prompt phrasing per constraint.

``CONSTRAINTS[id].check(response, **kw)`` and ``CONSTRAINTS[id].phrase(**kw)``. Code rubrics
(:mod:`rewards.instruction_following`) name a checker by id with its kwargs; the embedded task generator
and the teacher prompt draw from here.

Which implementation judges (``Constraint.checker``):

* ``reference`` — IFEval's 25 instruction ids are judged by the reference checkers themselves,
  lm-evaluation-harness 0.4.13's instruction registry (:mod:`rewards.if_reference`: punkt installed
  offline, kwargs validated so the reference never fills in random ones), with its strict rule (an empty
  answer follows nothing). Stage 03 trains on the checker its IFEval target is scored with.
* ``linear`` — four of those ids (placeholders, bullet lists, postscript, title) run a linear-time
  computation of the reference's own regex instead of the regex, which backtracks quadratically on
  adversarial answers (:mod:`rewards.if_linear`); same verdicts, fuzz-tested against the regex.
* ``differs`` — where the reference has a bug we keep the better behaviour, listed with reasons in
  :data:`rewards.if_linear.DELIBERATE_DIFFERENCES` and tested against the reference's verdict.
* ``own`` — two ids the references (lm-eval's IFEval and allenai/IFBench) lack, which short tiny-scale
  answers can satisfy: ``change_case:all_lowercase`` (every cased letter lowercase, no language test) and
  ``startend:start_checker`` (starts with a phrase, case-insensitive, leading quotes ignored, mirroring
  IFEval's ``end_checker``).

IFBench's 58 constraints are not in the pool yet (no row uses them); add them with checkers that follow
allenai/IFBench's. Every checker is linear in the response length; the reward caps what it reads at
:data:`MAX_RESPONSE_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from rewards import if_linear
from rewards.if_reference import reference_instruction, reference_util

RELATIONS = ("less than", "at least")
# 16K tokens of English is about 64K characters; longer answers fail closed (``response_too_long``).
MAX_RESPONSE_CHARS = 100_000
CHECKER_KINDS = ("reference", "linear", "differs", "own")


def count_words(text: str) -> int:
    """Return IFEval's word count (``\\w+`` runs, lm-eval's own function)."""
    return reference_util().count_words(text)


def split_sentences(text: str) -> list[str]:
    """Return the sentences of ``text`` as IFEval counts them (NLTK punkt, English)."""
    import nltk

    reference_util()
    return nltk.tokenize.sent_tokenize(text)


def detect_language(text: str) -> str:
    """Return langdetect's ISO 639-1 code for ``text`` (seeded), ``"unknown"`` when it finds none."""
    return if_linear.detect_language(text) or "unknown"


def _literal(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Escape the kwargs the reference pastes into a regular expression, so they match literally."""
    out = dict(kwargs)
    for key in ("keywords", "forbidden_words"):
        if isinstance(out.get(key), list):
            out[key] = [re.escape(w) if isinstance(w, str) else w for w in out[key]]
    for key in ("keyword", "section_spliter"):
        if isinstance(out.get(key), str):
            out[key] = re.escape(out[key].strip())
    return out


def _reference_check(constraint_id: str, response: str, **kwargs: Any) -> bool:
    instruction = reference_instruction(constraint_id, _literal(kwargs))
    return bool(response.strip()) and bool(instruction.check_following(response))


# Linear-time or deliberately different verdicts, called with the validated kwargs.
_OVERRIDES: dict[str, tuple[str, Callable[..., bool]]] = {
    "detectable_content:number_placeholders": (
        "linear",
        lambda r, num_placeholders: if_linear.count_placeholders(r) >= num_placeholders,
    ),
    "detectable_format:number_bullet_lists": (
        "linear",
        lambda r, num_bullets: if_linear.count_bullets(r) == num_bullets,
    ),
    "detectable_content:postscript": (
        "linear",
        lambda r, postscript_marker: if_linear.has_postscript(r, postscript_marker.strip()),
    ),
    "detectable_format:title": ("linear", lambda r: if_linear.has_title(r)),
    "language:response_language": ("differs", lambda r, language: if_linear.response_language(r, language)),
    "change_case:english_capital": ("differs", lambda r: if_linear.english_capital(r)),
    "change_case:english_lowercase": ("differs", lambda r: if_linear.english_lowercase(r)),
    "length_constraints:nth_paragraph_first_word": ("differs", if_linear.nth_paragraph_first_word),
    "detectable_format:json_format": ("differs", lambda r: if_linear.json_format(r)),
}


def _override_check(constraint_id: str, response: str, **kwargs: Any) -> bool:
    full = {"postscript_marker": "P.S."} if constraint_id == "detectable_content:postscript" else {}
    full.update(kwargs)
    return bool(response.strip()) and bool(_OVERRIDES[constraint_id][1](response, **full))


def _all_lowercase(r: str) -> bool:
    return r.islower()


def _start(r: str, start_phrase: str) -> bool:
    return r.strip().strip('"').lower().startswith(start_phrase.strip().lower())


def _words_list(ws: list[str]) -> str:
    return ", ".join(ws)


@dataclass(frozen=True)
class Constraint:
    """One atomic constraint: its id, checker, prompt phrasing, keyword-argument names and checker kind."""

    id: str
    check_fn: Callable[..., bool]
    phrase_fn: Callable[..., str]
    args: tuple[str, ...] = ()
    ifeval: bool = True
    checker: str = "reference"

    def validate(self, kwargs: dict[str, Any]) -> None:
        """Raise ValueError (or TypeError) when ``kwargs`` do not fit this constraint."""
        unknown = set(kwargs) - set(self.args)
        if unknown:
            raise ValueError(f"constraint {self.id}: unknown kwargs {sorted(unknown)}; expected {self.args}")
        if self.ifeval:
            reference_instruction(self.id, _literal(kwargs))
        elif missing := set(self.args) - set(kwargs):
            raise ValueError(f"constraint {self.id}: missing kwargs {sorted(missing)}")

    def check(self, response: str, **kwargs: Any) -> bool:
        """Return whether ``response`` satisfies the constraint; ValueError on kwargs that do not fit."""
        self.validate(kwargs)
        return bool(self.check_fn(response, **kwargs))

    def phrase(self, **kwargs: Any) -> str:
        """Return the instruction sentence a prompt carries for this constraint."""
        return self.phrase_fn(**kwargs)


def _own(id_: str, check: Callable[..., bool], phrase: Callable[..., str], *args: str) -> Constraint:
    return Constraint(id_, check, phrase, args, ifeval=False, checker="own")


def _c(id_: str, phrase: Callable[..., str], *args: str) -> Constraint:
    """Return an IFEval constraint judged by the reference (or its linear/deliberate override)."""
    if id_ in _OVERRIDES:
        return Constraint(id_, partial(_override_check, id_), phrase, args, checker=_OVERRIDES[id_][0])
    return Constraint(id_, partial(_reference_check, id_), phrase, args)


_POOL = (
    _c(
        "keywords:existence",
        lambda keywords: f"Use the words {_words_list(keywords)}.",
        "keywords",
    ),
    _c(
        "keywords:frequency",
        lambda keyword, frequency, relation: f"Use the word {keyword} {relation} {frequency} times.",
        "keyword",
        "frequency",
        "relation",
    ),
    _c(
        "keywords:forbidden_words",
        lambda forbidden_words: f"Do not use the words {_words_list(forbidden_words)}.",
        "forbidden_words",
    ),
    _c(
        "keywords:letter_frequency",
        lambda letter, let_frequency, let_relation: (
            f"Use the letter {letter} {let_relation} {let_frequency} times."
        ),
        "letter",
        "let_frequency",
        "let_relation",
    ),
    _c(
        "language:response_language",
        lambda language: f"Answer only in the language with ISO code {language}.",
        "language",
    ),
    _c(
        "length_constraints:number_sentences",
        lambda num_sentences, relation: f"Write {relation} {num_sentences} sentences.",
        "num_sentences",
        "relation",
    ),
    _c(
        "length_constraints:number_paragraphs",
        lambda num_paragraphs: f"Write {num_paragraphs} paragraphs separated by ***.",
        "num_paragraphs",
    ),
    _c(
        "length_constraints:number_words",
        lambda num_words, relation: f"Use {relation} {num_words} words.",
        "num_words",
        "relation",
    ),
    _c(
        "length_constraints:nth_paragraph_first_word",
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
        lambda num_placeholders: f"Add at least {num_placeholders} placeholder like [name].",
        "num_placeholders",
    ),
    _c(
        "detectable_content:postscript",
        lambda postscript_marker="P.S.": f"Add a postscript starting {postscript_marker}",
        "postscript_marker",
    ),
    _c(
        "detectable_format:number_bullet_lists",
        lambda num_bullets: f"Use exactly {num_bullets} bullet points like * item.",
        "num_bullets",
    ),
    _c(
        "detectable_format:constrained_response",
        lambda: "Answer with one of: My answer is yes. / My answer is no. / My answer is maybe.",
    ),
    _c(
        "detectable_format:number_highlighted_sections",
        lambda num_highlights: f"Highlight at least {num_highlights} part with *stars*.",
        "num_highlights",
    ),
    _c(
        "detectable_format:multiple_sections",
        lambda section_spliter, num_sections: (
            f"Write {num_sections} sections, each starting {section_spliter} X."
        ),
        "section_spliter",
        "num_sections",
    ),
    _c("detectable_format:json_format", lambda: "Wrap the whole answer in JSON."),
    _c("detectable_format:title", lambda: "Add a title like <<title>>."),
    _c(
        "combination:two_responses",
        lambda: "Give two different answers separated by six asterisks ******.",
    ),
    _c(
        "combination:repeat_prompt",
        lambda prompt_to_repeat: f"First repeat the request word for word: {prompt_to_repeat}",
        "prompt_to_repeat",
    ),
    _c("startend:end_checker", lambda end_phrase: f"End with: {end_phrase}", "end_phrase"),
    _c("startend:quotation", lambda: "Wrap the answer in double quotes."),
    _c(
        "change_case:capital_word_frequency",
        lambda capital_frequency, capital_relation: (
            f"Use {capital_relation} {capital_frequency} ALL-CAPS words."
        ),
        "capital_frequency",
        "capital_relation",
    ),
    _c("change_case:english_capital", lambda: "Answer in English, all in capital letters."),
    _c("change_case:english_lowercase", lambda: "Answer in English, all in lowercase."),
    _c("punctuation:no_comma", lambda: "No commas."),
    _own("change_case:all_lowercase", _all_lowercase, lambda: "Use lowercase only."),
    _own(
        "startend:start_checker",
        _start,
        lambda start_phrase: f"Start with: {start_phrase}",
        "start_phrase",
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
