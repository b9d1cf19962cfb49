"""Reward of the FireFlash variant of Coding Agent RL: the task's tests with partial credit, in [0, 1].

``harbor_tests`` (``infra.agents.harbor.reward``) with the environment's ``partial_credit=1`` option: after
the episode the task's ``tests/`` run against the final state; a solved task scores 1.0, an unsolved one the
fraction of its checks that pass (the verifier's ``reward.txt``/``reward.json`` value, clamped to [0, 1]),
and ``components["tests_passed"]`` says whether it was solved. FireFlash's success offset and length bonus
are not in the reward: they are the advantage (``infra.objectives.fireflash_advantages``: R' = 1.5 when
solved, else 0.5·R; b = 0.2·(1 − tokens / longest solved) when at least two attempts solved). Sandbox and
verifier failures are ``aborted`` (removed from the group), never 0.
"""

from __future__ import annotations

import infra.agents.harbor.reward  # noqa: F401 - registers "harbor_tests"
from rewards import get_reward

reward = get_reward("harbor_tests")

__all__ = ["reward"]
