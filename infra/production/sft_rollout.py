"""slime ``--rollout-function-path`` for GLM SFT: samples from pre-computed token ids and loss masks.

Replaces ``slime.rollout.sft_rollout.generate_rollout`` (whose mask generator has no GLM mode) with the
ids and masks ``infra.production.sft_data`` wrote under the GLM-4.5 template. The response starts at the
first supervised token, as in slime's SFT path, and the mask is cut to the response.
"""

from __future__ import annotations

from typing import Any


def fill_sft_sample(sample: Any, max_len: int | None = None) -> Any:
    """Set ``tokens``, ``response_length``, ``loss_mask`` and ``reward`` of one SFT sample from metadata."""
    meta = sample.metadata or {}
    ids, mask = meta.get("token_ids"), meta.get("loss_mask")
    if not ids or mask is None or len(ids) != len(mask):
        raise ValueError(f"SFT row {meta.get('id')!r}: token_ids/loss_mask missing or of different lengths")
    if max_len is not None and len(ids) > max_len:
        raise ValueError(
            f"SFT row {meta.get('id')!r}: {len(ids)} tokens > --rollout-max-context-len {max_len}"
        )
    if 1 not in mask:
        raise ValueError(f"SFT row {meta.get('id')!r}: no supervised token")
    first = mask.index(1)
    sample.tokens = list(ids)
    sample.response_length = len(ids) - first
    sample.loss_mask = list(mask[first:])
    sample.reward = 0
    return sample


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """Return one SFT batch (``rollout_batch_size`` single-sample groups) as slime's train output."""
    if evaluation:
        raise ValueError("the SFT rollout has no evaluation mode; held-out scoring runs on HF snapshots")
    groups = data_source.get_samples(args.rollout_batch_size)
    for group in groups:
        (sample,) = group
        fill_sft_sample(sample, getattr(args, "rollout_max_context_len", None))
    from slime.rollout.base_types import RolloutFnTrainOutput

    return RolloutFnTrainOutput(samples=groups)
