"""Group-relative advantages: one group of G samples of one prompt in, one advantage per sample out.

Both backends call these: the embedded trainer directly, the production backend from slime's
``--custom-advantage-function-path`` / ``--custom-reward-post-process-path`` hooks. They are written here
rather than taken from slime (``RolloutManager._post_process_rewards``) or TRL (``GRPOTrainer``) because
those compute advantages inside their trainers, over a whole batch reshaped by ``n_samples_per_prompt``;
we need the same arithmetic on one variable-size group (aborted samples removed), as a pure function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


def _as_group(rewards: Tensor | Sequence[float], name: str = "rewards") -> Tensor:
    """Return ``rewards`` as a 1-D float tensor, raising a clear error on an empty or misshapen group."""
    r = torch.as_tensor(rewards)
    if r.dim() != 1 or r.numel() == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D group of per-sample values, got shape {tuple(r.shape)}"
        )
    if not torch.is_floating_point(r):
        r = r.to(torch.float32)
    if not torch.isfinite(r).all():
        raise ValueError(f"{name} contains non-finite values: {r.tolist()}")
    return r


def _centered(r: Tensor) -> Tensor:
    """Return ``r - mean(r)``, exactly zero when every value is equal.

    Floating-point ``mean`` of equal values can differ from them by one ulp (e.g. sixteen 0.3s); divided by
    a tiny std + eps that ulp would become a spurious advantage, so an all-equal group is zeroed explicitly.
    """
    if bool((r == r[0]).all()):
        return torch.zeros_like(r)
    return r - r.mean()


def _std(r: Tensor, unbiased: bool) -> Tensor:
    """Return the group std (population unless ``unbiased``); 0 for a single sample instead of NaN."""
    if unbiased and r.numel() < 2:
        return r.new_zeros(())
    return r.std(unbiased=unbiased)


def grpo_advantages(rewards: Tensor | Sequence[float], eps: float = 1e-6, *, unbiased: bool = True) -> Tensor:
    """Return GRPO advantages ``(r - mean) / (std + eps)`` for one group.

    ``std`` is torch's Bessel-corrected std by default, exactly what slime's ``_post_process_rewards``
    computes (``rewards.std(dim=-1) + 1e-6``), so both backends train on the same advantages; pass
    ``unbiased=False`` for the population std. With G=16 the two differ by sqrt(16/15) ≈ 1.033. A group of
    one gives 0, and all-equal groups give exact zeros.
    """
    r = _as_group(rewards)
    return _centered(r) / (_std(r, unbiased) + eps)


def mean_only_advantages(rewards: Tensor | Sequence[float]) -> Tensor:
    """Return mean-centred advantages ``r - mean`` (Dr. GRPO; slime ``--disable-grpo-std-normalization``).

    Used by the Search Agent stage (RA §3.7) and Ultramarine's CISPO setup (mean-centred advantages).
    """
    return _centered(_as_group(rewards))


def fireflash_advantages(
    rewards: Tensor | Sequence[float],
    solved: Tensor | Sequence[bool],
    num_tokens: Tensor | Sequence[int],
    eps: float = 1e-6,
    *,
    success_value: float = 1.5,
    partial_scale: float = 0.5,
    length_bonus: float = 0.2,
    length_scale: float = 0.5,
    unbiased: bool = False,
) -> Tensor:
    """Return FireFlash advantages ``(R' - mean R')/(std R' + eps) + (b - mean b)/0.5`` for one group.

    FF RL objective: ``R' = 1.5`` for a solved attempt, else ``0.5 * R`` (R the partial score in [0, 1]);
    ``b_i = 0.2 * (1 - tokens_i / max tokens among solved)`` for solved attempts when at least two attempts
    solved the task, else 0 for everyone. Means and std are over the whole group (12 attempts in FF).
    The reward term is zero for a group whose R' are all equal, but the length term may still rank
    equally-solved attempts by their token count.
    """
    r = _as_group(rewards)
    s = torch.as_tensor(solved, dtype=torch.bool, device=r.device)
    n = torch.as_tensor(num_tokens, dtype=r.dtype, device=r.device)
    if s.shape != r.shape or n.shape != r.shape:
        raise ValueError(
            f"fireflash_advantages: rewards {tuple(r.shape)}, solved {tuple(s.shape)} and num_tokens "
            f"{tuple(n.shape)} must have the same length"
        )
    if bool((n < 0).any()):
        raise ValueError(f"fireflash_advantages: num_tokens must be >= 0, got {n.tolist()}")
    shaped = torch.where(s, torch.full_like(r, success_value), partial_scale * r)
    reward_term = _centered(shaped) / (_std(shaped, unbiased) + eps)
    bonus = torch.zeros_like(r)
    if int(s.sum()) >= 2:
        longest = n[s].max()
        if float(longest) > 0:
            bonus = torch.where(s, length_bonus * (1.0 - n / longest), bonus)
    return reward_term + _centered(bonus) / length_scale


_ADVANTAGES: dict[str, Callable[..., Tensor]] = {
    "grpo": grpo_advantages,
    "mean_only": mean_only_advantages,
    "fireflash": fireflash_advantages,
}


def group_advantages(kind: str, rewards: Tensor | Sequence[float], **kw: object) -> Tensor:
    """Return the advantages of one group with the estimator named ``kind`` (grpo, mean_only, fireflash)."""
    try:
        fn = _ADVANTAGES[kind]
    except KeyError:
        raise ValueError(f"unknown advantage kind {kind!r}; choose one of {sorted(_ADVANTAGES)}") from None
    return fn(rewards, **kw)


def remove_aborted(group: list[T], aborted: Sequence[bool]) -> list[T]:
    """Return ``group`` without the samples flagged aborted (infrastructure failures, RA §3.6).

    An aborted sample (sandbox boot failure, verifier timeout, dropped connection) says nothing about the
    policy, so it leaves its group before advantages are computed instead of being scored 0.
    """
    if len(group) != len(aborted):
        raise ValueError(
            f"remove_aborted: group has {len(group)} samples but aborted has {len(aborted)} flags"
        )
    return [item for item, bad in zip(group, aborted, strict=True) if not bad]
