"""slime ``--rollout-function-path`` for GLM SFT: samples from the packed token file of ``sft_data``.

Replaces ``slime.rollout.sft_rollout.generate_rollout`` (whose mask generator has no GLM mode) with the
ids and masks ``infra.production.sft_data`` wrote under the GLM-4.5 template. Rows carry only an
``offset``/``length`` into ``<prompt-data>.bin`` (memory-mapped), so the RolloutManager holds a few hundred
bytes per row; a sample's tokens are read when its batch is drawn. The response starts at the first
supervised token, as in slime's SFT path, and the mask is cut to the response.
"""

from __future__ import annotations

from typing import Any

from infra.production.sft_data import read_tokens, tokens_path


def fill_sft_sample(sample: Any, bin_path: Any, max_len: int | None = None) -> Any:
    """Set ``tokens``, ``response_length``, ``loss_mask`` and ``reward`` of one SFT sample."""
    meta = sample.metadata or {}
    ids, mask = read_tokens(bin_path, meta)
    if max_len is not None and len(ids) > max_len:
        raise ValueError(
            f"SFT row {meta.get('id')!r}: {len(ids)} tokens > --rollout-max-context-len {max_len}"
        )
    if 1 not in mask:
        raise ValueError(f"SFT row {meta.get('id')!r}: no supervised token")
    first = mask.index(1)
    sample.tokens = ids
    sample.response_length = len(ids) - first
    sample.loss_mask = mask[first:]
    sample.reward = 0
    return sample


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """Return one SFT batch (``rollout_batch_size`` single-sample groups) as slime's train output."""
    if evaluation:
        raise ValueError("the SFT rollout has no evaluation mode; held-out scoring runs on HF snapshots")
    bin_path = tokens_path(str(args.prompt_data).split("@[")[0])
    groups = data_source.get_samples(args.rollout_batch_size)
    for group in groups:
        (sample,) = group
        fill_sft_sample(sample, bin_path, getattr(args, "rollout_max_context_len", None))
    from slime.rollout.base_types import RolloutFnTrainOutput

    return RolloutFnTrainOutput(samples=groups)
