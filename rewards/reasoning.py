"""Reasoning RL rewards (paper §3.2): math, puzzles and science QA, binary and fail-closed.

``reasoning`` dispatches on ``metadata.family``:

* ``math`` — Math-Verify equivalence of the canonical final answer (last ``\\boxed{}``, else ``Answer:``)
  and the gold label. Identical strings pass without parsing; everything else runs in a
  :class:`~rewards.timeout_pool.TimeoutPool` worker with a hard deadline (math-verify's ``signal.alarm``
  timeout needs the main thread), and the worker caches the parsed gold. A timeout scores 0
  (``timeout``); a crashed worker is an infrastructure failure (``aborted``). An answer longer than
  :data:`MAX_MATH_ANSWER_CHARS` is never parsed (``answer_too_long``, 0 unless it equals a gold
  exactly): math-verify's parse time grows faster than the answer, and no real final answer is that long.
* ``puzzle`` — reasoning-gym's own checker: ``metadata.dataset`` names the dataset and
  ``metadata.entry`` is the generated entry ``score_answer`` needs. Only a full score (1.0) passes;
  reasoning-gym's partial credit (e.g. 0.01 for a well-formed wrong answer) is reported in components;
  a checker that raises on the answer scores 0 as ``verifier_error``, naming the exception.
* ``science`` — fuzzy match against the reference answer(s), see :func:`science_match`.

:func:`assign_family` is the keyword heuristic data prep uses, since crawled problems carry no subject.
"""

from __future__ import annotations

import atexit
import difflib
import functools
import os
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

from rewards.answer_extract import final_answer
from rewards.contract import RewardRequest, RewardResult, register_reward
from rewards.timeout_pool import CallTimeout, TimeoutPool, WorkerCrashed

FAMILIES = ("math", "puzzle", "science")
MATH_TIMEOUT_S = float(os.environ.get("RUFUS_MATH_TIMEOUT", "5"))
MATH_WORKERS = int(os.environ.get("RUFUS_MATH_WORKERS", str(min(2, os.cpu_count() or 1))))
SCIENCE_RATIO = 0.9  # difflib ratio on normalised strings ("mitosis" vs "meiosis" is 0.857)
SCIENCE_F1 = 0.8  # token F1 on normalised strings
MAX_MATH_ANSWER_CHARS = 2000  # longer answers are not handed to math-verify (see the module docstring)

_pool: TimeoutPool | None = None
_pool_lock = threading.Lock()


def math_pool() -> TimeoutPool:
    """Return the process-wide math-verify worker pool, starting it on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = TimeoutPool(workers=MATH_WORKERS, preload=("rewards.math_answers",))
            atexit.register(_pool.close)
        return _pool


def _plain(text: str) -> str:
    return re.sub(r"\s+", "", text).strip("$.").replace("\\!", "").replace("\\,", "")


def _gold_list(label: Any) -> list[str]:
    if isinstance(label, (list, tuple)):
        return [str(x) for x in label if str(x).strip()]
    if label is None or not str(label).strip():
        return []
    return [str(label)]


def math_score(answer: str, golds: list[str], timeout: float = MATH_TIMEOUT_S) -> RewardResult:
    """Score a canonical answer against gold labels with Math-Verify (any gold may match)."""
    if any(_plain(answer) == _plain(g) for g in golds):
        return RewardResult(score=1.0, parsed=answer, components={"exact": 1.0})
    if len(answer) > MAX_MATH_ANSWER_CHARS:
        return RewardResult(
            score=0.0,
            parsed=answer,
            failure="answer_too_long",
            details={"chars": len(answer), "limit": MAX_MATH_ANSWER_CHARS},
        )
    notes = []
    for gold in golds:
        try:
            ok, note = math_pool().call("rewards.math_answers:verify_answer", (gold, answer), timeout=timeout)
        except CallTimeout:
            return RewardResult(score=0.0, parsed=answer, failure="timeout", details={"timeout_s": timeout})
        except WorkerCrashed as exc:
            return RewardResult(
                score=0.0, parsed=answer, aborted=True, failure="verifier_crash", details={"error": str(exc)}
            )
        except RuntimeError as exc:  # math-verify raised on this answer in the worker: fail closed, named
            return RewardResult(
                score=0.0, parsed=answer, failure="verifier_error", details={"error": str(exc)[:500]}
            )
        if ok:
            return RewardResult(score=1.0, parsed=answer, components={"math_verify": 1.0})
        notes.append(note)
    failure = "gold_unparsable" if notes and all(n == "gold_unparsable" for n in notes) else "wrong"
    if failure == "wrong" and "answer_unparsable" in notes:
        failure = "unparsable"
    return RewardResult(score=0.0, parsed=answer, failure=failure)


@functools.lru_cache(maxsize=64)
def _puzzle_checker(dataset: str) -> Callable[[str, dict], float]:
    """Return reasoning-gym's checker for ``dataset``, built once per process.

    ``get_score_answer_fn`` instantiates the dataset on every call (spell_backward re-reads its word list,
    ~0.25 s), which dominated RL step time; the checker itself only reads the entry it is given.
    """
    import reasoning_gym  # heavy import, only for puzzle rows

    return reasoning_gym.get_score_answer_fn(dataset)


def puzzle_score(answer: str, metadata: dict[str, Any]) -> RewardResult:
    """Score with reasoning-gym's checker for ``metadata.dataset`` on ``metadata.entry``."""
    dataset, entry = metadata.get("dataset"), metadata.get("entry")
    if not isinstance(dataset, str) or not isinstance(entry, dict):
        return RewardResult(
            score=0.0,
            parsed=answer,
            failure="bad_label",
            details={"error": "puzzle needs metadata.dataset (str) and metadata.entry (dict)"},
        )
    try:
        checker = _puzzle_checker(dataset)
    except Exception as exc:  # noqa: BLE001 - an unknown dataset is a label error, reported as such
        return RewardResult(score=0.0, parsed=answer, failure="bad_label", details={"error": repr(exc)})
    try:
        value = float(checker(answer, entry))
    except Exception as exc:  # noqa: BLE001 - a third-party checker choking on model output fails closed, named
        return RewardResult(
            score=0.0,
            parsed=answer,
            failure="verifier_error",
            details={"error": f"{type(exc).__name__}: {exc}"},
        )
    passed = value >= 1.0 - 1e-9
    return RewardResult(
        score=1.0 if passed else 0.0,
        parsed=answer,
        components={"checker_score": value},
        failure=None if passed else "wrong",
    )


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    # Every ``\text{`` before the last ``}`` matches; past it none can. Substituting only up to there gives
    # the same string and keeps thousands of unclosed ``\text{`` from each rescanning to the end.
    cut = text.rfind("}") + 1
    text = _TEXT_MACRO.sub(r"\1", text[:cut]) + text[cut:]
    text = re.sub(r"(?<!\d)\.|\.(?!\d)|[^\w.]", " ", text)
    return " ".join(w for w in text.split() if w not in {"a", "an", "the"})


_TEXT_MACRO = re.compile(r"\\text\{([^}]*)\}")


def _token_f1(a: list[str], b: list[str]) -> float:
    common = sum((Counter(a) & Counter(b)).values())
    if not common:
        return 0.0
    p, r = common / len(a), common / len(b)
    return 2 * p * r / (p + r)


def science_match(answer: str, reference: str) -> tuple[bool, float]:
    """Return ``(match, similarity)`` under the science rule.

    Both sides are normalised (NFKC, lowercase, punctuation and the articles a/an/the removed). They match
    when the normalised strings are equal, or when the numbers they contain are the same multiset *and*
    either the difflib ratio is at least 0.9 or the token F1 is at least 0.8. The number rule keeps
    "120" from matching "1200", which a pure string ratio would accept.
    """
    a, r = _normalise(answer), _normalise(reference)
    if not a or not r:
        return False, 0.0
    if a == r:
        return True, 1.0
    numbers = re.compile(r"\d+(?:\.\d+)?")
    if Counter(numbers.findall(a)) != Counter(numbers.findall(r)):
        return False, 0.0
    ratio = difflib.SequenceMatcher(None, a, r).ratio()
    f1 = _token_f1(a.split(), r.split())
    return ratio >= SCIENCE_RATIO or f1 >= SCIENCE_F1, max(ratio, f1)


def science_score(answer: str, references: list[str]) -> RewardResult:
    """Score a science answer against any of its reference answers."""
    best = 0.0
    for ref in references:
        ok, sim = science_match(answer, ref)
        best = max(best, sim)
        if ok:
            return RewardResult(score=1.0, parsed=answer, components={"similarity": sim})
    return RewardResult(score=0.0, parsed=answer, failure="wrong", components={"similarity": best})


def score_family(family: str, request: RewardRequest) -> RewardResult:
    """Score ``request`` as a ``family`` problem (math, puzzle or science)."""
    if family not in FAMILIES:
        return RewardResult(
            score=0.0,
            failure="unknown_family",
            details={"error": f"metadata.family {family!r} is not one of {FAMILIES}"},
        )
    answer, failure = final_answer(request.response)
    if answer is None:
        return RewardResult(score=0.0, failure=failure)
    if family == "puzzle":
        result = puzzle_score(answer, request.metadata)
    else:
        golds = _gold_list(request.label)
        if not golds:
            return RewardResult(
                score=0.0, parsed=answer, failure="bad_label", details={"error": "empty label"}
            )
        result = math_score(answer, golds) if family == "math" else science_score(answer, golds)
    result.details.setdefault("family", family)
    return result


@register_reward("reasoning")
def reasoning_reward(request: RewardRequest) -> RewardResult:
    """Binary reasoning reward, dispatched on ``metadata.family``."""
    return score_family(str(request.metadata.get("family", "")), request)


@register_reward("math")
def math_reward(request: RewardRequest) -> RewardResult:
    """Binary Math-Verify reward."""
    return score_family("math", request)


@register_reward("puzzle")
def puzzle_reward(request: RewardRequest) -> RewardResult:
    """Binary reasoning-gym checker reward."""
    return score_family("puzzle", request)


@register_reward("science")
def science_reward(request: RewardRequest) -> RewardResult:
    """Binary fuzzy-match science reward."""
    return score_family("science", request)


_KEYWORDS: dict[str, tuple[str, ...]] = {
    "puzzle": (
        "puzzle",
        "sudoku",
        "grid",
        "maze",
        "cipher",
        "riddle",
        "crossword",
        "board",
        "knights",
        "knaves",
        "arrange",
        "rearrange",
        "sort these",
        "spell",
        "backward",
        "letters",
        "word ladder",
        "cryptarithm",
        "nonogram",
        "kakuro",
        "minesweeper",
        "tower of hanoi",
        "rubik",
        "rules",
        "pattern",
    ),
    "science": (
        "atom",
        "molecule",
        "electron",
        "proton",
        "neutron",
        "chemical",
        "chemistry",
        "reaction",
        "acid",
        "cell",
        "protein",
        "dna",
        "rna",
        "gene",
        "enzyme",
        "organism",
        "species",
        "biology",
        "physics",
        "force",
        "velocity",
        "acceleration",
        "energy",
        "momentum",
        "magnetic",
        "electric",
        "quantum",
        "photon",
        "planet",
        "gas",
        "temperature",
        "wavelength",
        "mass of",
        "element",
        "bond",
        "oxygen",
    ),
    "math": (
        "integer",
        "equation",
        "solve for",
        "prime",
        "triangle",
        "circle",
        "polynomial",
        "probability",
        "\\frac",
        "sum of",
        "product of",
        "remainder",
        "divisible",
        "digits",
        "real number",
        "function f",
        "sequence",
        "how many",
        "compute",
        "evaluate",
        "find the value",
        "log",
        "sqrt",
        "matrix",
    ),
}


def assign_family(text: str) -> str:
    """Return the family ('math', 'science' or 'puzzle') whose keywords occur most often in ``text``.

    Ties and keyword-free text go to math, the largest family of Table 5. Keywords match on word
    starts, case-insensitively.
    """
    lowered = text.lower()
    counts = {
        fam: sum(len(re.findall(r"(?<![a-z])" + re.escape(k), lowered)) for k in kws)
        for fam, kws in _KEYWORDS.items()
    }
    best = max(counts.values())
    if best == 0 or counts["math"] == best:
        return "math"
    return "science" if counts["science"] == best else "puzzle"
