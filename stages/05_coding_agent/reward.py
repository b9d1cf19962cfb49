"""Reward of Coding Agent RL: the task's own tests on the sandbox's final state, binary.

``harbor_tests`` (``infra.agents.harbor.reward``): after the episode the environment uploads the task's
``tests/`` to ``/tests``, runs ``tests/test.sh`` against the final state and reads
``/logs/verifier/reward.json`` or ``reward.txt``: 1.0 iff the tests all pass, 0.0 otherwise. Paper §3.6: no
step-level shaping, no LLM judge. A sandbox that does not boot, a verifier that times out or writes no
reward, a dropped connection: ``aborted`` (removed from its group before advantages), never 0.
"""

from __future__ import annotations

import infra.agents.harbor.reward  # noqa: F401 - registers "harbor_tests"
from rewards import get_reward

reward = get_reward("harbor_tests")

__all__ = ["reward"]
