"""Batched sampling of the embedded backend: logprobs, stop tokens, seeds, budgets, the KV cache."""

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
from infra.embedded.chat_format import render_prompt_ids, stop_token_ids  # noqa: E402
from infra.embedded.generation import generate  # noqa: E402
from infra.embedded.kv_cache import MIN_CAPACITY, GrowingCache, GrowingLayer  # noqa: E402
from infra.embedded.models import load_model, load_tokenizer  # noqa: E402
from infra.embedded.prefix_cache import PrefixKVCache  # noqa: E402
from infra.embedded.token_logprobs import build_batch, response_logprobs  # noqa: E402


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    torch.set_num_threads(1)
    base = micro_base(tmp_path_factory.mktemp("gen"))
    return load_model(base).eval(), load_tokenizer(base)


def prompts(tok) -> list[list[int]]:
    texts = ["hi", "What is 2+2? Think first.", "x", "Write a long story about a river and a mountain."]
    return [render_prompt_ids(tok, [{"role": "user", "content": t}]) for t in texts]


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_logprobs_equal_teacher_forced_forward(micro, temperature, top_p):
    model, tok = micro
    ps = prompts(tok)
    gens = generate(model, tok, ps, max_new_tokens=12, temperature=temperature, top_p=top_p, seed=5)
    assert [len(g.token_ids) for g in gens] == [12] * 4 and all(g.finish_reason == "length" for g in gens)
    batch = build_batch(ps, [g.token_ids for g in gens], tok.pad_token_id)
    with torch.no_grad():
        forward = response_logprobs(model, batch, temperature)
    for i, g in enumerate(gens):
        torch.testing.assert_close(
            forward[i, : len(g.token_ids)], torch.tensor(g.logprobs), atol=2e-5, rtol=0
        )


def test_seed_makes_sampling_reproducible(micro):
    model, tok = micro
    a = generate(model, tok, prompts(tok), max_new_tokens=8, temperature=1.0, seed=11)
    b = generate(model, tok, prompts(tok), max_new_tokens=8, temperature=1.0, seed=11)
    c = generate(model, tok, prompts(tok), max_new_tokens=8, temperature=1.0, seed=12)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_stop_tokens_end_samples_with_stop_reason(micro):
    model, tok = micro
    ps = prompts(tok)
    greedy = generate(model, tok, ps, max_new_tokens=6, temperature=0.0)
    stop = greedy[0].token_ids[2]  # make the third greedy token of prompt 0 a stop token
    out = generate(model, tok, ps, max_new_tokens=6, temperature=0.0, stop_token_ids=[stop])
    assert out[0].finish_reason == "stop" and out[0].token_ids[-1] == stop
    assert out[0].token_ids == greedy[0].token_ids[: out[0].token_ids.index(stop) + 1]
    assert len(out[0].token_ids) == len(out[0].logprobs) <= 3
    assert stop_token_ids(tok) == [
        tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|user|>", "<|observation|>")
    ]


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
