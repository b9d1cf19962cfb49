"""Shared RL objectives for both backends: advantages, policy losses, reward shaping and group filters.

The embedded trainer calls these functions directly; the production backend calls them from slime hooks.
Each function documents its formula, its source (paper section, slime, GSPO, CISPO, Dr. GRPO, FireFlash,
Ultramarine) and where it matches or departs from slime's and TRL's implementations.
"""

from __future__ import annotations

from infra.objectives.advantages import (
    fireflash_advantages,
    group_advantages,
    grpo_advantages,
    mean_only_advantages,
    remove_aborted,
)
from infra.objectives.filters import band_keep, nonzero_std_keep
from infra.objectives.losses import entropy_from_logits, kl_k3, mask_truncated, policy_loss
from infra.objectives.shaping import (
    ULTRAMARINE_KEYS,
    positive_length_penalty,
    shape_group,
    shortest_correct_length_penalty,
    ultramarine_shaping,
)

__all__ = [
    "ULTRAMARINE_KEYS",
    "band_keep",
    "entropy_from_logits",
    "fireflash_advantages",
    "group_advantages",
    "grpo_advantages",
    "kl_k3",
    "mask_truncated",
    "mean_only_advantages",
    "nonzero_std_keep",
    "policy_loss",
    "positive_length_penalty",
    "remove_aborted",
    "shape_group",
    "shortest_correct_length_penalty",
    "ultramarine_shaping",
]
