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

Score centering (FF: top-32; on when the hook YAML sets ``rufus_score_centering_top_k``): each sample
carries the sampler's top-k ids and log-probs per response token (``[R, k]``, written by
:mod:`infra.agents.slime_generate` into ``sample.train_metadata``, which slime's own conversion puts in
the rollout's ``metadata`` list). The policy's log-probs of those ids come from the vocab-parallel logits
without a second softmax: ``log pi(k) = z_k - z_a + log pi(a)``, where ``z`` are the (temperature-scaled)
logits, ``z_k`` is gathered on the tensor-parallel rank whose vocabulary shard holds ``k`` and summed over
the TP group with Megatron's ``reduce_from_tensor_model_parallel_region`` (all-reduce forward, identity
backward: each shard gets its own columns' gradient), and ``log pi(a)`` is slime's vocab-parallel
log-prob of the sampled token (with its gradient). The gradient is ``onehot(k) - pi`` as for a full
log-softmax, at the cost of ``[R, k + 1]`` gathers; slime's no-grad
``get_label_token_log_probs_from_vocab_parallel_logits`` shards ids the same way.
``infra.objectives.policy_loss`` then centres each token's score (see its docstring for how it composes
with the clip and TIS).

Transport: the pinned slime hands the loss only a fixed list of rollout keys
(``RolloutManager._split_train_data_by_dp`` and ``forward_step``'s ``get_batch`` keys in
``slime/backends/megatron_utils/model.py``), and ``metadata`` is not among them; the rollout metric
logger must also skip it. The image applies ``infra/production/slime_patches/train_metadata.patch``
(``Dockerfile``; checked against slime's own code by ``tests/contract/test_slime_patches.py``); without
it a stage with centering on fails in this hook with an error naming the missing key instead of training
without it. TIS defaults to the paper's [0.5, 2.0] unless the stage sets
``policy.tis_clip_low``/``tis_clip_high``.
"""

from __future__ import annotations

from typing import Any

import torch

from infra.objectives import policy_loss
from infra.objectives.centering import SAMPLER_TOP_IDS, SAMPLER_TOP_LOGPROBS


def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors right-padded with zeros to ``width``."""
    out = torch.zeros(len(rows), width, dtype=torch.float32, device=rows[0].device if rows else "cpu")
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r.float()
    return out


def _pad3(rows: list[torch.Tensor], width: int, fill: float, dtype: torch.dtype) -> torch.Tensor:
    """Stack ``[R_i, k]`` tensors right-padded with ``fill`` to ``[B, width, k]``."""
    k = max(int(r.shape[-1]) for r in rows)
    out = torch.full((len(rows), width, k), fill, dtype=dtype, device=rows[0].device)
    for i, r in enumerate(rows):
        out[i, : r.shape[0], : r.shape[-1]] = r.to(dtype)
    return out


def centering_top_k(args: Any) -> int | None:
    """The stage's score-centering k from the hook YAML (``rufus_score_centering_top_k``), or None."""
    k = getattr(args, "rufus_score_centering_top_k", None)
    return None if k in (None, 0) else int(k)


def sampler_top_from_batch(batch: dict[str, Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Return per-sample ``(ids [R, k], log-probs [R, k])`` of the sampler from ``batch["metadata"]``."""
    metadata = batch.get("metadata")
    if not metadata:
        raise ValueError(
            "score centering is on (rufus_score_centering_top_k) but the loss batch has no 'metadata': the "
            "pinned slime does not forward it to the loss (see infra.production.fireflash_loss)"
        )
    ids, lps = [], []
    for i, meta in enumerate(metadata):
        if not meta or SAMPLER_TOP_IDS not in meta or SAMPLER_TOP_LOGPROBS not in meta:
            raise ValueError(
                f"score centering: sample {i} of the micro-batch has no {SAMPLER_TOP_IDS!r} in its "
                "train_metadata (rollouts must request the sampler's top-k log-probs)"
            )
        ids.append(torch.as_tensor(meta[SAMPLER_TOP_IDS], dtype=torch.long))
        lps.append(torch.as_tensor(meta[SAMPLER_TOP_LOGPROBS], dtype=torch.float32))
    return ids, lps


def candidate_log_probs_vocab_parallel(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    token_log_probs: torch.Tensor,
    top_ids: torch.Tensor,
    *,
    vocab_start: int,
    temperature: float,
    reduce: Any,
) -> torch.Tensor:
    """Return ``log pi(k)`` [R, k] for the ids ``top_ids`` from one vocab shard of raw logits [R, V/tp].

    ``log pi(k) = (z_k - z_a) / temperature + log pi(a)`` with ``a = tokens`` and ``token_log_probs`` the
    (temperature-scaled) log-probs slime computed for them; ``reduce`` sums the shard-masked gathers over
    the TP group (identity at TP = 1).
    """
    if top_ids.shape[0] != logits.shape[0] or tokens.shape[0] != logits.shape[0]:
        raise ValueError(
            f"score centering: {top_ids.shape[0]} top-k rows and {tokens.shape[0]} tokens for "
            f"{logits.shape[0]} response positions"
        )
    ids = torch.cat([tokens.reshape(-1, 1).long(), top_ids.to(logits.device).long()], dim=-1)
    local = ids - int(vocab_start)
    inside = (local >= 0) & (local < logits.shape[-1])
    picked = logits.gather(-1, local.clamp(0, logits.shape[-1] - 1))
    picked = picked if picked.dtype in (torch.float32, torch.float64) else picked.float()
    z = reduce(torch.where(inside, picked, torch.zeros_like(picked))) / float(temperature)
    return z[:, 1:] - z[:, :1] + token_log_probs.reshape(-1, 1).to(z.dtype)


def fireflash_loss_from_log_probs(
    args: Any,
    batch: dict[str, Any],
    log_probs: list[torch.Tensor],
    centering: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Return the FireFlash loss (sum over the micro-batch's attempts) and metrics (summed likewise).

    ``centering`` is ``(sampler top-k log-probs, policy log-probs of those ids)`` per sample, ``[R_i, k]``
    each, when score centering is on.
    """
    width = max(int(t.numel()) for t in log_probs)
    cur = _pad(log_probs, width)
    old = _pad([torch.as_tensor(t) for t in batch["log_probs"]], width)
    mask = _pad([torch.as_tensor(m, dtype=torch.float32) for m in batch["loss_masks"]], width)
    adv = torch.stack([torch.as_tensor(a, dtype=torch.float32).reshape(-1)[0] for a in batch["advantages"]])
    rollout = batch.get("rollout_log_probs")
    sc: dict[str, torch.Tensor] = {}
    if centering is not None:
        sampler_lps, cand = centering
        sc = {
            "sampler_top_logprobs": _pad3(sampler_lps, width, -torch.inf, torch.float32),
            "candidate_logprobs": _pad3(cand, width, 0.0, torch.float32),
        }
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
        **sc,
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
    centering = None
    if centering_top_k(args) is not None:
        centering = _vocab_parallel_centering(args, batch, logits, out["log_probs"])
    return fireflash_loss_from_log_probs(args, batch, out["log_probs"], centering)


def _vocab_parallel_centering(
    args: Any, batch: dict[str, Any], logits: torch.Tensor, log_probs: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per sample, the sampler's top-k log-probs and the policy's log-probs of those ids (GPU image only).

    slime's ``get_responses`` (raw logits, no temperature copy of ``[T, V/tp]``) yields each sample's
    response rows; context parallelism is 1 for this loss (``validate``), so they are whole samples.
    """
    from megatron.core import mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region
    from megatron.core.tensor_parallel.utils import VocabUtility
    from slime.backends.megatron_utils.loss import get_responses

    vocab_start, _ = VocabUtility.vocab_range_from_per_partition_vocab_size(
        logits.shape[-1], mpu.get_tensor_model_parallel_rank(), mpu.get_tensor_model_parallel_world_size()
    )
    top_ids, top_lps = sampler_top_from_batch(batch)
    responses = get_responses(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        apply_temperature=False,
    )
    cand = [
        candidate_log_probs_vocab_parallel(
            chunk,
            tokens,
            lp,
            ids,
            vocab_start=vocab_start,
            temperature=float(getattr(args, "rollout_temperature", 1.0)),
            reduce=reduce_from_tensor_model_parallel_region,
        )  # fmt: skip
        for (chunk, tokens), lp, ids in zip(responses, log_probs, top_ids, strict=True)
    ]
    return [t.to(logits.device) for t in top_lps], cand
