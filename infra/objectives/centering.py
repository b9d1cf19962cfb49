"""FireFlash score centering (SC): subtract the sampler's expected score over its top-k candidates.

FF, RL objective: "The rollout engine returns the top-32 log probabilities for each token, and the
trainer subtracts the expected score of the sampler on these candidates from the policy gradient score
of each token." For token ``t`` with sampled id ``a_t`` and the sampler's top-k ids ``K_t`` with sampler
probabilities ``mu_k`` renormalised over ``K_t`` (``mu~``, detached), the score becomes

    grad log pi(a_t) - sum_{k in K_t} mu~_k grad log pi(k).

In logit space that is ``onehot(a_t) - mu~_t`` (the ``-pi`` of both scores cancels). With the full
vocabulary as candidates the centred score has zero mean under the sampler, ``E_{a~mu}[.] = 0``, where
the plain score has mean ``mu - pi``: the drift toward a stale or low-precision sampler that truncated
importance weights leave in place. With the sampler exact (``mu = pi``, k = V) the subtracted term is
``grad sum_k pi_k = 0`` and nothing changes.

:func:`centered_logprobs` writes this as a value-preserving surrogate, ``logp + (c - c).detach()``-style:
``logp(a_t) - c_t + sg(c_t)`` with ``c_t = sum_k mu~_k log pi(k)``. Its value is exactly ``logp(a_t)``,
so ratios, clip decisions, TIS weights and logged losses are unchanged; its gradient is the centred
score. :func:`infra.objectives.losses.policy_loss` feeds it to the objective in place of ``logp``.
Hand-written: neither slime nor TRL implements score centering.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Keys of the sampler's per-token top-k ([R, k] ids and log-probs) in a slime sample's ``train_metadata``
#: (written by ``infra.agents.slime_generate``, read by ``infra.production.fireflash_loss``).
SAMPLER_TOP_IDS = "rufus_sampler_top_ids"
SAMPLER_TOP_LOGPROBS = "rufus_sampler_top_logprobs"


def _check(candidate_logprobs: Tensor, sampler_top_logprobs: Tensor, shape: torch.Size) -> None:
    """Raise ValueError unless both candidate tensors are ``[B, T, K]`` over the batch's ``[B, T]``."""
    for name, t in {
        "candidate_logprobs": candidate_logprobs,
        "sampler_top_logprobs": sampler_top_logprobs,
    }.items():
        if t.dim() != 3 or t.shape[:2] != shape:
            raise ValueError(f"{name} must be [B, T, K] with [B, T] = {tuple(shape)}, got {tuple(t.shape)}")
    if candidate_logprobs.shape != sampler_top_logprobs.shape:
        raise ValueError(
            f"candidate_logprobs {tuple(candidate_logprobs.shape)} and sampler_top_logprobs "
            f"{tuple(sampler_top_logprobs.shape)} must name the same candidates"
        )


def sampler_weights(sampler_top_logprobs: Tensor, keep: Tensor) -> Tensor:
    """Return ``mu~`` [B, T, K]: the sampler's top-k probabilities renormalised per token (detached).

    A candidate slot with log-prob ``-inf`` is padding (weight 0); a token outside ``keep`` or without any
    candidate (an environment token of an agent episode) gets all-zero weights, so it is not centred.
    """
    lp = sampler_top_logprobs.detach().to(torch.float64)
    valid = torch.isfinite(lp)
    row_ok = valid.any(-1, keepdim=True) & keep.bool().unsqueeze(-1)
    safe = torch.where(valid, lp, torch.full_like(lp, -torch.inf))
    safe = torch.where(row_ok, safe, torch.zeros_like(safe))  # no all -inf rows reach softmax (NaN)
    weights = torch.softmax(safe, dim=-1)
    return torch.where(row_ok & valid, weights, torch.zeros_like(weights))


def expected_score(candidate_logprobs: Tensor, weights: Tensor) -> Tensor:
    """Return ``c = sum_k mu~_k log pi(k)`` [B, T]; candidates with weight 0 never reach the product."""
    lp = candidate_logprobs if candidate_logprobs.dtype == torch.float64 else candidate_logprobs.float()
    w = weights.to(lp.dtype)
    return (w * torch.where(w > 0, lp, torch.zeros_like(lp))).sum(-1)


def centered_logprobs(
    logprobs: Tensor, candidate_logprobs: Tensor, sampler_top_logprobs: Tensor, keep: Tensor
) -> tuple[Tensor, dict[str, float]]:
    """Return ``(logp - c + sg(c), metrics)``: value ``logp`` exactly, gradient the centred score.

    ``logprobs`` [B, T] are the current policy's log-probs of the sampled tokens, ``candidate_logprobs``
    [B, T, K] its log-probs of the sampler's top-k ids (with gradient), ``sampler_top_logprobs`` [B, T, K]
    the sampler's own log-probs of those ids (``-inf`` pads missing slots). Metrics (token means over
    ``keep``): ``sc_sampler_mass`` — the sampler probability the candidates cover (1 minus the tail SC
    ignores); ``sc_expected_logprob`` — the mean of ``c``.
    """
    _check(candidate_logprobs, sampler_top_logprobs, logprobs.shape)
    weights = sampler_weights(sampler_top_logprobs, keep)
    c = expected_score(candidate_logprobs, weights)
    up = logprobs if logprobs.dtype in (torch.float32, torch.float64) else logprobs.float()
    centred = up + (c.detach() - c).to(up.dtype)
    with torch.no_grad():
        fkeep = keep.bool().to(torch.float64)
        n = fkeep.sum().clamp_min(1.0)
        lp = sampler_top_logprobs.detach().to(torch.float64)
        mass = torch.where(torch.isfinite(lp), lp.exp(), torch.zeros_like(lp)).sum(-1)
        metrics = {
            "sc_sampler_mass": float((mass * fkeep).sum() / n),
            "sc_expected_logprob": float((c.detach().to(torch.float64) * fkeep).sum() / n),
        }
    return centred, metrics


def candidate_logprobs_from_logits(logits: Tensor, top_ids: Tensor) -> Tensor:
    """Return ``log_softmax(logits)`` at the candidate ids: logits [B, T, V], ids [B, T, K] -> [B, T, K]."""
    if logits.dim() != 3 or top_ids.dim() != 3 or top_ids.shape[:2] != logits.shape[:2]:
        raise ValueError(
            f"logits [B, T, V] and top_ids [B, T, K] must share B, T; got {tuple(logits.shape)} and "
            f"{tuple(top_ids.shape)}"
        )
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    return torch.log_softmax(x, dim=-1).gather(-1, top_ids.long())


def sampler_top_k(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Return the top-``k`` ``(ids, log-probs)`` of ``softmax(logits)`` on the last axis (k capped at V)."""
    logp = torch.log_softmax(logits.detach().float(), dim=-1)
    values, ids = logp.topk(min(int(k), logp.shape[-1]), dim=-1)
    return ids, values
