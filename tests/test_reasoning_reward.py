"""Reasoning rewards: math-verify (pooled, with enforced timeouts), reasoning-gym puzzles, fuzzy science."""

from __future__ import annotations

import time

import pytest

from rewards import RewardRequest, get_reward
from rewards.answer_extract import final_answer, last_boxed, split_thinking
from rewards.reasoning import assign_family, science_match
from rewards.timeout_pool import CallTimeout, TimeoutPool


def _score(response: str, label, family: str, **meta):
    req = RewardRequest(response=response, label=label, metadata={"family": family, **meta})
    return get_reward("reasoning")(req)


def test_extraction_uses_final_part_only():
    assert last_boxed(r"x \boxed{\frac{1}{2}} y") == r"\frac{1}{2}"
    assert final_answer("<think>maybe \\boxed{3}</think>\nAnswer: 4") == ("4", None)
    assert final_answer("<think>\\boxed{3}") == (None, "unterminated_think")
    assert final_answer("<think>x</think>\nno answer here") == (None, "no_answer")
    assert split_thinking("<think>a</think><think>b</think>c")[2] == "unbalanced_think"


def test_math_equivalence_and_wrong():
    assert _score("<think>half</think>\n\\boxed{\\frac{1}{2}}", "0.5", "math").score == 1.0
    assert _score("<think>s</think>\n\\boxed{12}", "12", "math").components == {"exact": 1.0}
    wrong = _score("<think>s</think>\n\\boxed{13}", "12", "math")
    assert wrong.score == 0.0 and wrong.failure == "wrong"
    assert _score("<think>s</think>\nno box", "12", "math").failure == "no_answer"


def test_math_verify_gold_is_parsed_once_per_worker():
    pool = TimeoutPool(workers=1, preload=("rewards.math_answers",))
    try:
        for answer in ("0.5", "1/2", "0.50"):
            assert pool.call("rewards.math_answers:verify_answer", (r"\frac{1}{2}", answer), timeout=20)[0]
        hits, misses = pool.call("rewards.math_answers:gold_cache_info", (), timeout=5)
        assert (hits, misses) == (2, 1)
    finally:
        pool.close()


def test_timeout_is_enforced_and_pool_recovers():
    pool = TimeoutPool(workers=1)
    try:
        start = time.monotonic()
        with pytest.raises(CallTimeout):
            pool.call("time:sleep", (30,), timeout=0.5)
        assert time.monotonic() - start < 10
        assert pool.call("math:sqrt", (16.0,), timeout=20) == 4.0
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            pool.call("operator:truediv", (1, 0), timeout=20)
    finally:
        pool.close()


def test_math_timeout_scores_zero_not_pass(monkeypatch):
    import rewards.reasoning as rr

    class SlowPool:
        def call(self, *_a, **_k):
            raise CallTimeout("slow")

    monkeypatch.setattr(rr, "math_pool", lambda: SlowPool())
    res = _score("<think>x</think>\n\\boxed{2^{2^{2^{100}}}}", "7", "math")
    assert res.score == 0.0 and res.failure == "timeout" and not res.aborted


def test_puzzle_uses_reasoning_gym_checker():
    import json

    import reasoning_gym

    entry = json.loads(json.dumps(reasoning_gym.create_dataset("spell_backward", size=1, seed=3)[0]))
    good = _score(
        f"<think>r</think>\n\\boxed{{{entry['answer']}}}",
        entry["answer"],
        "puzzle",
        dataset="spell_backward",
        entry=entry,
    )
    assert good.score == 1.0
    bad = _score(
        "<think>r</think>\n\\boxed{zzzz}", entry["answer"], "puzzle", dataset="spell_backward", entry=entry
    )
    assert bad.score == 0.0 and bad.failure == "wrong"
    assert _score("<think>r</think>\n\\boxed{x}", "x", "puzzle").failure == "bad_label"


def test_science_fuzzy_rule():
    assert science_match("Carbon dioxide", "carbon dioxide")[0]
    assert science_match("the oxygens", "oxygen")[0]
    assert not science_match("mitosis", "meiosis")[0]
    assert not science_match("120", "1200")[0]
    assert _score("<think>t</think>\n\\boxed{Mars}", ["Mars"], "science").score == 1.0
    assert _score("<think>t</think>\n\\boxed{Venus}", ["Mars"], "science").score == 0.0


def test_unknown_family_fails_closed():
    res = _score("<think>t</think>\n\\boxed{1}", "1", "poetry")
    assert res.score == 0.0 and res.failure == "unknown_family"


def test_assign_family_keywords():
    assert assign_family("Find the remainder when 2^10 is divided by 7.") == "math"
    assert assign_family("Which electron shell of the atom holds the valence electrons?") == "science"
    assert assign_family("Solve this sudoku grid following the rules of the puzzle.") == "puzzle"
    assert assign_family("hello") == "math"


def test_sft_format_reward():
    fmt = get_reward("sft_format")
    ok = fmt(RewardRequest(response="<think>a</think>\n\\boxed{1}", metadata={"family": "math"}))
    assert ok.score == 1.0
    for response, family, failure in [
        ("\\boxed{1}", "math", "no_think"),
        ("<think>a</think>\n", "math", "empty_answer"),
        ("<think>a</think>\n1", "math", "no_boxed_answer"),
        ("<think>a</think>\nprint(1)", "code", "no_python_block"),
        ("<think>a</think><think>b</think>\nx", "if_multiturn", "unbalanced_think"),
    ]:
        res = fmt(RewardRequest(response=response, metadata={"family": family}))
        assert (res.score, res.failure) == (0.0, failure), response
    code = fmt(
        RewardRequest(response="<think>a</think>\n```python\nprint(1)\n```", metadata={"family": "code"})
    )
    assert code.score == 1.0
