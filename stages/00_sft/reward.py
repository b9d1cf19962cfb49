"""Reward of SFT: the held-out format score that selects the carried checkpoint (``rewards.sft_format``).

A response scores 1.0 when it opens with one balanced ``<think>`` block and ends in the answer convention
of its family (``\\boxed{}``, a fenced python block, or non-empty text); see :mod:`rewards.sft_format`.
"""

from __future__ import annotations

from rewards.sft_format import FAMILY_FORMATS, answer_format, check_format
from rewards.sft_format import sft_format_reward as reward

__all__ = ["FAMILY_FORMATS", "answer_format", "check_format", "reward"]
