"""Reward of Coding RL: the last ```python block run against the problem's tests in the sandbox.

Binary all-pass over at most 50 tests (a SHA-256-seeded subsample, identical for every rollout of a
problem), functional (assert) or stdin/stdout by the label's shape; no format penalty. A sandbox that
cannot start gives ``aborted=True``, never a 0. See :mod:`rewards.code_reward` and :mod:`infra.sandbox`.
"""

from __future__ import annotations

from rewards.code_reward import MAX_TESTS, extract_code, parse_problem, score_batch
from rewards.code_reward import code_reward as reward

__all__ = ["MAX_TESTS", "extract_code", "parse_problem", "reward", "score_batch"]
