"""The embedded thread count changes speed, not numbers: 1 and 2 intra-op threads agree bit for bit.

``infra.embedded.runtime.default_threads`` uses both cores of a 2-core machine; a seed must still reproduce
on a 1-core machine (or with ``RUFUS_TORCH_THREADS=1``), so training steps and sampling are compared here.
"""

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
from infra.embedded.runtime import default_threads  # noqa: E402
from infra.embedded.sft import Encoded, collate, token_nll_sum  # noqa: E402
from infra.embedded.token_logprobs import build_batch, response_logprobs  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return micro_base(tmp_path_factory.mktemp("threads"))


def _train_and_sample(base: Path, threads: int) -> tuple[list[float], list[list[int]], torch.Tensor]:
    """Three AdamW steps (RL batch + packed SFT batch), then seeded sampling, at ``threads`` threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        model, tok = load_model(base), load_tokenizer(base)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        texts = ["What is 12*7?", "Name a river.", "Write three words about snow, then stop."] * 6
        prompts = [render_prompt_ids(tok, [{"role": "user", "content": t}]) for t in texts]
        responses = [p[-7:] * 20 for p in prompts]  # ~140-token responses: GEMMs of realistic widths
        samples = [
            Encoded(p + r, [0] * len(p) + [1] * len(r)) for p, r in zip(prompts, responses, strict=True)
        ]
        packs = [list(range(i, i + 3)) for i in range(0, len(samples), 3)]  # SFT's packed block-diagonal path
        losses = []
        for _ in range(3):
            batch = build_batch(prompts, responses, tok.pad_token_id)
            loss = -response_logprobs(model, batch).sum() / batch.response_mask.sum()
            nll, count = token_nll_sum(model, collate(samples, packs, tok.pad_token_id, torch.device("cpu")))
            loss = loss + nll / count
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
        gens = generate(
            model,
            tok,
            prompts,
            max_new_tokens=24,
            temperature=1.0,
            stop_token_ids=stop_token_ids(tok),
            seed=3,
        )
        params = torch.cat([p.detach().flatten() for p in model.parameters()])
        return losses, [g.token_ids for g in gens], params
    finally:
        torch.set_num_threads(saved)


def test_one_and_two_threads_give_identical_training_and_sampling(base):
    one, two = _train_and_sample(base, 1), _train_and_sample(base, 2)
    assert one[0] == two[0]  # losses, exactly
    assert one[1] == two[1]  # sampled tokens
    assert torch.equal(one[2], two[2])  # every parameter after three steps


def test_default_threads_honours_the_environment(monkeypatch):
    monkeypatch.setenv("RUFUS_TORCH_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.delenv("RUFUS_TORCH_THREADS")
    assert 1 <= default_threads() <= 2
