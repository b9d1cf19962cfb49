"""GLM-correct SFT masks under a GLM-4.5-style chat template, plus the handoff and FP8-layer file steps.

The real GLM tokenizer is not available offline; the test builds a word-level tokenizer with GLM's
special tokens (``infra.embedded.tokenizer_build.GLM_SPECIAL_TOKENS``) and a template written for this
test that renders the GLM-4.5 markup (``[gMASK]<sop>``, role markers, ``<think>`` blocks, no end-of-turn
token).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.schema import Message, SFTSample
from infra.embedded.tokenizer_build import GLM_SPECIAL_TOKENS
from infra.production.handoff import iteration_dir, verify_handoff
from infra.production.sft_data import glm_tokens_and_mask
from infra.production.sft_rollout import fill_sft_sample

TEMPLATE = (
    "[gMASK] <sop> {% for m in messages %}"
    "{% if m.role == 'assistant' %}<|assistant|> <think> {{ m.reasoning_content or '' }} </think> "
    "{{ m.content }} "
    "{% elif m.role == 'tool' %}<|observation|> {{ m.content }} "
    "{% else %}<|{{ m.role }}|> {{ m.content }} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "hi what is two plus two four it is sure ok again run ls files a b".split()
    vocab = {w: i for i, w in enumerate(GLM_SPECIAL_TOKENS + sorted(set(words)) + ["[UNK]"])}
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=t, unk_token="[UNK]", additional_special_tokens=GLM_SPECIAL_TOKENS
    )
    fast.chat_template = TEMPLATE
    return fast


def test_mask_covers_exactly_assistant_output_and_stop(tok):
    s = SFTSample(
        id="x",
        messages=[
            Message(role="user", content="what is two plus two"),
            Message(role="assistant", content="four", reasoning="two plus two", loss=1),
            Message(role="user", content="again"),
            Message(role="assistant", content="it is four", reasoning="", loss=1),
        ],
    )
    ids, mask = glm_tokens_and_mask(s, tok)
    text = tok.convert_ids_to_tokens(ids)
    trained = [t for t, m in zip(text, mask, strict=False) if m]
    assert trained == [
        "<think>",
        "two",
        "plus",
        "two",
        "</think>",
        "four",
        "<|user|>",
        "<think>",
        "</think>",
        "it",
        "is",
        "four",
        "<|endoftext|>",
    ]
    assert "<|assistant|>" not in trained and text[-1] == "<|endoftext|>"


def test_unsupervised_turn_and_observation_are_masked(tok):
    s = SFTSample(
        id="y",
        messages=[
            Message(role="user", content="run ls"),
            Message(role="assistant", content="ok", loss=0),
            Message(role="tool", content="a b files"),
            Message(role="assistant", content="sure", loss=1),
        ],
    )
    ids, mask = glm_tokens_and_mask(s, tok)
    trained = [t for t, m in zip(tok.convert_ids_to_tokens(ids), mask, strict=False) if m]
    assert trained == ["<think>", "</think>", "sure", "<|endoftext|>"]


def test_sft_rollout_fills_sample():
    class S:
        metadata = {"id": "z", "token_ids": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 0, 1]}

    s = fill_sft_sample(S(), max_len=8)
    assert s.tokens == [1, 2, 3, 4, 5] and s.response_length == 3 and s.loss_mask == [1, 0, 1]
    with pytest.raises(ValueError, match="rollout-max-context-len"):
        fill_sft_sample(S(), max_len=4)


def test_handoff_verify_and_iteration(tmp_path: Path):
    origin, out = tmp_path / "in", tmp_path / "out"
    for d in (origin, out):
        d.mkdir()
        (d / "tokenizer.json").write_text("{}")
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "1", "b": "1"}}))
    (origin / "config.json").write_text(json.dumps({"hidden_size": 4096, "vocab_size": 151552}))
    (out / "config.json").write_text(json.dumps({"hidden_size": 4096, "vocab_size": 151552}))
    assert verify_handoff(out, origin) == []
    (out / "tokenizer.json").write_text('{"changed": 1}')
    (out / "config.json").write_text(json.dumps({"hidden_size": 2048, "quantization_config": {}}))
    assert len(verify_handoff(out, origin)) == 4  # hidden_size, vocab_size, quantization_config, tokenizer
    td = tmp_path / "td"
    (td / "iter_0000033").mkdir(parents=True)
    (td / "latest_checkpointed_iteration.txt").write_text("33\n")
    assert iteration_dir(td).name == "iter_0000033"
    with pytest.raises(FileNotFoundError):
        iteration_dir(td, 34)


def test_fp8_layers_restores_leading_layers(tmp_path: Path):
    import torch
    from safetensors.torch import load_file, save_file

    from infra.production.fp8_layers import restore_bf16_layers

    bf16, fp8 = tmp_path / "bf16", tmp_path / "fp8"
    bf16.mkdir(), fp8.mkdir()
    w = {
        f"model.layers.{i}.mlp.up_proj.weight": torch.full((2, 2), float(i), dtype=torch.bfloat16)
        for i in range(4)
    }
    save_file(w, str(bf16 / "model.safetensors"))
    q = {k: v.to(torch.float8_e4m3fn) for k, v in w.items()}
    q.update({k.replace(".weight", ".weight_scale_inv"): torch.ones(1) for k in w})
    save_file(q, str(fp8 / "model.safetensors"))
    (fp8 / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: "model.safetensors" for k in q}})
    )
    (fp8 / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fp8"}}))
    mods = restore_bf16_layers(bf16, fp8, 3)
    out = load_file(str(fp8 / "model.safetensors"))
    assert out["model.layers.0.mlp.up_proj.weight"].dtype == torch.bfloat16
    assert out["model.layers.3.mlp.up_proj.weight"].dtype == torch.float8_e4m3fn
    assert (
        "model.layers.2.mlp.up_proj.weight_scale_inv" not in out
        and "model.layers.3.mlp.up_proj.weight_scale_inv" in out
    )
    assert len(mods) == 3
    assert (
        json.loads((fp8 / "config.json").read_text())["quantization_config"]["modules_to_not_convert"] == mods
    )
