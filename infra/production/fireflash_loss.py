"""FireFlash policy loss for slime's ``--loss-type custom_loss`` (FF: TIS in [0.5, 2], per-attempt norm).

slime's built-in policy loss has neither the per-attempt normalisation ``sum(loss)/max(tokens, 2048)``
nor TIS with a non-zero lower bound paired with it, so the FireFlash variant of stage 05 plugs in here.
The batch's per-sample lists (current, old and rollout log-probs, advantages, loss masks) are padded to
``[B, T]`` and handed to ``infra.objectives.policy_loss`` — the same function the embedded trainer uses.
Current log-probs come from slime's own logits helper (imported lazily, GPU image only); the loss needs
context parallel size 1 so every sample's tokens are on one rank (``validate`` enforces it).

slime's custom-loss contract is a *sum* of per-sample terms over the micro-batch: slime then multiplies
by ``num_microbatches / global batch × DP`` (no ``--calculate-per-token-loss``), and divides logged
metrics by the global batch. ``policy_loss`` averages the per-attempt terms over the micro-batch, so the
hook returns that mean times the micro-batch's sample count; with dynamic batching every attempt then
weighs the same whatever micro-batch it lands in.

Deviation from the paper: FireFlash's score centering with the sampler's top-32 log-probs is not
implemented (slime's default generate returns only the sampled token's log-prob); TIS defaults to the
paper's [0.5, 2.0] unless the stage sets ``policy.tis_clip_low``/``tis_clip_high``.
"""

from __future__ import annotations

from typing import Any

import torch

from infra.objectives import policy_loss


def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors right-padded with zeros to ``width``."""
    out = torch.zeros(len(rows), width, dtype=torch.float32, device=rows[0].device if rows else "cpu")
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r.float()
    return out


def fireflash_loss_from_log_probs(
    args: Any, batch: dict[str, Any], log_probs: list[torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return the FireFlash loss (sum over the micro-batch's attempts) and metrics (summed likewise)."""
    width = max(int(t.numel()) for t in log_probs)
    cur = _pad(log_probs, width)
    old = _pad([torch.as_tensor(t) for t in batch["log_probs"]], width)
    mask = _pad([torch.as_tensor(m, dtype=torch.float32) for m in batch["loss_masks"]], width)
    adv = torch.stack([torch.as_tensor(a, dtype=torch.float32).reshape(-1)[0] for a in batch["advantages"]])
    rollout = batch.get("rollout_log_probs")
    loss, metrics = policy_loss(
        str(getattr(args, "rufus_estimator", "grpo")),
        cur,
        old,
        adv,
        mask,
        eps_clip=float(args.eps_clip),
        eps_clip_high=getattr(args, "eps_clip_high", None),
        rollout_logprobs=_pad([torch.as_tensor(t) for t in rollout], width) if rollout else None,
        tis_clip_low=float(getattr(args, "rufus_tis_clip_low", 0.5)),
        tis_clip_high=float(getattr(args, "rufus_tis_clip_high", 2.0)) if rollout else None,
        reduction="attempt",
        min_denominator=int(getattr(args, "rufus_min_attempt_tokens", 2048)),
    )
    n = len(log_probs)
    return loss * n, {k: torch.tensor(float(v) * n) for k, v in metrics.items()}


def fireflash_loss(
    args: Any, batch: dict[str, Any], logits: torch.Tensor, sum_of_sample_mean: Any
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """slime ``--custom-loss-function-path`` hook ``fn(args, batch, logits, sum_of_sample_mean)``.

    ``sum_of_sample_mean`` is not used: the per-attempt reduction divides each attempt by
    ``max(tokens, 2048)`` itself.
    """
    from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

    _, out = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=False,
    )
    return fireflash_loss_from_log_probs(args, batch, out["log_probs"])
