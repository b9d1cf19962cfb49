"""Policy-gradient losses (GRPO/PPO, GSPO, CISPO), TIS, score centering, KL, entropy and masks.

Tensors are a batch of B sequences padded to T response tokens; ``mask`` [B, T] marks trained tokens.
Every function is pure and device-agnostic so the embedded trainer and the production backend (slime's
``--custom-loss-function-path`` hook) compute the same numbers. The per-token formulas follow slime's
``slime/utils/ppo_utils.py`` (``compute_policy_loss``, ``compute_gspo_kl``, ``compute_cispo_loss``) and
``vanilla_tis_function`` in ``slime/backends/megatron_utils/loss.py``; they are re-written here because
slime's versions take Megatron's packed, context-parallel layout and ``args`` namespaces, and TRL's live
inside ``GRPOTrainer._compute_loss``, so neither can be called on a plain padded batch.

Differences from the references, on purpose:
- positions outside ``mask`` never reach ``exp`` (``torch.where``), so padding garbage cannot make NaN;
- metrics are token means over trained tokens, whatever the loss reduction (slime reduces them with the
  loss reducer), so clip fractions stay comparable across reductions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from infra.objectives.centering import centered_logprobs

Terms = tuple[Tensor, Tensor, Tensor]  # per-token loss, clipped indicator, importance ratio; all [B, T]


def _up(x: Tensor) -> Tensor:
    """Return ``x`` in float32 when it is half precision (bf16/fp16), else unchanged (float64 stays)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _masked(x: Tensor, keep: Tensor) -> Tensor:
    """Return ``x`` on trained tokens and 0 elsewhere, without letting padding values reach the graph."""
    x = _up(x)
    return torch.where(keep, x, torch.zeros_like(x))


def _masked_log_ratio(a: Tensor, b: Tensor, keep: Tensor) -> Tensor:
    """Return ``a - b`` on trained tokens and 0 elsewhere (so ``exp`` of padding is exactly 1)."""
    return _masked(_up(a) - _up(b), keep)


def _token_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Return ``sum(x * mask) / max(sum(mask), 1)`` over the whole batch."""
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def _clipped_surrogate(ratio: Tensor, adv: Tensor, lo: float, hi: float, eps_clip_c: float | None) -> Terms:
    """Return PPO's pessimistic clipped loss ``max(-r A, -clip(r, 1-lo, 1+hi) A)`` (slime).

    With ``eps_clip_c`` (> 1) the dual-clip bound ``min(., -c A)`` applies to negative advantages.
    """
    loss1 = -ratio * adv
    loss2 = -ratio.clamp(1.0 - lo, 1.0 + hi) * adv
    loss = torch.maximum(loss1, loss2)
    clipped = loss2 > loss1
    if eps_clip_c is not None:
        if eps_clip_c <= 1.0:
            raise ValueError(f"eps_clip_c (dual clip) must be > 1, got {eps_clip_c}")
        loss = torch.where(adv < 0, torch.minimum(loss, -eps_clip_c * adv), loss)
    return loss, clipped, ratio


def _grpo_terms(
    logp: Tensor, old: Tensor, adv: Tensor, keep: Tensor, lo: float, hi: float, c: float | None
) -> Terms:
    """Return token-level clipped terms, ratio ``exp(logp - old)`` per token (PPO/GRPO/DAPO clip-higher)."""
    return _clipped_surrogate(torch.exp(_masked_log_ratio(logp, old, keep)), adv, lo, hi, c)


def _gspo_terms(
    logp: Tensor, old: Tensor, adv: Tensor, keep: Tensor, lo: float, hi: float, c: float | None
) -> Terms:
    """Return GSPO terms: one ratio per sequence, ``exp(mean_t(logp - old))`` over trained tokens.

    Same as slime's ``compute_gspo_kl`` + ``compute_policy_loss``: the sequence ratio is expanded to every
    token, so each token carries the sequence's clipped loss, and the gradient of the ratio flows through
    the mean (d s_i / d logp_t = s_i / |y_i|, as in the GSPO paper). TRL's ``importance_sampling_level=
    "sequence"`` computes the same ratio.
    """
    log_ratio = _masked_log_ratio(logp, old, keep)
    n = keep.sum(-1, keepdim=True).clamp_min(1).to(log_ratio.dtype)
    seq_ratio = torch.exp(log_ratio.sum(-1, keepdim=True) / n).expand_as(log_ratio)
    return _clipped_surrogate(seq_ratio, adv, lo, hi, c)


def _cispo_terms(
    logp: Tensor, old: Tensor, adv: Tensor, keep: Tensor, lo: float, hi: float, c: float | None
) -> Terms:
    """Return CISPO terms ``-sg(clip(r, 1-lo, 1+hi)) * A * logp`` (MiniMax-M1 Eq. 4-5, slime).

    The clipped weight is detached, so every token keeps a gradient ``-w A`` through ``logp`` (PPO would
    zero it). slime uses these same delta-from-1 bounds; TRL's ``loss_type="cispo"`` clamps only above, at
    the absolute value ``epsilon_high`` (e.g. 5.0): use ``eps_clip >= 1`` and ``eps_clip_high = 4.0`` here
    for that. ``eps_clip_c`` does not apply to CISPO.
    """
    ratio = torch.exp(_masked_log_ratio(logp, old, keep))
    weight = ratio.clamp(1.0 - lo, 1.0 + hi).detach()
    loss = -weight * adv * _masked(logp, keep)
    return loss, weight != ratio, ratio


_POLICY_TERMS: dict[str, Callable[..., Terms]] = {
    "grpo": _grpo_terms,
    "gspo": _gspo_terms,
    "cispo": _cispo_terms,
}


def _reduce_token(x: Tensor, mask: Tensor, min_denominator: int | None) -> Tensor:
    """Return the mean over every trained token of the batch (TRL "bnpo"/DAPO; slime per-token loss)."""
    return _token_mean(x, mask)


def _reduce_sequence(x: Tensor, mask: Tensor, min_denominator: int | None) -> Tensor:
    """Return the mean over sequences of each sequence's token mean (slime's default sum_of_sample_mean).

    A fully masked row (e.g. a truncated sample) counts as a zero in the batch mean, as in slime, which
    divides the summed sample means by the global batch size.
    """
    return ((x * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).mean()


def _reduce_attempt(x: Tensor, mask: Tensor, min_denominator: int | None) -> Tensor:
    """Return the mean over sequences of ``sum(loss) / max(tokens, min_denominator)`` (FireFlash, 2,048).

    The floor stops a degenerate few-token attempt from giving its tokens a huge weight.
    """
    floor = 1.0 if min_denominator is None else float(min_denominator)
    return ((x * mask).sum(-1) / mask.sum(-1).clamp_min(floor)).mean()


_REDUCERS: dict[str, Callable[[Tensor, Tensor, int | None], Tensor]] = {
    "token": _reduce_token,
    "sequence": _reduce_sequence,
    "attempt": _reduce_attempt,
}


def _check_batch(logprobs: Tensor, mask: Tensor, **others: Tensor | None) -> None:
    """Raise ValueError naming the argument whose shape does not match ``logprobs`` [B, T]."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    for name, t in {"mask": mask, **others}.items():
        if t is not None and t.shape != logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)}, expected {tuple(logprobs.shape)} like logprobs"
            )


def policy_loss(
    kind: str,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_clip: float,
    eps_clip_high: float | None = None,
    rollout_logprobs: Tensor | None = None,
    tis_clip_low: float = 0.0,
    tis_clip_high: float | None = None,
    reduction: str = "token",
    min_denominator: int | None = None,
    eps_clip_c: float | None = None,
    sampler_top_logprobs: Tensor | None = None,
    candidate_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Return ``(scalar loss to minimise, metrics)`` for one batch under the objective ``kind``.

    kind: "grpo" (token ratio, clip [1-eps_clip, 1+eps_clip_high]), "gspo" (sequence ratio, same clip),
    "cispo" (detached clipped weight times ``logp * A``). ``advantages`` is [B] (or [B, T] per token).
    TIS: when both ``rollout_logprobs`` and ``tis_clip_high`` are given, each token's loss is multiplied
    by the detached ``clamp(exp(old - rollout), tis_clip_low, tis_clip_high)`` — slime's vanilla TIS,
    default [0, 2]; FireFlash uses [0.5, 2.0]. Ultramarine's async CISPO takes the ratio to the rollout
    policy directly: pass the rollout log-probs as ``old_logprobs`` and no TIS.
    reduction: "token" | "sequence" | "attempt" (``min_denominator`` floors each attempt's token count).
    Metrics (token means over trained tokens): loss, clip_fraction, ratio_mean, approx_kl (mean of
    old - logp, slime's ppo_kl), and tis_weight_mean / tis_clip_fraction when TIS is on.
    ``eps_clip_c`` (> 1) enables slime's dual-clip bound for negative advantages (grpo and gspo only).

    Score centering (FireFlash SC, :mod:`infra.objectives.centering`): with ``sampler_top_logprobs``
    [B, T, K] (the sampler's log-probs of its top-k ids, ``-inf`` padding) and ``candidate_logprobs``
    [B, T, K] (the current policy's log-probs of the same ids, with gradient), the objective receives
    ``logp - c + sg(c)``, ``c = sum_k mu~_k logp(k)``, in place of ``logp``. Its value is ``logp``
    exactly, so ratios, clip decisions, TIS weights, reductions and the loss value are today's; only the
    score inside the surrogate changes. Per token the gradient becomes
    ``-A * w_tis * r * (grad logp(a) - sum_k mu~_k grad logp(k))`` where PPO's clip lets the token
    through, and 0 where it is clipped: the centring belongs to the token's score, so a token the trust
    region stops contributes neither (adding ``A w sg(r) c`` as a separate, unclipped term was rejected:
    it would keep moving probability on tokens the clip has frozen). FireFlash makes one optimizer update
    per rollout, so ``r = 1`` at the update and nothing is clipped: its gradient per attempt is
    ``-A * w_t * (grad logp(a_t) - sum_k mu~_k grad logp(k)) / max(tokens, 2048)`` summed over tokens.
    GSPO centres each token inside the sequence mean; CISPO multiplies the centred score by its
    detached weight. Metrics add ``sc_sampler_mass`` and ``sc_expected_logprob``.
    """
    try:
        terms = _POLICY_TERMS[kind]
    except KeyError:
        raise ValueError(
            f"unknown policy loss kind {kind!r}; choose one of {sorted(_POLICY_TERMS)}"
        ) from None
    try:
        reduce = _REDUCERS[reduction]
    except KeyError:
        raise ValueError(f"unknown loss reduction {reduction!r}; choose one of {sorted(_REDUCERS)}") from None
    _check_batch(logprobs, mask, old_logprobs=old_logprobs, rollout_logprobs=rollout_logprobs)
    if eps_clip < 0 or (eps_clip_high is not None and eps_clip_high < 0):
        raise ValueError(f"clip ranges must be >= 0, got eps_clip={eps_clip}, eps_clip_high={eps_clip_high}")
    if min_denominator is not None and min_denominator < 1:
        raise ValueError(f"min_denominator must be >= 1, got {min_denominator}")
    adv = _up(torch.as_tensor(advantages, device=logprobs.device)).detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    if adv.shape not in {(logprobs.shape[0], 1), tuple(logprobs.shape)}:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}, expected [B] or [B, T] with B, T = "
            f"{tuple(logprobs.shape)}"
        )
    keep = mask.bool()
    fmask = keep.to(torch.float32)
    hi = eps_clip if eps_clip_high is None else eps_clip_high
    metrics: dict[str, float] = {}
    scored = logprobs
    if (sampler_top_logprobs is None) != (candidate_logprobs is None):
        raise ValueError("score centering needs both sampler_top_logprobs and candidate_logprobs")
    if sampler_top_logprobs is not None and candidate_logprobs is not None:
        scored, sc_metrics = centered_logprobs(logprobs, candidate_logprobs, sampler_top_logprobs, keep)
        metrics.update(sc_metrics)
    per_token, clipped, ratio = terms(scored, old_logprobs.detach(), adv, keep, eps_clip, hi, eps_clip_c)

    if rollout_logprobs is not None and tis_clip_high is not None:
        if not 0.0 <= tis_clip_low <= tis_clip_high:
            raise ValueError(f"TIS bounds need 0 <= low <= high, got [{tis_clip_low}, {tis_clip_high}]")
        tis = torch.exp(_masked_log_ratio(old_logprobs.detach(), rollout_logprobs.detach(), keep))
        weight = tis.clamp(tis_clip_low, tis_clip_high)
        per_token = per_token * weight
        metrics["tis_weight_mean"] = float(_token_mean(weight, fmask))
        metrics["tis_clip_fraction"] = float(_token_mean((weight != tis).float(), fmask))

    loss = reduce(per_token, fmask, min_denominator)
    with torch.no_grad():
        metrics["loss"] = float(loss)
        metrics["clip_fraction"] = float(_token_mean(clipped.float(), fmask))
        metrics["ratio_mean"] = float(_token_mean(ratio, fmask))
        metrics["approx_kl"] = float(_token_mean(_masked_log_ratio(old_logprobs, logprobs, keep), fmask))
    return loss, metrics


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Return the masked token mean of the k3 KL estimate ``exp(ref - logp) - (ref - logp) - 1``.

    Schulman's low-variance, non-negative estimator of KL(pi || ref); zero where the two agree. Same as
    slime's ``compute_approx_kl(kl_loss_type="k3")`` (its "low_var_kl" additionally clamps to [-10, 10]).
    """
    _check_batch(logprobs, mask, ref_logprobs=ref_logprobs)
    keep = mask.bool()
    d = _masked_log_ratio(ref_logprobs.detach(), logprobs, keep)
    return _token_mean(torch.exp(d) - d - 1.0, keep.float())


def entropy_from_logits(logits: Tensor, mask: Tensor) -> Tensor:
    """Return the masked token mean of the policy entropy ``-sum_v p log p`` from logits [B, T, V]."""
    if logits.dim() != 3 or logits.shape[:2] != mask.shape:
        raise ValueError(
            f"logits must be [B, T, V] matching mask {tuple(mask.shape)}, got {tuple(logits.shape)}"
        )
    logp = torch.log_softmax(_up(logits), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return _token_mean(entropy, mask.bool().float())


def mask_truncated(mask: Tensor, truncated: Tensor) -> Tensor:
    """Return ``mask`` with the rows of truncated samples zeroed (RA §3.2: no loss on truncated samples)."""
    trunc = torch.as_tensor(truncated, dtype=torch.bool, device=mask.device)
    if mask.dim() != 2 or trunc.shape != mask.shape[:1]:
        raise ValueError(
            f"truncated must be [B] for mask [B, T]; got {tuple(trunc.shape)} and {tuple(mask.shape)}"
        )
    keep_rows = ~trunc.unsqueeze(-1)
    if mask.dtype == torch.bool:
        return mask & keep_rows
    return mask * keep_rows.to(mask.dtype)
