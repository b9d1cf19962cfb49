"""Thinking-tag stripping, avg@k and the unbiased pass@k estimator."""

from __future__ import annotations

from math import comb

import pytest

from eval.scoring import avg_at_k, mean_pass_at_k, pass_at_k, strip_thinking


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<think>reason</think>\n\nFinal: 42", "Final: 42"),
        ("reasoning opened by the template</think>answer", "answer"),
        ("<think>a</think>x<think>b</think>y", "xy"),
        ("<think>cut off mid-thought", ""),
        ("plain answer", "plain answer"),
    ],
)
def test_strip_thinking(text, answer):
    assert strip_thinking(text) == answer


def test_pass_at_k_matches_the_binomial_formula():
    for n, c, k in [(8, 3, 1), (8, 3, 8), (16, 1, 4), (8, 0, 2), (5, 5, 3)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_avg_and_mean_pass_at_k():
    scores = {"a": [1, 0, 1, 1], "b": [0, 0, 0, 0]}
    assert avg_at_k(scores, 4) == pytest.approx(0.375)
    assert mean_pass_at_k({"a": [True, False], "b": [False, False]}, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="avg@8"):
        avg_at_k(scores, 8)
