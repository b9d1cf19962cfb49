"""The appendable KV cache: sampling with it is bit-identical to transformers' DynamicCache."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base  # noqa: E402

from infra.embedded import generation  # noqa: E402
from infra.embedded.kv_cache import MIN_CAPACITY, GrowingCache, GrowingLayer  # noqa: E402
from infra.embedded.models import load_model, load_tokenizer  # noqa: E402
from infra.embedded.prefix_cache import PrefixKVCache  # noqa: E402


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    torch.set_num_threads(1)
    base = micro_base(tmp_path_factory.mktemp("kv"))
    return load_model(base).eval(), load_tokenizer(base)


def _with_dynamic_cache(monkeypatch, model) -> None:
    monkeypatch.setattr(generation, "_empty_cache", lambda: DynamicCache(config=model.config))
    monkeypatch.setattr(
        generation, "_cache_from", lambda layers: DynamicCache(ddp_cache_data=layers, config=model.config)
    )


def _samples(gens) -> list[tuple[list[int], list[float], str | None]]:
    return [(g.token_ids, g.logprobs, g.finish_reason) for g in gens]


def _prompts(n: int, seed: int, vocab: int) -> list[list[int]]:
    r = random.Random(seed)
    # Lengths cross the initial capacity, so the buffers grow mid-decode.
    return [[r.randrange(vocab) for _ in range(r.randint(3, MIN_CAPACITY + 20))] for _ in range(n)]


def test_generate_matches_dynamic_cache_bit_for_bit(micro, monkeypatch):
    model, tok = micro
    prompts = _prompts(6, 0, model.config.vocab_size)
    kw = dict(max_new_tokens=90, temperature=1.0, seed=3, batch_size=4, top_k=3)
    growing = generation.generate(model, tok, prompts, **kw)
    _with_dynamic_cache(monkeypatch, model)
    dynamic = generation.generate(model, tok, prompts, **kw)
    assert _samples(growing) == _samples(dynamic)
    assert [g.top_logprobs for g in growing] == [g.top_logprobs for g in dynamic]


def test_generate_rows_with_prefix_cache_matches_dynamic_cache(micro, monkeypatch):
    """The agent server's path: rows re-encoded past a cached prefix, then decoded together."""
    model, tok = micro

    def run() -> list:
        cache, r = PrefixKVCache(max_tokens=100_000), random.Random(1)
        ids = _prompts(4, 1, model.config.vocab_size)
        out = []
        for turn in range(3):  # each turn extends the last: its prompt is served from the prefix cache
            rows = [
                generation.RowRequest(ids=p, max_new_tokens=20 + 7 * i, seed=10 * turn + i)
                for i, p in enumerate(ids)
            ]
            gens = generation.generate_rows(model, tok, rows, temperature=0.8, prefix_cache=cache)
            out += _samples(gens)
            tool = [[r.randrange(model.config.vocab_size) for _ in range(5)] for _ in ids]
            ids = [p + g.token_ids + t for p, g, t in zip(ids, gens, tool, strict=True)]
        assert cache.hits > 0
        return out

    growing = run()
    _with_dynamic_cache(monkeypatch, model)
    assert growing == run()


def test_growing_layer_appends_in_place_and_rebuffers_after_selection():
    layer = GrowingLayer()
    k = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4)
    keys, _ = layer.update(k, -k)
    buf = layer._key_buf
    assert buf.shape[-2] == MIN_CAPACITY and torch.equal(keys, k)
    step = torch.ones(2, 3, 1, 4)
    keys, values = layer.update(step, -step)
    assert layer._key_buf is buf and torch.equal(keys, torch.cat([k, step], dim=-2))  # no new buffer
    assert torch.equal(values, -torch.cat([k, step], dim=-2))
    layer.batch_select_indices(torch.tensor([1]))
    keys, _ = layer.update(step[:1], step[:1])
    assert torch.equal(keys, torch.cat([k[1:], step[:1], step[:1]], dim=-2)) and layer.get_seq_length() == 7
    big = torch.zeros(1, 3, 2 * MIN_CAPACITY, 4)
    keys, _ = layer.update(big, big)  # past the capacity: grows, keeps what was there
    before = torch.cat([k[1:], step[:1], step[:1]], dim=-2)
    assert keys.shape[-2] == 7 + 2 * MIN_CAPACITY and torch.equal(keys[..., :7, :], before)
    cache = GrowingCache([(k, -k)])
    assert cache.get_seq_length() == 5 and torch.equal(cache.layers[0].keys, k)
