"""Eager decoding attention without ``repeat_kv`` (``infra/embedded/decode_attention.py``): the same
attention as transformers' eager on grouped-query and multi-head models, and a fallback for what it lacks.

Real models built from configs with random weights (no download); nothing is mocked but the fallback's target.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from infra.embedded import decode_attention
from infra.embedded.decode_attention import NAME, grouped_eager_attention
from infra.embedded.generation import RowRequest, _cache_kw, generate_rows
from infra.embedded.models import build_micro


def _gqa_model(kv_heads: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=kv_heads, max_position_embeddings=256,
                         attn_implementation="sdpa")  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _decode_logits(model, impl: str, dtype: torch.dtype) -> torch.Tensor:
    """Logits of one decoding step of a left-padded batch of 3 rows, after an SDPA prefill."""
    model = model.to(dtype)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 97, (3, 40), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :15], mask[2, :31] = 0, 0  # left padding, as generate_rows batches rows
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        model.config._attn_implementation = "sdpa"
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        model.config._attn_implementation = impl
        step = torch.randint(0, 97, (3, 1), generator=g)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        nxt = model(input_ids=step, attention_mask=mask, position_ids=pos[:, -1:] + 1,
                    use_cache=True, **{_cache_kw(model): out.past_key_values})  # fmt: skip
        model.config._attn_implementation = "sdpa"
    return nxt.logits[:, -1].float()


@pytest.mark.parametrize("kv_heads", [2, 4, 8])  # groups of 4 and 2 query heads, and multi-head (no groups)
def test_decoding_step_matches_transformers_eager(kv_heads):
    model = _gqa_model(kv_heads)
    eager = _decode_logits(model, "eager", torch.float32)
    grouped = _decode_logits(model, NAME, torch.float32)
    assert torch.allclose(grouped, eager, atol=1e-5), (grouped - eager).abs().max()
    bf16 = _decode_logits(model, NAME, torch.bfloat16)
    assert torch.allclose(bf16, _decode_logits(model, "eager", torch.bfloat16), atol=0.05)


def test_eager_decode_samples_as_the_models_own_attention_on_a_gqa_model():
    model = _gqa_model(2)
    tok = build_micro(seed=0)[1]  # any tokenizer with pad/eos ids; the ids below stay under the vocab
    rng = random.Random(3)
    rows = [RowRequest([rng.randrange(97) for _ in range(n)], 10, seed=n) for n in (12, 30, 5)]
    plain = generate_rows(model, tok, rows, temperature=1.0)
    grouped = generate_rows(model, tok, rows, temperature=1.0, eager_decode=True)
    for a, b in zip(plain, grouped, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert model.config._attn_implementation == "sdpa"


def test_what_it_does_not_implement_falls_back_to_the_models_eager(monkeypatch):
    model = _gqa_model(2)
    module = model.model.layers[0].self_attn
    seen = []

    def model_eager(*args, **kwargs):
        seen.append(kwargs)
        return ("eager",)

    monkeypatch.setattr(decode_attention, "_model_eager", lambda m: model_eager)
    q, kv = torch.randn(1, 8, 1, 8), torch.randn(1, 2, 5, 8)
    assert grouped_eager_attention(module, q, kv, kv, None, 0.3, softcap=30.0) == ("eager",)
    assert seen == [{"softcap": 30.0}]
    out, weights = grouped_eager_attention(module, q, kv, kv, None, 0.3, softcap=None)
    assert out.shape == (1, 1, 8, 8) and weights.shape == (1, 8, 1, 5) and len(seen) == 1
