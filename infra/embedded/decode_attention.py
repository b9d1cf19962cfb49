"""Eager attention for decoding steps that reads a grouped-query model's cached keys and values in place.

transformers' ``eager`` attention first copies a GQA model's cached keys and values once per query head
(``repeat_kv``: the whole cache, every layer, every decoded token), then multiplies one query row per head.
Here the query heads that share a key/value head are stacked as rows of one product instead, so nothing is
copied and each cached key is read once per group: the same dot products, summed by other kernels (so a
sample can change at float rounding, as between eager and SDPA). Profiled on stage 08's held-out
evaluation (SmolLM2-135M: 9 query heads over 3 key/value heads, bf16, two threads, 2026-12-08), eager
attention was 58% of a decoding step's time and ``repeat_kv`` 44% of that; the product alone, for 16 rows
of 1,500 cached tokens, took 1.2–1.8 ms instead of 30–33 ms a layer in bf16 (3–4 ms instead of 52–54 in
float32). Hand-written because transformers has no such CPU kernel (its ``sdpa`` calls torch's flash kernel,
slow at one query token on CPU: :func:`infra.embedded.generation.generate_rows`). Registered under
:data:`NAME` with transformers' attention and mask interfaces (the mask is eager's additive one); options
this does not implement (soft-capping, attention sinks, sliding windows) fall back to the model's own eager,
and so does everything on a transformers without an attention registry (< 4.48).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F

try:
    from transformers import AttentionInterface
except ImportError:  # transformers < 4.48 has no attention registry: eager_decode decodes in its eager
    AttentionInterface = None

#: the attention implementation ``eager_decode`` switches a model to
NAME = "rufus_grouped_eager" if AttentionInterface is not None else "eager"
_UNSUPPORTED = ("softcap", "s_aux", "sliding_window")


def _model_eager(module: torch.nn.Module) -> Any:
    """The eager attention function of ``module``'s own modeling file (``eager_attention_forward``)."""
    return sys.modules[type(module).__module__].eager_attention_forward


def grouped_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(output [b, q, heads, d], weights)`` as eager attention does, without ``repeat_kv``.

    ``query`` is ``[b, heads, q, d]``, ``key``/``value`` ``[b, kv_heads, k, d]``; query head ``h`` reads
    key/value head ``h // (heads // kv_heads)``, the layout ``repeat_kv`` expands to.
    """
    b, heads, q, d = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads or any(kwargs.get(name) is not None for name in _UNSUPPORTED):
        return _model_eager(module)(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
    group = heads // kv_heads
    stacked = query.reshape(b, kv_heads, group * q, d)  # the group's heads as rows, in head order
    weights = torch.matmul(stacked, key.transpose(2, 3)) * scaling  # [b, kv_heads, group * q, k]
    if attention_mask is not None:
        mask = attention_mask[:, :, :, : key.shape[-2]]  # [b, 1, q, k], the same for every head
        weights = weights.view(b, kv_heads, group, q, -1) + mask[:, :, None]
        weights = weights.view(b, kv_heads, group * q, -1)
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, value).view(b, heads, q, d).transpose(1, 2).contiguous()
    return out, weights.view(b, heads, q, -1)


if AttentionInterface is not None:
    AttentionInterface.register(NAME, grouped_eager_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface, eager_mask
    except ImportError:  # transformers < 4.53 builds eager's additive mask for any name but sdpa / flash
        pass
    else:
        AttentionMaskInterface.register(NAME, eager_mask)
