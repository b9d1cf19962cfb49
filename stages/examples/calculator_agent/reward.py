"""Reward of the calculator stage: 1 when the final ``\\boxed{N}`` equals the answer, else 0 (fail-closed).

The verifier is the built-in calculator environment's ``agent_calculator`` (``infra.agents.envs.calculator``);
importing it registers the name in the reward table.
"""

from __future__ import annotations

from infra.agents.envs.calculator import calculator_reward as reward

__all__ = ["reward"]
