"""The MiroVerse loader on a fixture in the release format: counts per drop reason, named malformed rows,
the records, the vision rule, the pinned-revision guard and the held-out split.

No network: the hub path replaces ``huggingface_hub.snapshot_download`` with a double that copies the
fixture's ``jsonl_sft`` file into ``local_dir`` (a boundary double for the gated hub, which tests cannot
reach) and records how it was called.
"""

from __future__ import annotations

import random
import runpy
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from data_prep.manifest import Manifest
from data_prep.miroverse import (
    SUBSETS,
    MiroVerseSource,
    boxed_answers,
    heldout_split,
    load_miroverse,
    question_key,
    vision_signal,
)
from infra.layering import ConfigError

FIXTURE = Path(__file__).parent / "fixtures" / "miroverse"
JSONL = FIXTURE / "jsonl_sft" / "MiroVerse-HotpotQA.jsonl"
PARQUET = FIXTURE / "parquet" / "MiroVerse-MegaScience" / "train" / "0000.parquet"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _load(*files: Path, **kw):
    return load_miroverse({"local_files": [str(f) for f in files]}, **kw)


def test_every_drop_reason_is_counted_and_rows_add_up() -> None:
    records, counts = _load(JSONL, PARQUET)
    assert counts.dropped_by_reason() == {
        "malformed": 7, "sub_agent_trace": 1, "vision_dependent": 6, "attached_file": 1, "duplicate": 2,
    }  # fmt: skip
    assert counts.rows == 21 and counts.kept == len(records) == 4
    assert dict(counts.malformed.counts) == {
        "invalid_json": 1, "no_messages": 2, "no_boxed_answer": 1, "not_an_object": 1, "no_question": 1,
        "bad_message": 1,
    }  # fmt: skip
    assert dict(counts.vision_signals) == {
        "image_attachment": 1, "image_marker": 1, "visual_reference": 2, "vqa_tool_call": 1, "image_url": 1,
    }  # fmt: skip
    assert dict(counts.kept_by_subset) == {"MiroVerse-HotpotQA": 3, "MiroVerse-MegaScience": 1}


def test_malformed_rows_are_named_by_file_and_line_or_row() -> None:
    _, counts = _load(JSONL, PARQUET)
    named = {e.split(": ")[0]: e.split(": ")[1].split(" ")[0] for e in counts.malformed.examples}
    assert named == {
        f"{JSONL}:5": "invalid_json",
        f"{JSONL}:6": "no_messages",
        f"{JSONL}:7": "no_boxed_answer",
        f"{JSONL}:15": "not_an_object",
        f"{JSONL}:16": "no_question",
        f"{PARQUET} row 3": "no_messages",
        f"{PARQUET} row 5": "bad_message",
    }


def test_records_hold_the_question_the_gold_and_its_aliases() -> None:
    records, _ = _load(JSONL, PARQUET)
    by_question = {r["question"][:20]: r for r in records}
    river = by_question["Which river flows th"]
    assert river["question"].endswith("was born?")  # the \boxed{} instruction is stripped
    # gold from the final turn, then the answer before the summarize prompt, then the duplicate's answer
    assert river["answers"] == ["Vltava", "the Vltava River", "Vltava River"]
    assert river["subset"] == "MiroVerse-HotpotQA" and river["source"] == "miromind-ai/MiroVerse-v0.1"
    meta = river["metadata"]
    assert meta["where"] == f"{JSONL}:1" and meta["traces"] == 2 and meta["tool_calls"] == 1
    assert meta["license"] == "cc-by-sa-4.0" and meta["trace_license"] == "cc-by-nc-4.0"
    bridge = by_question["On what date did the"]  # no split column: the subset comes from the file name
    assert bridge["subset"] == "MiroVerse-HotpotQA" and bridge["metadata"]["traces"] == 2
    assert bridge["answers"] == ["1931-05-03", "May 3, 1931", "3 May 1931"]  # duplicate from the Parquet
    flux = by_question["What is the SI unit "]
    assert flux["subset"] == "MiroVerse-MegaScience" and flux["answers"] == ["weber", "Weber (Wb)"]
    assert "this figure" in by_question["Which commission did"]["question"]  # a person, not a visual
    assert len({r["id"] for r in records}) == 4 and all(r["id"].startswith("miroverse-") for r in records)


def test_file_order_decides_which_duplicate_is_kept_but_not_the_ids() -> None:
    forward, _ = _load(JSONL, PARQUET)
    backward, counts = _load(PARQUET, JSONL)
    assert {r["id"] for r in forward} == {r["id"] for r in backward} and counts.dropped["duplicate"] == 2
    bridge = next(r for r in backward if r["question"].startswith("ON WHAT DATE"))
    assert bridge["subset"] == "MiroVerse-MegaScience" and bridge["answers"][0] == "3 May 1931"


@pytest.mark.parametrize(
    ("row", "question", "signal"),
    [
        ({"images": ["a.png"]}, "Which city is this?", "image_field"),
        ({}, "Where was the photo in the <image_1> taken?", "image_marker"),
        ({}, "Which painter made ![art](https://x.org/a.jpg)?", "image_marker"),
        ({}, "Name the species at https://x.org/b.webp please.", "image_url"),
        ({}, "What is written on the sign in the picture?", "visual_reference"),
        ({}, "Refer to the diagram and name the valve.", "visual_reference"),
        ({}, "Which team is shown in the photograph?", "visual_reference"),
        ({}, "Which year does the graph above peak?", "visual_reference"),
        ({}, "This public figure was born in which year?", None),
        ({}, "Which chart-topping single did this band release in 1994?", None),
        ({}, "Who produced the motion picture that won in 1998?", None),
        ({}, "Which river is on the map of 1850 Prague by Jüttner?", None),
    ],
)
def test_vision_rule(row: dict, question: str, signal: str | None) -> None:
    messages = [{"role": "user", "content": question}]
    assert vision_signal(row, messages, question) == signal


def test_an_image_part_in_a_user_turn_is_vision_dependent() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "Who is this?"}]
    messages = [{"role": "user", "content": parts}]
    assert vision_signal({}, messages, "Who is this?") == "multimodal_content"


def test_boxed_answers_balance_braces_and_question_key_ignores_case_and_punctuation() -> None:
    text = r"\boxed{a} then \boxed{\frac{1}{2}} and \boxed{ } \boxed{x"
    assert boxed_answers(text) == ["a", r"\frac{1}{2}"]
    assert question_key("  Who  WROTE “Dune”? ") == question_key("who wrote 'dune'")


def test_heldout_split_is_deterministic_disjoint_and_near_its_fraction() -> None:
    records = [{"id": f"miroverse-{i:016x}"} for i in range(20_000)]
    train, heldout = heldout_split(records)
    assert len(train) + len(heldout) == 20_000
    assert not {r["id"] for r in train} & {r["id"] for r in heldout}
    assert 0.09 < len(heldout) / 20_000 < 0.11
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    assert {r["id"] for r in heldout_split(shuffled)[1]} == {r["id"] for r in heldout}  # order-free
    subset = heldout_split(records[:500])[1]  # membership depends on the id alone
    assert {r["id"] for r in subset} == {r["id"] for r in heldout if int(r["id"][-16:], 16) < 500}
    assert {r["id"] for r in heldout_split(records, salt="other")[1]} != {r["id"] for r in heldout}
    assert heldout_split(records, fraction=0.0)[1] == [] and len(heldout_split(records, 0.5)[1]) > 9000
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\), got 1.0"):
        heldout_split(records, fraction=1.0)


def test_fixture_records_split_the_same_way_every_time() -> None:
    records, _ = _load(JSONL, PARQUET)
    first = heldout_split(records, fraction=0.5)
    again = heldout_split(_load(JSONL, PARQUET)[0], fraction=0.5)
    assert [r["id"] for r in first[1]] == [r["id"] for r in again[1]]
    assert len(first[0]) + len(first[1]) == len(records)


def test_production_refuses_an_unpinned_hub_revision() -> None:
    with pytest.raises(ConfigError, match=r"data\.source\.revision: .*40-hex commit .*got none"):
        load_miroverse({}, profile="production")
    with pytest.raises(ConfigError, match=r"stage\.miroverse\.revision: .*got 'main'"):
        load_miroverse({"revision": "main"}, profile="production", key="stage.miroverse")
    _load(JSONL, profile="production")  # local files need no revision


def test_config_rejects_unknown_keys_subsets_and_file_types() -> None:
    with pytest.raises(ValidationError, match="extra"):
        MiroVerseSource.model_validate({"hub": "x"})
    with pytest.raises(ValidationError, match="unknown subset"):
        MiroVerseSource(subsets=["MiroVerse-Nope"])
    with pytest.raises(ValidationError, match=r"\.jsonl or \.parquet"):
        MiroVerseSource(local_files=["rows.csv"])
    assert len(SUBSETS) == 12 and MiroVerseSource().hub_files()[0] == "jsonl_sft/MiroVerse-Voyager1.0.jsonl"


def test_missing_local_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.jsonl: no such MiroVerse file"):
        _load(tmp_path / "nope.jsonl")
    broken = tmp_path / "MiroVerse-WebDancer.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"MiroVerse-WebDancer\.parquet: not a readable Parquet file"):
        _load(broken)


def test_hub_download_at_a_pinned_commit_reads_the_release_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id: str, **kw) -> str:
        calls.append((repo_id, kw))
        dest = Path(kw["local_dir"])
        (dest / "jsonl_sft").mkdir(parents=True)
        shutil.copy(JSONL, dest / "jsonl_sft" / JSONL.name)
        return str(dest)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    manifest = Manifest("t")
    source = {"revision": COMMIT, "subsets": ["MiroVerse-HotpotQA"]}
    records, counts = load_miroverse(source, profile="production", dest=tmp_path / "hub", manifest=manifest)
    assert calls == [
        (
            "miromind-ai/MiroVerse-v0.1",
            {
                "repo_type": "dataset",
                "revision": COMMIT,
                "allow_patterns": ["jsonl_sft/MiroVerse-HotpotQA.jsonl"],
                "local_dir": tmp_path / "hub",
            },
        )
    ]
    assert counts.kept == len(records) == 3 and counts.rows == 16
    (entry,) = manifest.data["sources"]
    assert entry["revision"] == COMMIT and entry["pinned"] and entry["license"]["MiroVerse-HotpotQA"]
    (step,) = manifest.data["steps"]
    assert step["step"] == "miroverse_load" and step["count"] == 3 and step["dropped"]["malformed"] == 5
    with pytest.raises(ValueError, match=r"missing release file\(s\) jsonl_sft/MiroVerse-WebDancer\.jsonl"):
        load_miroverse({"revision": COMMIT, "subsets": ["MiroVerse-WebDancer"]}, dest=tmp_path / "h2")


def test_fixture_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    runpy.run_path(str(FIXTURE / "make_fixture.py"))["write"](tmp_path)
    assert (tmp_path / "jsonl_sft" / JSONL.name).read_bytes() == JSONL.read_bytes()
    regenerated = pq.read_table(tmp_path / PARQUET.relative_to(FIXTURE))
    assert regenerated.equals(pq.read_table(PARQUET))
    assert regenerated.column_names == ["messages", "split"]
