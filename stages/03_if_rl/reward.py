"""Reward of IF RL: 1 only when every rubric (pool checker, sandboxed teacher checker, LLM judge) passes."""

from __future__ import annotations

from rewards.instruction_following import if_rubrics_reward as reward

__all__ = ["reward"]
