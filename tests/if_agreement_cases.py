"""Compliant, violating and borderline responses for every IFEval instruction id, and the agreement check.

Used by ``tests/test_if_agreement.py`` (CI) and ``benchmarks/bench_if_agreement.py`` (the per-id report).
Count thresholds are set at the reference's own count and one either side, so every count-based id gets
cases on both sides of its boundary; the texts carry what drifted before (abbreviations, initials,
ellipses, quoted sentence ends, hyphenated and dotted capitals, spaced postscript markers, odd fences).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from rewards.if_constraints import IFEVAL_IDS, check_constraint
from rewards.if_linear import detect_language
from rewards.if_reference import reference_strict

SENTENCES = (
    "Mr. Smith met Dr. Jones at 5 p.m. yesterday.",
    "The U.S. economy grew by 2.5 percent.",
    'She said "stop." Then she left.',
    "Wait... is that right?",
    "J. R. R. Tolkien wrote books (many of them.) People read them!",
    "This is STATE-OF-THE-ART work from the U.S.A. and AI/ML labs.",
    "The river runs fast, and the cat sleeps.",
    "We saw a cat, a dog and a bird.",
    "Prices rose (again). Nobody knew why.",
    "It costs $3.50 at St. Mary's shop.",
    "OK. FINE. GOOD!",
    "e.g. this one, i.e. that one.",
)
WORDS = ("cat", "river", "sun", "AI", "U.S.", "state-of-the-art", "p.m.", "happy", "the")
LANGUAGE_TEXTS = (
    ("en", "The weather is nice today and we will walk to the park."),
    ("fr", "Le chat est sur la table et il dort bien toute la journée."),
    ("de", "Der Hund spielt im Garten und die Kinder lachen laut."),
    ("es", "El perro corre por el parque y los niños juegan juntos."),
    ("en", "12345 67890"),
    ("en", "!!! ??? ..."),
)


def _text(rng: random.Random, k: int | None = None) -> str:
    return " ".join(rng.choice(SENTENCES) for _ in range(k or rng.randint(1, 4)))


def _around(n: int) -> list[int]:
    return sorted({max(1, n - 1), max(1, n), n + 1})


def _cases_for(cid: str, rng: random.Random) -> Iterator[tuple[dict[str, Any], str]]:
    from rewards.if_reference import reference_util

    util = reference_util()
    texts = [_text(rng) for _ in range(12)] + ["", "   ", "x"]
    if cid == "length_constraints:number_sentences":
        for t in texts:
            for n in _around(util.count_sentences(t) if t.strip() else 1):
                for rel in ("less than", "at least"):
                    yield {"num_sentences": n, "relation": rel}, t
    elif cid == "length_constraints:number_words":
        for t in texts:
            for n in _around(util.count_words(t)):
                for rel in ("less than", "at least"):
                    yield {"num_words": n, "relation": rel}, t
    elif cid == "change_case:capital_word_frequency":
        for t in texts + ["STATE-OF-THE-ART U.S.A. AI/ML", "NASA and the EU. OK?"]:
            for n in (1, 2, 3, 5):
                for rel in ("less than", "at least"):
                    yield {"capital_frequency": n, "capital_relation": rel}, t
    elif cid == "keywords:existence":
        for t in texts:
            yield {"keywords": rng.sample(WORDS, 2)}, t
    elif cid == "keywords:frequency":
        for t in texts:
            for n in (1, 2, 3):
                for rel in ("less than", "at least"):
                    yield {"keyword": rng.choice(WORDS), "frequency": n, "relation": rel}, t
    elif cid == "keywords:forbidden_words":
        for t in texts + ["a doghouse", "the dog.", "Catalogue"]:
            yield {"forbidden_words": ["dog", rng.choice(WORDS)]}, t
    elif cid == "keywords:letter_frequency":
        for t in texts:
            for n in (1, 3, 6):
                yield (
                    {
                        "letter": rng.choice("aeSt"),
                        "let_frequency": n,
                        "let_relation": rng.choice(("less than", "at least")),
                    },
                    t,
                )
    elif cid == "language:response_language":
        for lang in ("en", "fr", "de", "es"):
            for _, t in LANGUAGE_TEXTS:
                yield {"language": lang}, t
    elif cid == "length_constraints:number_paragraphs":
        for parts in (["a"], ["a", "b"], ["a", "b", "c"], ["", "a", "b"], ["a", "", "b"], ["a", "b", ""]):
            for sep in ("\n***\n", " *** ", "***", "\n* * *\n"):
                for n in (1, 2, 3):
                    yield {"num_paragraphs": n}, sep.join(parts)
    elif cid == "length_constraints:nth_paragraph_first_word":
        for body in ("Then more", '"Then," he said', "'then' again", "Thenceforth it", "then. More"):
            for layout in ("first\n\n{b}", "first\n\n{b}\n\nlast", "\n\nfirst\n\n{b}", "first\n\n\n\n{b}"):
                for n, nth in ((2, 2), (3, 2), (2, 1)):
                    yield (
                        {"num_paragraphs": n, "nth_paragraph": nth, "first_word": "then"},
                        layout.format(b=body),
                    )
    elif cid == "detectable_content:number_placeholders":
        for t in ("[a] and [b]", "[a]", "[[a]]", "[a\n] [b]", "[] [x]", "no brackets", "[a] [b] [c]"):
            for n in (1, 2, 3):
                yield {"num_placeholders": n}, t
    elif cid == "detectable_content:postscript":
        for t in (
            "hi\nP.S. bye",
            "hi\nP. S. bye",
            "hi\np.s bye",
            "hi\nP.P.S more",
            "hi\nP. P. S. more",
            "hi\nPPS more",
            "hi",
            "ps: no",
        ):
            for marker in ("P.S.", "P.P.S"):
                yield {"postscript_marker": marker}, t
    elif cid == "detectable_format:number_bullet_lists":
        for t in (
            "* a\n* b",
            "* a",
            "- a\n- b\n* c",
            "** bold\n* a",
            "*\n* b",
            "  * a\n\n\n- b",
            "a - b",
            "-",
        ):
            for n in (1, 2, 3):
                yield {"num_bullets": n}, t
    elif cid == "detectable_format:constrained_response":
        for t in (
            "My answer is yes.",
            "My answer is no. Because.",
            "my answer is yes.",
            "Yes.",
            "My answer is maybe",
        ):
            yield {}, t
    elif cid == "detectable_format:number_highlighted_sections":
        for t in ("a *b* c", "*a* **b**", "* a *", "**", "a b", "*a\nb*", "*x* *y* *z*"):
            for n in (1, 2, 3):
                yield {"num_highlights": n}, t
    elif cid == "detectable_format:multiple_sections":
        for t in (
            "Section 1 a Section 2 b",
            "Section 1 a",
            "SECTION 1 a SECTION 2 b",
            "Section one",
            "Section 12",
        ):
            for spl in ("Section", "SECTION"):
                for n in (1, 2):
                    yield {"section_spliter": spl, "num_sections": n}, t
    elif cid == "detectable_format:json_format":
        for t in (
            '{"a": 1}',
            '```json\n{"a": 1}\n```',
            "```JSON\n[1, 2]\n```",
            "```python\n{}\n```",
            "{a: 1}",
            '``` json\n{"a": 1}\n```',
            "[" * 50 + "]" * 50,
            "[" * 5000,
            "null",
        ):
            yield {}, t
    elif cid == "detectable_format:title":
        for t in ("<<Sun>>\ntext", "<< >>", "<<a\nb>>", "<<<x>>>", "no title", "<<>>x>>", "t <<Sun>> t"):
            yield {}, t
    elif cid == "combination:two_responses":
        for t in (
            "a\n******\nb",
            "a\n******\na",
            "******a******b",
            "a******",
            "a****** ******b",
            "a*******b",
        ):
            yield {}, t
    elif cid == "combination:repeat_prompt":
        for t in ("say hi. hi", "Say Hi! then", " hi", "Say"):
            yield {"prompt_to_repeat": "Say hi"}, t
    elif cid == "startend:end_checker":
        for t in ('"story. The end"', "the end. story", "The End.", "the end \n", "x the end"):
            yield {"end_phrase": "the end"}, t
    elif cid == "startend:quotation":
        for t in ('"quoted"', "quoted", '"', ' "a" ', '"a'):
            yield {}, t
    elif cid in ("change_case:english_capital", "change_case:english_lowercase"):
        for _, t in LANGUAGE_TEXTS:
            for v in (t, t.upper(), t.lower()):
                yield {}, v
    elif cid == "punctuation:no_comma":
        for t in texts:
            yield {}, t
    else:
        raise KeyError(f"no agreement cases for {cid}")


def agreement_cases(seed: int = 0) -> list[tuple[str, dict[str, Any], str]]:
    """Return ``(id, kwargs, response)`` cases for every IFEval id in the pool."""
    rng = random.Random(seed)
    return [(cid, kw, text) for cid in IFEVAL_IDS for kw, text in _cases_for(cid, rng)]


def reference_verdict(cid: str, kwargs: dict[str, Any], response: str) -> bool | str:
    """Return the reference's strict verdict, or the name of the exception it raised."""
    try:
        return reference_strict(cid, response, kwargs)
    except Exception as exc:  # noqa: BLE001 - a raising reference is itself a recorded outcome
        return type(exc).__name__


def documented_difference(cid: str, kwargs: dict[str, Any], response: str, ref: bool | str) -> str | None:
    """Return which deliberate difference explains ours != reference on this case, or None."""
    if cid in ("language:response_language", "change_case:english_capital", "change_case:english_lowercase"):
        return "no detectable language" if detect_language(response) is None else None
    if cid == "length_constraints:nth_paragraph_first_word":
        raw = response.split("\n\n")[: kwargs["nth_paragraph"]]
        return "blank paragraph before nth" if any(not p.strip() for p in raw) else None
    if cid == "detectable_format:json_format":
        return "reference raised" if ref == "RecursionError" else None
    words = kwargs.get("keywords") or kwargs.get("forbidden_words") or [kwargs.get("keyword", "")]
    if any(re.escape(w) != w for w in words if isinstance(w, str)) and cid.startswith("keywords:"):
        return "keyword is not a regex"
    return None


def compare(cases: list[tuple[str, dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Return one record per case: ours, the reference's verdict and any documented difference."""
    out = []
    for cid, kwargs, response in cases:
        ours = check_constraint(cid, response, kwargs)
        ref = reference_verdict(cid, kwargs, response)
        note = None if ours == ref else documented_difference(cid, kwargs, response, ref)
        out.append(
            {"id": cid, "kwargs": kwargs, "response": response, "ours": ours, "ref": ref, "note": note}
        )
    return out
