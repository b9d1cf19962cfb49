"""``sft.lean_forward``: the same supervised NLL and gradients as the whole-vocabulary forward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from infra.embedded.models import build_micro  # noqa: E402
from infra.embedded.sft import Encoded, _plain_causal, collate, token_nll_sum  # noqa: E402

SAMPLES = [
    Encoded([5, 6, 7, 8, 9, 10, 11], [0, 0, 0, 1, 1, 1, 1]),
    Encoded([12, 13, 14, 15, 16, 17, 18], [0, 0, 1, 1, 0, 1, 1]),
    Encoded([19, 20, 21, 22], [0, 1, 1, 1]),
]


@pytest.fixture(scope="module")
def micro():
    model, tok = build_micro(0)
    return model.train(), tok


def _loss_and_grads(model, batch, lean):
    model.zero_grad(set_to_none=True)
    s, n = token_nll_sum(model, batch, lean)
    s.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return float(s.detach()), n, grads


@pytest.mark.parametrize(
    "packs",
    [[[0], [1]], [[0, 2], [1]], [[2], [0]]],
    ids=["one-sample-rows (causal path)", "packed (block-diagonal mask)", "padded row"],
)
def test_lean_forward_gives_the_whole_forward_loss_and_gradients(micro, packs):
    model, tok = micro
    batch = collate(SAMPLES, packs, tok.pad_token_id, torch.device("cpu"))
    full, n_full, g_full = _loss_and_grads(model, batch, False)
    lean, n_lean, g_lean = _loss_and_grads(model, batch, True)
    assert n_full == n_lean and full == pytest.approx(lean, rel=1e-5)
    assert g_full.keys() == g_lean.keys()
    for k, g in g_full.items():
        assert torch.allclose(g, g_lean[k], atol=1e-6, rtol=1e-4), k


def test_only_unpadded_single_sample_rows_take_the_plain_causal_mask():
    def mask(packs):
        return collate(SAMPLES, packs, 0, torch.device("cpu"))["attention_mask"]

    assert _plain_causal(mask([[0], [1]]))
    assert not _plain_causal(mask([[0, 2]]))  # two samples in a row: block-diagonal
    assert not _plain_causal(mask([[2], [0]]))  # a shorter row is padded
