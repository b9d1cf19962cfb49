"""Loaders parse each benchmark's public release format from the fixtures under tests/fixtures/eval."""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from pathlib import Path

import pytest

from eval.loaders import BadRecord, decode_lcb_tests, load

FIX = Path(__file__).parent / "fixtures" / "eval"


def test_ifeval_keeps_good_rows_and_counts_malformed():
    res = load("ifeval", FIX / "ifeval_input_data.jsonl")
    assert [i.id for i in res.items] == ["1000", "1001"]
    assert res.items[0].reference["kwargs"][1] == {"relation": "at least", "num_words": 300}
    assert res.dropped == 2 and any("invalid JSON" in r for r in res.reasons)


def test_ifbench_uses_ifeval_format():
    res = load("ifbench", FIX / "ifbench_test.jsonl")
    assert res.items[0].meta["prompt"].startswith("List three fruits")
    assert res.dropped == 0


def test_multichallenge_requires_final_user_turn():
    res = load("multichallenge", FIX / "multichallenge_questions.jsonl")
    assert [i.id for i in res.items] == ["17"] and res.dropped == 1
    item = res.items[0]
    assert [m["role"] for m in item.messages] == ["user", "assistant", "user"]
    assert item.meta["question_id"] == 17 and item.reference["pass_criteria"] == "YES"


def test_advancedif_parses_nested_rubrics():
    res = load("advancedif", FIX / "advancedif_sample.csv")
    assert len(res.items) == 1 and res.dropped == 1
    assert res.items[0].messages[0]["role"] == "system"
    assert len(res.items[0].reference["rubrics"]) == 2


def test_gpqa_shuffle_is_deterministic_and_answer_matches():
    first, second = (
        load("gpqa_diamond", FIX / "gpqa_diamond.csv"),
        load("gpqa_diamond", FIX / "gpqa_diamond.csv"),
    )
    assert first.dropped == 1 and len(first.items) == 2
    for a, b in zip(first.items, second.items, strict=True):
        assert a.messages == b.messages
        letter = a.reference["answer"]
        assert a.reference["choices"]["ABCD".index(letter)] in ("Photon", "+7")
        assert f"({letter})" in a.messages[0]["content"]


def test_aime_validates_integer_answers_and_reads_matharena_columns():
    res = load("aime25", FIX / "aime25.jsonl")
    assert [i.reference["answer"] for i in res.items] == ["70", "24"] and res.dropped == 1
    res26 = load("aime26", FIX / "aime26_matharena.jsonl")
    assert res26.items[0].id == "1" and res26.items[0].reference["answer"] == "21"


def test_livecodebench_decodes_compressed_private_tests_and_filters_dates():
    res = load("livecodebench_v6", FIX / "livecodebench_test6.jsonl")
    assert [i.id for i in res.items] == ["abc400_a", "3500"] and res.dropped == 1
    assert res.items[0].reference["private_tests"][0]["output"] == "6\n"
    assert res.items[1].reference["func_name"] == "twoSum"
    recent = load("livecodebench_v6", FIX / "livecodebench_test6.jsonl", date_from="2025-04-01")
    assert [i.id for i in recent.items] == ["abc400_a"]


def test_lcb_decoder_refuses_pickled_globals():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    buf = io.BytesIO()
    pickle.dump(Evil(), buf)
    blob = base64.b64encode(zlib.compress(buf.getvalue())).decode()
    with pytest.raises(BadRecord, match="refused"):
        decode_lcb_tests(blob)
    assert decode_lcb_tests(json.dumps([{"input": "1", "output": "1"}])) == [{"input": "1", "output": "1"}]


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load("ifeval", tmp_path / "nope.jsonl")


def test_arena_hard_v2_reads_both_categories_and_drops_incomplete_rows():
    res = load("arena_hard_v2_hp", FIX / "arena_hard_v2_question.jsonl")
    assert [(i.id, i.meta["category"]) for i in res.items] == [
        ("a1b2c3d4e5f60718", "hard_prompt"),
        ("0f1e2d3c4b5a6978", "creative_writing"),
    ]
    assert res.items[0].messages == [{"role": "user", "content": res.items[0].messages[0]["content"]}]
    assert (
        res.dropped == 2
        and any("prompt" in r for r in res.reasons)
        and any("category" in r for r in res.reasons)
    )
