"""Batched sampling of the embedded backend: logprobs, stop tokens, seeds, budgets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base  # noqa: E402

from infra.embedded.chat_format import render_prompt_ids, stop_token_ids  # noqa: E402
from infra.embedded.generation import generate  # noqa: E402
from infra.embedded.models import load_model, load_tokenizer  # noqa: E402
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
