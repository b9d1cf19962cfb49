"""End-to-end SFT mix on local fixtures of three source formats, with a small offline tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from data_prep.io import MalformedCounter, read_jsonl, write_jsonl
from data_prep.length import apply_length
from data_prep.schema import Message, SFTSample
from data_prep.sft_mix import build_sft_mix
from data_prep.sources import SFT_SOURCES, get_source, iter_source_rows, local_source
from infra.layering import ConfigError

FIX = Path(__file__).parent / "fixtures" / "dataprep"
# A GLM-shaped template: tool schemas in the system turn, <think> wrappers, tool calls and observations.
TEMPLATE = (
    "[gMASK]<sop>{% if tools %}<|system|>\n# Tools\n{{ tools | tojson }}{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|observation|>\n"
    "<tool_response>{{ m.content }}</tool_response>{% else %}<|{{ m.role }}|>\n"
    "{% if m.role == 'assistant' %}<think>{{ m.reasoning_content or '' }}</think>{% endif %}"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    texts = [p.read_text() for p in FIX.glob("*.jsonl")] * 5
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", chat_template=TEMPLATE)


def _sources():
    return [
        get_source("hermes_reasoning_tool_use").with_local_files(FIX / "sharegpt_hermes.jsonl"),
        get_source("Nemotron-Post-Training-Dataset-v1").with_local_files(
            FIX / "openai_tools.jsonl", category="Math"
        ),
        local_source(FIX / "prompt_response.jsonl", fmt="prompt_response", category="STEM"),
    ]


def test_build_sft_mix_end_to_end(tmp_path, tokenizer):
    out = tmp_path / "mix"
    manifest = build_sft_mix(
        _sources(), out, tokenizer, benchmarks={"ifeval": FIX / "ifeval_input_data.jsonl"}
    )
    rows = [SFTSample(**r) for _, r in read_jsonl(out / "sft.jsonl")]
    by_id = {r.id: r for r in rows}
    assert len(rows) == 7
    h1 = by_id["hermes_reasoning_tool_use/h1#1"]
    assert [m.loss for m in h1.messages] == [0, 0, 0, 0, 0, 0, 1] and h1.messages[2].reasoning is None
    assert h1.tools and h1.tools[0]["function"]["name"] == "get_weather" and h1.num_tokens > 0
    o1 = by_id["Nemotron-Post-Training-Dataset-v1/o1#0"]
    assert (
        o1.messages[0].role == "user" and len(o1.messages[1].tool_calls) == 2
    )  # control system line removed
    assert (
        by_id["Nemotron-Post-Training-Dataset-v1/o3_answer_tags#0"].messages[-1].content
        == "The answer is 144."
    )
    assert manifest["malformed"]["by_reason"] == {
        "bad_tool_call_json": 1,
        "invalid_json": 1,
        "missing_prompt_response": 1,
        "no_supervised_reply": 2,
        "non_text_content": 1,
    }
    assert [s["count"] for s in manifest["steps"]] == [11, 6, 7, 7, 7, 7]
    assert (
        manifest["sources"][0]["revision"] == "unpinned" and manifest["sources"][1]["license"] == "CC BY 4.0"
    )
    assert manifest["outputs"]["sft.jsonl"]["sha256"] and len(manifest["script_sha256"]) == 64
    assert manifest["decontamination"]["removed"] == 0
    md = (out / "mixture.md").read_text()
    assert (
        "| General Agent | 3 |" in md and "loss tokens" in md and (out / "mixture.png").stat().st_size > 1000
    )
    loss_total = sum(r["loss"] for r in manifest["mixture"])
    assert 0 < loss_total < sum(r.num_tokens for r in rows)


def test_decontamination_and_length_cap_in_builder(tmp_path, tokenizer):
    prompt = json.loads((FIX / "ifeval_input_data.jsonl").read_text().splitlines()[0])["prompt"]
    src = tmp_path / "leaky.jsonl"
    write_jsonl(
        src,
        [
            {"id": "leak", "input": prompt, "output": "ok"},
            {"id": "fine", "input": "hi", "output": "hello"},
            {"id": "long", "input": "word " * 400, "output": "done"},
        ],
    )
    manifest = build_sft_mix(
        [local_source(src, fmt="prompt_response")],
        tmp_path / "o",
        tokenizer,
        benchmarks={"ifeval": FIX / "ifeval_input_data.jsonl"},
        max_tokens=300,
    )
    assert manifest["decontamination"]["removed_ids"] == ["leaky/leak#0"]
    assert manifest["malformed"]["by_reason"] == {"over_max_tokens": 1}
    assert [json.loads(x)["id"] for x in (tmp_path / "o" / "sft.jsonl").read_text().splitlines()] == [
        "leaky/fine#0"
    ]


def test_length_marks_long_bucket_and_counts_loss_tokens(tokenizer):
    sample = SFTSample(
        id="x",
        messages=[
            Message(role="user", content="a " * 50),
            Message(role="assistant", content="b " * 30, loss=1),
        ],
    )
    measured, loss = apply_length(sample, tokenizer, max_tokens=10_000, long_min=20)
    assert measured.long_bucket and measured.num_tokens > loss > 0
    assert apply_length(sample, tokenizer, max_tokens=10)[0] is None


def test_registry_has_the_17_sources_and_refuses_unpinned_hub_loads():
    assert len(SFT_SOURCES) == 17 and len({s.hub_id for s in SFT_SOURCES}) == 17
    assert "research use only" in get_source("AM-Thinking-v1-Distilled").license
    assert {c.category for s in SFT_SOURCES for c in s.subsets} == {
        "General Agent",
        "General Chat",
        "STEM",
        "Math",
        "Code",
        "Coding Agent",
    }
    with pytest.raises(ValueError, match="no pinned revision"):
        next(iter_source_rows(get_source("Toucan-1.5M"), MalformedCounter()))
    with pytest.raises(KeyError, match="unknown SFT source"):
        get_source("nope")


@pytest.mark.parametrize(
    "content", [b"", b"\n\n", b'{"unrelated": 1}\n'], ids=["empty", "blank", "wrong_format"]
)
def test_a_benchmark_file_without_items_stops_the_mix_naming_it(tmp_path, content):
    bench = tmp_path / "ifeval.jsonl"
    bench.write_bytes(content)
    src = tmp_path / "rows.jsonl"
    write_jsonl(src, [{"id": "fine", "input": "hi", "output": "hello"}])
    with pytest.raises(
        ConfigError, match=r"data\.benchmarks: benchmark ifeval: no items in .*ifeval\.jsonl"
    ) as err:
        build_sft_mix(
            [local_source(src, fmt="prompt_response")], tmp_path / "o", benchmarks={"ifeval": bench}
        )
    assert "\n" not in str(err.value)
    assert not (tmp_path / "o" / "sft.jsonl").exists()
