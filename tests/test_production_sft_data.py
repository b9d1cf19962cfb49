"""GLM-correct SFT masks under a GLM-4.5-style chat template, packed SFT tokens, and the handoff file steps.

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
from infra.production.handoff import carry_mtp, iteration_dir, seed_phase, verify_handoff
from infra.production.sft_data import glm_tokens_and_mask, pack, read_tokens, tokenize_file, tokens_path
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


def test_sft_rollout_fills_sample_from_packed_tokens(tmp_path: Path):
    bin_path = tmp_path / "train.tokens.bin"
    bin_path.write_bytes(pack([9, 9], [0, 1]).tobytes() + pack([1, 2, 3, 4, 5], [0, 0, 1, 0, 1]).tobytes())

    class S:
        metadata = {"id": "z", "offset": 2, "length": 5}

    s = fill_sft_sample(S(), bin_path, max_len=8)
    assert s.tokens == [1, 2, 3, 4, 5] and s.response_length == 3 and s.loss_mask == [1, 0, 1]
    with pytest.raises(ValueError, match="rollout-max-context-len"):
        fill_sft_sample(S(), bin_path, max_len=4)


def test_tokenized_rows_hold_no_tokens_and_cost_bytes_not_kilobytes(tok, tmp_path: Path):
    """Item 7: the row slime's Dataset keeps in memory is O(1) in the conversation's length."""
    long = " ".join(["two plus two"] * 300)
    sample = SFTSample(
        id="long",
        messages=[Message(role="user", content=long), Message(role="assistant", content=long, loss=1)],
    )
    src, dest = tmp_path / "train.jsonl", tmp_path / "train.tokens.jsonl"
    src.write_text(sample.model_dump_json() + "\n")
    assert tokenize_file(src, dest, tok)["kept"] == 1
    row = json.loads(dest.read_text())
    assert row["tools"] == [] and set(row["metadata"]) == {"id", "offset", "length"}
    ids, mask = read_tokens(tokens_path(dest), row["metadata"])
    assert (ids, mask) == glm_tokens_and_mask(sample, tok)
    old_row = {"metadata": {"token_ids": ids, "loss_mask": mask}}  # the previous format, for scale
    assert _deep_size(row) < 1000 < 20 * len(ids) < _deep_size(old_row)


def _deep_size(obj) -> int:
    import sys

    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(_deep_size(k) + _deep_size(v) for k, v in obj.items())
    if isinstance(obj, list):
        return sys.getsizeof(obj) + sum(_deep_size(v) for v in obj)
    return sys.getsizeof(obj)


def test_export_carries_the_input_mtp_layer_only(tmp_path: Path):
    import torch
    from safetensors.torch import load_file, save_file

    origin, out = tmp_path / "in", tmp_path / "out"
    for d, names in (
        (origin, ["model.layers.0.w", "model.layers.46.eh_proj.weight"]),
        (out, ["model.layers.0.w"]),
    ):
        d.mkdir()
        save_file({n: torch.ones(2) for n in names}, str(d / "model.safetensors"))
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {n: "model.safetensors" for n in names}})
        )
    assert carry_mtp(out, origin, 46) == ["model.layers.46.eh_proj.weight"]
    assert "model.layers.46.eh_proj.weight" in load_file(str(out / "model-mtp.safetensors"))
    (origin / "config.json").write_text("{}")
    (out / "config.json").write_text("{}")
    assert verify_handoff(out, origin) == []


def test_seed_phase_starts_from_previous_phase_and_then_resumes_its_own(tmp_path: Path):
    p0, p1 = tmp_path / "torch_dist", tmp_path / "torch_dist_phase1"
    (p0 / "iter_0000022").mkdir(parents=True)
    (p0 / "latest_checkpointed_iteration.txt").write_text("22\n")
    (p0 / "rollout").mkdir()
    (p0 / "rollout" / "global_dataset_state_dict_22.pt").write_text("s")
    assert seed_phase(p0, p1) == 22
    assert iteration_dir(p1).resolve() == (p0 / "iter_0000022").resolve()
    assert (p1 / "rollout" / "global_dataset_state_dict_22.pt").read_text() == "s"
    (p1 / "iter_0000029").mkdir()
    (p1 / "latest_checkpointed_iteration.txt").write_text("29\n")  # phase 1 progress after a restart
    assert seed_phase(p0, p1) is None and iteration_dir(p1).name == "iter_0000029"


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
