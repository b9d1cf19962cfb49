"""Dedup, LiveCodeBench leak checks and the offline pass-rate filters."""

from __future__ import annotations

import pytest

from data_prep.dedup import LeakIndex, dedup_exact, near_duplicates, statement_key
from data_prep.filters import (
    coding_drop_all_pass,
    filter_prompts,
    fireflash_band,
    reasoning_learnability,
    search_agent_filter,
    teacher_solvability,
)
from data_prep.schema import PromptRow
from rewards.contract import RewardRequest, RewardResult

LCB = (
    "Given an array of integers nums and an integer k, return the number of contiguous subarrays "
    "whose sum is "
    "divisible by k. Constraints: 1 <= nums.length <= 3 * 10^4 and -10^4 <= nums[i] <= 10^4. "
) * 3


def test_statement_key_normalises_whitespace_and_case():
    assert statement_key("Sum  two\nNumbers ") == statement_key("sum two numbers")
    rows = [{"q": "A b"}, {"q": "a  B"}, {"q": "c"}]
    assert [dup for _, dup in dedup_exact(rows, lambda r: r["q"])] == [False, True, False]


def test_lcb_leak_prefix_hash_and_char_ngrams():
    index = LeakIndex([("lcb-1", LCB)])
    assert index.check(LCB + " extra tail").reason == "prefix_hash"
    middle = "A new story. " + LCB[150:330] + " and more words here."
    leak = index.check(middle)
    assert leak is not None and leak.reason == "char_ngrams" and leak.shared_ngrams >= 5
    assert index.check("A new story. " + LCB[150:213]) is None  # only 4 shared 60-grams
    assert index.check("Completely unrelated problem about graphs and trees.") is None


def test_near_duplicates_minhash():
    base = " ".join(f"w{i}" for i in range(200))
    pairs = near_duplicates([("a", base), ("b", base.replace("w100", "x")), ("c", "totally different " * 30)])
    assert pairs == [("a", "b")]


def _rows(n: int) -> list[PromptRow]:
    return [
        PromptRow(id=f"p{i}", prompt=[{"role": "user", "content": f"p{i}"}], label="yes") for i in range(n)
    ]


def _exact(req: RewardRequest) -> RewardResult:
    if req.response == "abort":
        return RewardResult(score=0.0, failure="sandbox_down", aborted=True)
    ok = req.response == req.label
    return RewardResult(score=float(ok), failure=None if ok else "wrong")


def _scripted(passes_per_prompt: dict[str, int]):
    """Generation backend double (the real one is a GPU/remote model): prompt i passes k of n samples."""

    def generate(prompts: list[list[dict]], n: int) -> list[list[str]]:
        out = []
        for p in prompts:
            k = passes_per_prompt[p[0]["content"]]
            out.append((["abort"] * n) if k < 0 else ["yes"] * k + ["no"] * (n - k))
        return out

    return generate


def test_learnability_and_coding_rules():
    rows = _rows(4)
    gen = _scripted({"p0": 0, "p1": 3, "p2": 8, "p3": -1})
    rep = filter_prompts(rows, reasoning_learnability(8), gen, _exact)
    assert [r.id for r in rep.kept] == ["p1"]
    assert rep.dropped == {"zero_pass": ["p0"], "too_easy": ["p2"], "aborted": ["p3"]}
    coding = filter_prompts(
        rows, coding_drop_all_pass(4), _scripted({"p0": 0, "p1": 3, "p2": 4, "p3": 1}), _exact
    )
    assert [r.id for r in coding.kept] == ["p0", "p1", "p3"] and coding.counts()["dropped_too_easy"] == 1
    teacher = filter_prompts(
        rows, teacher_solvability(4), _scripted({"p0": 0, "p1": 1, "p2": 4, "p3": 0}), _exact
    )
    assert [r.id for r in teacher.kept] == ["p1", "p2"]


def test_fireflash_band_and_search_agent_two_passes():
    rows = _rows(4)
    ff = filter_prompts(rows, fireflash_band(20), _scripted({"p0": 2, "p1": 3, "p2": 17, "p3": 18}), _exact)
    assert [r.id for r in ff.kept] == ["p1", "p2"]  # 15% and 85% inclusive
    with pytest.raises(ValueError):
        filter_prompts(rows, fireflash_band(), lambda p, n: [], _exact)
    tool_free = _scripted({"p0": 1, "p1": 0, "p2": 0, "p3": 0})
    with_tools = _scripted({"p1": 2, "p2": 4, "p3": 0})
    first, second = search_agent_filter(rows, tool_free, with_tools, _exact)
    assert first.dropped == {"solved_without_tools": ["p0"]}
    assert [r.id for r in second.kept] == ["p1"] and second.dropped == {"outside_band": ["p2", "p3"]}
