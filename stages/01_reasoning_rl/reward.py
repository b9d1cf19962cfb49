"""Reward of Reasoning RL: binary, dispatched on ``metadata.family`` (math-verify, reasoning-gym, fuzzy)."""

from __future__ import annotations

from rewards.reasoning import assign_family
from rewards.reasoning import reasoning_reward as reward

__all__ = ["assign_family", "reward"]
