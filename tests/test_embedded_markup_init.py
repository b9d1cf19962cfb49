"""A base without the GLM markup: each added markup token starts at the mean of its spelling's embeddings.

Uses a small Llama built from a config and a byte-level BPE tokenizer trained here (no GLM tokens), so it
runs offline in a second; the SmolLM2 path goes through the same function (``test_embedded_smollm2.py``).
"""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from infra.embedded.models import _with_glm_markup
from infra.embedded.tokenizer_build import GLM_SPECIAL_TOKENS

CORPUS = ["<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value></tool_call>", "hello world"] * 20


def _plain_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@pytest.mark.parametrize("tied", [True, False])
def test_markup_rows_start_at_their_spelling(tied):
    tok = _plain_tokenizer()
    assert not any(t in tok.get_vocab() for t in GLM_SPECIAL_TOKENS)
    spelled = {t: tok(t, add_special_tokens=False)["input_ids"] for t in GLM_SPECIAL_TOKENS}
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_out = model.get_output_embeddings().weight.detach().clone()

    model, tok = _with_glm_markup(model, tok, seed=0)

    new_in, new_out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert new_in.shape[0] >= len(tok)
    rows = {}
    for t, ids in spelled.items():
        new_id = tok.convert_tokens_to_ids(t)
        assert torch.allclose(new_in[new_id], old_in[ids].mean(0))
        assert torch.allclose(new_out[new_id], (old_in if tied else old_out)[ids].mean(0))
        rows[t] = new_in[new_id]
    # the tags the model must tell apart start apart (transformers' mean_resizing alone: ~1e-9 apart)
    for a, b in [("<arg_key>", "</arg_key>"), ("<arg_key>", "<arg_value>"), ("</arg_value>", "</think>")]:
        assert (rows[a] - rows[b]).norm() > 1e-3 * rows[a].norm()
    assert torch.equal(new_in[: old_in.shape[0]], old_in)  # the base's own rows are untouched
