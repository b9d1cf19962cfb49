"""Every registered reward survives arbitrary model output: in range, never raising, bounded, deterministic.

Property-based (hypothesis) at CI size; ``benchmarks/bench_reward_fuzz.py`` runs 10^5 responses per reward.
The answer extraction was rewritten to be linear-time; its old regex/rescanning definitions are kept here
as references and must give the same answers on every generated text.
"""

from __future__ import annotations

import functools
import re
import time
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_fuzz_inputs import (
    FRAGMENTS,
    FUZZED_REWARDS,
    MAX_CHARS,
    RUNS,
    build_response,
    check_result,
    fuzz_request,
    verdict,
)

import infra.agents.envs.calculator  # noqa: F401 - registers agent_calculator
from infra.sandbox import Limits
from rewards import code_reward, get_reward, reasoning
from rewards.answer_extract import answer_line, last_boxed, split_thinking

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
raw = st.builds(
    build_response,
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=24),
    st.sampled_from(("", *RUNS)),
    st.sampled_from((0, 10, 1000, 20_000, MAX_CHARS)),
    st.text(max_size=12),
)
# Well-formed frames around arbitrary content, so answers reach math-verify, the checkers and the sandbox.
FRAMES = ("\\boxed{%s}", "Answer: %s", "```python\n%s\n```", "\\boxed{%s", "%s")
framed = st.builds(
    lambda think, frame, body: f"<think>{think}</think>" + frame.replace("%s", body),
    st.text(max_size=20),
    st.sampled_from(FRAMES),
    st.one_of(
        st.sampled_from(
            ("28", "\\frac{56}{2}", "206", "uvik", "x^{9}", "def value(x):\n    return x * x + 14")
        ),
        raw,
    ),
)
responses = st.one_of(framed, raw)
# Seconds one call may take: linear-time rewards are far below it; math-verify calls are bounded by their
# timeout (plus a replacement worker's start); code by the sandbox's wall limit.
# Per-call bounds, far above a linear-time call (well under 0.5 s) and far below the super-linear ones this
# guards against (> 30 s); generous because a loaded CI machine slows every call. Each reward is warmed up
# once first, so lazy imports (reasoning-gym, math-verify: seconds) are not counted.
DEFAULT_BOUND_S = 10.0
BOUND_S = {"math": reasoning.MATH_TIMEOUT_S + 20.0, "code": 12.0}
EXAMPLES = {"math": 40, "code": 40}
IF_XFAIL = pytest.mark.xfail(strict=False, reason="IF checkers: issue 25 rewrite")
XFAIL: set[str] = set()  # "if_rubrics" while its checkers are being rewritten, should they fail here


@pytest.fixture(scope="module", autouse=True)
def small_code_scorer():
    """The registered code reward on one sandbox worker with tight limits (aborted, not raised, if none)."""
    saved = code_reward._DEFAULT
    code_reward._DEFAULT = code_reward.CodeScorer(workers=1, limits=Limits(wall_s=3, test_timeout_s=1))
    yield
    if code_reward._DEFAULT._pool is not None:
        code_reward._DEFAULT._pool.close()
    code_reward._DEFAULT = saved


@functools.cache
def _warm(name: str) -> None:
    """Score one ordinary response so the reward's lazy imports are paid before anything is timed."""
    check_result(get_reward(name)(fuzz_request(name, "<think>a</think>\\boxed{1}")))


def _score_twice(name: str, response: str) -> None:
    _warm(name)
    fn, request = get_reward(name), fuzz_request(name, response)
    start = time.monotonic()
    first = check_result(fn(request))
    took = time.monotonic() - start
    assert took < BOUND_S.get(name, DEFAULT_BOUND_S), (name, len(response), took)
    second = check_result(fn(request))
    if "timeout" not in (first.failure, second.failure):  # a deadline under load is the one exception
        assert verdict(first) == verdict(second), (name, response[:200])


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=IF_XFAIL) if n in XFAIL else n for n in FUZZED_REWARDS]
)
def test_reward_survives_arbitrary_output(name: str):
    @settings(SETTINGS, max_examples=EXAMPLES.get(name, 60))
    @given(response=responses)
    def run(response: str) -> None:
        _score_twice(name, response)

    run()


KNOWN_SLOW = {
    "newline_run": "x" + "\n" * 2000 + "x",
    "blank_run": "x\n" + " " * 60000 + "x",
    "unclosed_boxes": "\\boxed{" * 12000,
    "brackets": "[" * 60000,
    "answer_markers": "<think>a</think>" + "answer:\n" * 10000,
    "text_macros": "<think>a</think>\\boxed{" + "\\text{" * 15000,
    "huge_box": "<think>a</think>\\boxed{" + "x+" * 40000 + "1}",
}


@pytest.mark.parametrize("case", sorted(KNOWN_SLOW))
def test_inputs_that_used_to_hang_are_fast(case: str):
    for name in ("sft_format", "math", "science", "puzzle", "agent_calculator"):
        _warm(name)
        start = time.monotonic()
        check_result(get_reward(name)(fuzz_request(name, KNOWN_SLOW[case])))
        assert time.monotonic() - start < DEFAULT_BOUND_S, (case, name)


# ---- the answer extraction is unchanged on every text -----------------------------------------------------
_OLD_ANSWER_LINE = re.compile(r"(?im)^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]\s*(.+?)\s*$")
_OLD_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _old_answer_line(text: str) -> str | None:
    found = _OLD_ANSWER_LINE.findall(text)
    return found[-1].strip() if found else None


def _old_last_boxed(text: str) -> str | None:
    for m in reversed(list(_OLD_BOXED.finditer(text))):
        depth, i = 1, m.end()
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[m.end() : i].strip()
            i += 1
    return None


def _old_normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)|[^\w.]", " ", text)
    return " ".join(w for w in text.split() if w not in {"a", "an", "the"})


TOKENS = (
    *("\n", " ", "\t", "\r", "\u00a0", "*", "**", ":", "：", "x", "42", "{", "}", "\\boxed{", "\\fbox {"),
    *("answer", "Answer", "ANSWER:", "final", "FINAL ", "**Answer:**", "\\text{", "a}", "\n\n", ". ", "1.5"),
)
small_texts = st.lists(st.sampled_from(TOKENS), max_size=30).map("".join)


@settings(SETTINGS, max_examples=3000)
@given(text=small_texts)
def test_linear_extraction_matches_the_old_definitions(text: str):
    assert answer_line(text) == _old_answer_line(text)
    assert last_boxed(text) == _old_last_boxed(text)
    assert reasoning._normalise(text) == _old_normalise(text)


ORDINARY = [
    "<think>4 * 7 = 28.</think>\\boxed{28}",
    "<think>half</think>The answer is \\boxed{\\frac{1}{2}}.",
    "<think>x</think>\\boxed{1} then \\boxed{\\text{2}}",
    "<think>x</think>\\boxed{a{b}c} and \\fbox {d}",
    "<think>r</think>Final answer: 206 bones\n",
    "<think>r</think>**Answer:** uvik",
    "<think>r</think>Answer:\n\n  mitosis  \nthanks",
    "<think>r</think>answer: 1\nAnswer: 2\n\n",
    "<think>r</think>Answer: \\boxed{3",
    "<think>r</think>  * Final Answer ** : 12\r\n",
    "no think, Answer: 7",
]


@pytest.mark.parametrize("response", ORDINARY)
def test_ordinary_responses_keep_their_answers(response: str):
    _, final, _ = split_thinking(response)
    assert last_boxed(final) == _old_last_boxed(final)
    assert answer_line(final) == _old_answer_line(final)


def test_math_verify_raising_in_its_worker_fails_closed(monkeypatch: pytest.MonkeyPatch):
    class Raising:
        def call(self, *_args, **_kwargs):
            raise RuntimeError("rewards.math_answers:verify_answer failed in worker: RecursionError")

    monkeypatch.setattr(reasoning, "math_pool", Raising)
    result = get_reward("math")(fuzz_request("math", "<think>r</think>\\boxed{29}"))
    assert (result.score, result.failure) == (0.0, "verifier_error") and "RecursionError" in result.details[
        "error"
    ]
    long = "<think>r</think>\\boxed{" + "1+" * reasoning.MAX_MATH_ANSWER_CHARS + "1}"
    assert get_reward("math")(fuzz_request("math", long)).failure == "answer_too_long"
