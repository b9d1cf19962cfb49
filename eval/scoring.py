"""Scoring helpers shared by every benchmark: thinking-tag stripping, avg@k and the unbiased pass@k.

These few lines are written here rather than imported because the only libraries that carry them
(``evaluate``'s code_eval, LiveCodeBench) pull in heavy dependencies or a whole benchmark runner.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Return the final answer of a response, with its reasoning removed.

    Closed ``<think>…</think>`` blocks are removed; text before a lone ``</think>`` is dropped (the chat
    template opened the block in the prompt). A ``<think>`` that never closes means the response was cut
    inside its reasoning: there is no answer, so the result is empty (fail closed, never the rationale).
    """
    if not isinstance(text, str):
        return ""
    out = _THINK_BLOCK.sub("", text)
    if THINK_CLOSE in out:
        out = out.rsplit(THINK_CLOSE, 1)[1]
    if THINK_OPEN in out:
        return ""
    return out.strip()


def pass_at_k(n: int, c: int, k: int) -> float:
    """Return the unbiased pass@k estimate 1 - C(n-c, k) / C(n, k) for c correct out of n samples."""
    if n < 1 or k < 1 or k > n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # Product form of the binomial ratio: stable for large n (Chen et al., 2021).
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def avg_at_k(scores: Mapping[str, Sequence[float]], k: int) -> float:
    """Return avg@k: the mean over items of the mean score of each item's first k samples."""
    if not scores:
        raise ValueError("avg@k of an empty item set")
    total = 0.0
    for item, samples in scores.items():
        if len(samples) < k:
            raise ValueError(f"item {item!r} has {len(samples)} samples, avg@{k} needs {k}")
        total += sum(float(s) for s in samples[:k]) / k
    return total / len(scores)


def mean_pass_at_k(correct: Mapping[str, Sequence[bool]], k: int) -> float:
    """Return the mean over items of the unbiased pass@k of each item's samples."""
    if not correct:
        raise ValueError("pass@k of an empty item set")
    return sum(pass_at_k(len(s), sum(bool(x) for x in s), k) for s in correct.values()) / len(correct)
