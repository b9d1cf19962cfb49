"""Scoring a group's responses against one encoding of their shared prompt (``shared_prompt_logits``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from infra.embedded.models import build_micro  # noqa: E402
from infra.embedded.token_logprobs import (  # noqa: E402
    build_batch,
    logprobs_from_logits,
    response_logits,
    shared_prompt_logits,
)

PROMPTS = [[5, 6, 7, 8, 9, 10]] * 3 + [[11, 12, 13]] * 2 + [[4]] + [[5, 6, 7, 8, 9, 10]]
RESPONSES = [[20, 21, 22], [23], [24, 25, 26, 27], [28, 29], [], [30, 31], [32, 33]]


@pytest.fixture(scope="module")
def micro():
    model, tok = build_micro(0)
    return model.eval(), tok


def test_shared_prompt_logits_equal_whole_sequence_logits(micro):
    """Same logits at every response position, for runs of shared prompts, a one-token prompt and an empty
    response; a prompt that comes back after another is encoded again, in order."""
    model, tok = micro
    batch = build_batch(PROMPTS, RESPONSES, tok.pad_token_id)
    with torch.no_grad():
        whole = response_logits(model, batch, 0.7)
        shared = shared_prompt_logits(model, PROMPTS, RESPONSES, tok.pad_token_id, 0.7)
    assert shared.shape == whole.shape
    on = batch.response_mask.bool()
    assert torch.allclose(whole[on], shared[on], atol=1e-5)
    wrong = shared_prompt_logits(model, [p[1:] or p for p in PROMPTS], RESPONSES, tok.pad_token_id, 0.7)
    assert not torch.allclose(whole[on], wrong.detach()[on], atol=1e-3)  # the prompt's tokens matter


def test_shared_prompt_gradients_reach_the_prompt_encoding(micro):
    """The gradient of the response log-probs equals the whole-sequence one, prompt layers included."""
    model, tok = micro
    batch = build_batch(PROMPTS, RESPONSES, tok.pad_token_id)
    grads = []
    for fn in (
        lambda: response_logits(model, batch),
        lambda: shared_prompt_logits(model, PROMPTS, RESPONSES, tok.pad_token_id),
    ):
        model.zero_grad(set_to_none=True)
        (logprobs_from_logits(fn(), batch.response_ids) * batch.response_mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[1][name], atol=1e-5, rtol=1e-4), name


def test_shared_prompt_refuses_bad_input(micro):
    model, tok = micro
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        shared_prompt_logits(model, [[1], [2]], [[3]], tok.pad_token_id)
    with pytest.raises(ValueError, match="empty prompt"):
        shared_prompt_logits(model, [[]], [[3]], tok.pad_token_id)
