"""The RLHF preference loaders (Arena Human Preference, HelpSteer3, HH-RLHF) on fixtures in each release's
public format, the validity filter's drop reasons, transcript parsing, deterministic ids, the prompt rows,
and the Table 13 report.

Two doubles, both at boundaries these tests cannot reach: ``datasets.load_dataset`` for the hub path (no
network here) records its arguments and serves fixture rows; ``fake_rm`` stands in for the served
Skywork reward model (a GPU service) with the same ``score(prompts, responses) -> list[float]`` interface.
The fixtures are written by ``tests/fixtures/preference/make_fixture.py``; each row's comment there names
the drop reason expected here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from data_prep.manifest import Manifest
from data_prep.preference_sources import (
    DROP_REASONS,
    PreferenceCounts,
    PreferencePair,
    PreferenceSource,
    RecordDropped,
    SourceError,
    filter_rows,
    is_repetitive,
    load_preference_source,
    pair_id,
    parse_transcript,
    to_prompt_rows,
    validity_reason,
)
from data_prep.preference_table import PAPER_TABLE13, build_table13, render_markdown, write_table13
from infra.layering import ConfigError

FIX = Path(__file__).parent / "fixtures" / "preference"
ARENA_100K = FIX / "arena-100k/data/arena-00000-of-00001.parquet"
ARENA_140K = FIX / "arena-140k/data/train-00000-of-00001.parquet"
HELPSTEER3 = FIX / "HelpSteer3/preference/train.jsonl.gz"
HH_HELPFUL = FIX / "hh-rlhf/helpful-base/train.jsonl.gz"
HH_HARMLESS = FIX / "hh-rlhf/harmless-base/train.jsonl.gz"
FULL_HH = FIX / "full-hh-rlhf/data/train-00000-of-00001.parquet"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _load(dataset: str, *files: Path, **kw):
    return load_preference_source({"dataset": dataset, "local_files": [str(f) for f in files]}, **kw)


def _dropped(counts: PreferenceCounts) -> dict[str, int]:
    return {reason: n for reason, n in counts.as_dict()["dropped"].items() if n}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# ---- loaders on the release formats ----------------------------------------------------------------------
def test_arena_100k_counts_every_drop_reason_and_keeps_the_winner_side() -> None:
    pairs, counts = _load("arena", ARENA_100K)
    assert (counts.original, counts.valid, len(pairs)) == (13, 3, 3)
    assert _dropped(counts) == {
        "malformed": 3, "no_preference": 2, "no_user_turn": 1, "missing_response": 1, "empty_response": 1,
        "identical_responses": 1, "repetitive_response": 1,
    }  # fmt: skip
    assert dict(counts.malformed_kinds) == {"bad_label": 1, "bad_messages": 1, "sides_disagree": 1}
    assert counts.original == counts.valid + sum(counts.dropped.values())
    by_q = {p.id: p for p in pairs}
    q1 = by_q[pair_id("arena", "q1")]  # model_a won
    assert (q1.prompt, q1.chosen, q1.rejected) == ([user("What is 2+2?")], "It is 4.", "Five?")
    assert q1.metadata["model_chosen"] == "model-x" and q1.metadata["context_differs"] is False
    q2 = by_q[pair_id("arena", "q2")]  # model_b won a two-turn battle: b's own history is the prompt
    assert q2.prompt == [user("Name a color."), assistant("Red."), user("Another one?")]
    assert (q2.chosen, q2.rejected) == ("Yellow, warm.", "Green.")
    assert q2.metadata["context_differs"] is True and q2.metadata["turns"] == 2
    assert by_q[pair_id("arena", "q13")].chosen == "Entropy measures disor"  # cut mid-word alone: kept


def test_arena_ties_are_no_preference_and_named_by_record() -> None:
    _, counts = _load("arena", ARENA_100K)
    ties = counts.examples["no_preference"]
    assert [e.split(" ")[0] for e in ties] == [pair_id("arena", "q3"), pair_id("arena", "q4")]
    assert "winner=tie (bothbad)" in ties[1]


def test_arena_140k_content_parts_and_both_bad() -> None:
    pairs, counts = _load("arena", ARENA_140K)
    assert (counts.original, counts.valid, _dropped(counts)) == (3, 2, {"no_preference": 1})
    first, image = pairs
    assert first.id == pair_id("arena", "uuid-1")
    assert (first.chosen, first.rejected) == ("It is 55.\n(n(n+1)/2)", "It is 50.")
    assert image.prompt == [user("What animal is this?")]  # the image part carries no text


def test_helpsteer3_preference_direction_ties_and_unreadable_lines() -> None:
    pairs, counts = _load("helpsteer3", HELPSTEER3)
    assert (counts.original, counts.valid) == (12, 2)  # 10 rows + 2 unreadable lines
    assert _dropped(counts) == {
        "malformed": 6, "no_preference": 1, "no_user_turn": 1, "missing_response": 1, "empty_response": 1,
    }  # fmt: skip
    kinds = ("bad_label", "bad_messages", "bad_pair", "bad_type", "invalid_json", "not_an_object")
    assert dict(counts.malformed_kinds) == dict.fromkeys(kinds, 1)
    neg, pos = pairs
    assert (neg.chosen, neg.rejected, neg.metadata["overall_preference"]) == (
        "A function calling itself.",
        "Loops.",
        -2,
    )
    assert pos.chosen.startswith("Day 1: Colosseum") and pos.rejected == "Day 1: walk."
    assert pos.prompt == [user("Plan a trip."), assistant("Where to?"), user("Rome, 3 days.")]
    lines = [e for e in counts.examples["malformed"] if e.startswith(str(HELPSTEER3))]
    assert [e.split(" ")[0] for e in lines] == [f"{HELPSTEER3}:4", f"{HELPSTEER3}:5"]


def test_hh_rlhf_anthropic_transcripts_over_two_data_dirs() -> None:
    pairs, counts = _load("hh_rlhf", HH_HELPFUL, HH_HARMLESS)
    assert (counts.original, counts.valid) == (10, 3)
    assert _dropped(counts) == {
        "malformed": 3, "no_user_turn": 1, "missing_response": 1, "empty_response": 1,
        "identical_responses": 1,
    }  # fmt: skip
    assert dict(counts.malformed_kinds) == {"bad_transcript": 1, "bad_type": 1, "sides_disagree": 1}
    multi = pairs[1]
    assert multi.prompt == [
        user("I need a gift idea."), assistant("For whom?"), user("My sister, she likes books."),
    ]  # fmt: skip
    assert multi.chosen == "A novel by her favourite author.\nOr a bookstore voucher."
    assert multi.rejected == "Socks." and multi.metadata["format"] == "anthropic"
    assert pairs[2].metadata["origin"] == "harmless-base/train.jsonl.gz#0"


def test_hh_rlhf_dahoas_full_release() -> None:
    pairs, counts = _load("hh_rlhf", FULL_HH)
    assert (counts.original, counts.valid) == (6, 2)
    assert _dropped(counts) == {
        "malformed": 1, "missing_response": 1, "empty_response": 1, "repetitive_response": 1,
    }  # fmt: skip
    assert pairs[0].prompt == [user("What's a good name for a dog?")]
    assert (pairs[0].chosen, pairs[0].rejected) == ("Rex.", "Dogs do not need names.")
    assert pairs[1].prompt == [user("Recommend a movie."), assistant("What genre?"), user("Comedy.")]


# ---- transcript parsing and the validity filter ----------------------------------------------------------
def test_parse_transcript_multi_turn_and_its_failures() -> None:
    text = "Human: Hi there\n\nAssistant: Hello.\nHow can I help?\n\nHuman: Two\nlines\n\nAssistant:"
    assert parse_transcript(text) == [
        user("Hi there"), assistant("Hello.\nHow can I help?"), user("Two\nlines"), assistant(""),
    ]  # fmt: skip
    for bad, kind in (
        ("junk\n\nHuman: hi", "bad_transcript"),
        ("no markers", "bad_transcript"),
        (7, "bad_type"),
    ):
        with pytest.raises(RecordDropped) as err:
            parse_transcript(bad)
        assert err.value.reason == "malformed" and err.value.detail.startswith(kind)


@pytest.mark.parametrize(
    ("prompt", "chosen", "rejected", "reason"),
    [
        ([user("q")], "a good answer", "a bad answer", None),
        ([user("q")], "cut mid-wor", "another answer", None),
        ("q", "a", "b", "malformed"),
        ([assistant("hi")], "a", "b", "no_user_turn"),
        ([user("q"), assistant("a"), user("  ")], "a", "b", "no_user_turn"),
        ([user("q")], None, "b", "missing_response"),
        ([user("q")], "a", " \n\t", "empty_response"),
        ([user("q")], ["a"], "b", "malformed"),
        ([user("q")], "Same  answer.\n", "Same answer.", "identical_responses"),
        ([user("q")], "fine", "no " * 20, "repetitive_response"),
    ],
)
def test_validity_reason(prompt, chosen, rejected, reason) -> None:
    got = validity_reason(prompt, chosen, rejected)
    assert (got[0] if got else None) == reason


def test_is_repetitive_flags_loops_not_prose_tables_or_code() -> None:
    assert is_repetitive("Sure. " + "I am sorry. " * 10)
    assert is_repetitive("ha " * 16)
    assert is_repetitive(
        "Answer:\n" + "\n".join(["A long line that repeats itself over and over again."] * 7)
    )
    assert is_repetitive(" ".join(f"w{i}" for i in range(30)) + " the end" * 16)  # a tail loop over half
    assert not is_repetitive("ok ok ok")  # too short to judge
    prose = "The fox jumps over the lazy dog. It was very very happy to be out in the warm sun with friends."
    table = "| k | v |\n|---|---|\n" + "\n".join(f"| row {i} | 0 |" for i in range(12))
    code = "def f(x):\n    if x:\n        return 1\n    return 0\n}\n}\n}\nprint(f(1))"
    assert not any(is_repetitive(t) for t in (prose, table, code))


def test_malformed_records_are_counted_never_raised() -> None:
    robot, number = [{"role": "robot", "content": "x"}], [{"role": "user", "content": 1}]
    junk = [None, [1, 2], "text", 3.5, {}, {"winner": "model_a", "conversation_a": 5, "conversation_b": []},
            {"winner": "model_b", "conversation_a": robot, "conversation_b": [], "context": robot},
            {"winner": "model_a", "conversation_a": number, "conversation_b": [], "overall_preference": 1},
            {"winner": "model_a", "conversation_a": "[not json", "conversation_b": "[]", "chosen": 4,
             "rejected": "x"}]  # fmt: skip
    # hh_rlhf: four dicts carry no chosen transcript (a missing response); everything else is malformed
    expected = {"arena": {"malformed": 9}, "helpsteer3": {"malformed": 9},
                "hh_rlhf": {"malformed": 5, "missing_response": 4}}  # fmt: skip
    for dataset, dropped in expected.items():
        counts = PreferenceCounts(dataset)
        kept = filter_rows(dataset, (("mem", i, r) for i, r in enumerate(junk)), counts)
        assert kept == [] and counts.original == len(junk) and counts.valid == 0
        assert dict(counts.dropped) == dropped


# ---- ids, prompt rows, config, manifest, hub path --------------------------------------------------------
def test_ids_are_deterministic_unique_and_prompt_rows_carry_no_label() -> None:
    first, _ = _load("helpsteer3", HELPSTEER3)
    again, _ = _load("helpsteer3", HELPSTEER3)
    assert [p.id for p in first] == [p.id for p in again]
    assert first[0].id == pair_id("helpsteer3", "preference/train.jsonl.gz#0")
    pairs = _load("arena", ARENA_100K)[0] + _load("hh_rlhf", FULL_HH)[0] + first
    assert len({p.id for p in pairs}) == len(pairs)
    battle = {"question_id": "q", "winner": "model_a", "conversation_a": [user("q"), assistant("a")],
              "conversation_b": [user("q"), assistant("b")]}  # fmt: skip
    twice = filter_rows("arena", [("f", 0, battle), ("f", 1, dict(battle))], PreferenceCounts("arena"))
    assert twice[0].id == pair_id("arena", "q") and twice[1].id == pair_id("arena", "q@f#1")
    rows = to_prompt_rows(first)
    assert [r.id for r in rows] == [p.id for p in first]
    assert all(r.label is None and r.tools == [] for r in rows)
    assert rows[1].metadata == {"source": "helpsteer3", "pair_id": first[1].id}
    assert rows[1].prompt == first[1].prompt and rows[1].prompt[-1]["role"] == "user"


def test_pair_model_rejects_a_prompt_not_ending_with_user() -> None:
    with pytest.raises(ValidationError, match="does not end with a user turn"):
        PreferencePair(id="x", source="arena", prompt=[user("q"), assistant("a")], chosen="a", rejected="b")


def test_source_config_validation_and_defaults() -> None:
    src = PreferenceSource(dataset="helpsteer3")
    assert (src.hub_id, src.config_name, src.split) == ("nvidia/HelpSteer3", "preference", "train")
    assert PreferenceSource(dataset="hh_rlhf").hub_id == "Dahoas/full-hh-rlhf"
    assert PreferenceSource(dataset="hh_rlhf", hub_id="Anthropic/hh-rlhf").config_name is None
    bad_configs = ({"dataset": "arena", "data_dirs": ["helpful-base"]},
                   {"dataset": "hh_rlhf", "data_dirs": ["x"]},
                   {"dataset": "arena", "local_files": ["a.csv"]}, {"dataset": "arena", "extra": 1},
                   {"dataset": "shp"})  # fmt: skip
    for bad in bad_configs:
        with pytest.raises(ValidationError):
            PreferenceSource.model_validate(bad)


def test_production_needs_a_pinned_revision_and_missing_files_fail_loudly(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"rlhf\.sources\.arena\.revision: .*lmarena-ai"):
        load_preference_source({"dataset": "arena"}, key="rlhf.sources.arena")
    with pytest.raises(SourceError, match="nope.parquet: no such arena file"):
        _load("arena", tmp_path / "nope.parquet")


def test_hub_path_streams_each_data_dir_at_the_revision(monkeypatch) -> None:
    import datasets

    calls = []
    good = {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"}
    rows = {
        "helpful-base": [good],
        "harmless-base": [{"chosen": "\n\nHuman: d\n\nAssistant: e", "rejected": None}],
    }

    def fake_load_dataset(path, **kw):  # the hub boundary: records the call, serves fixture rows
        calls.append((path, kw))
        return iter(rows[kw["data_dir"]])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    src = {"dataset": "hh_rlhf", "hub_id": "Anthropic/hh-rlhf", "revision": COMMIT,
           "data_dirs": ["helpful-base", "harmless-base"], "split": "test"}  # fmt: skip
    manifest = Manifest("test", code_files=[Path(__file__)])
    pairs, counts = load_preference_source(src, manifest=manifest)
    assert [c[1]["data_dir"] for c in calls] == ["helpful-base", "harmless-base"]
    assert all(c[0] == "Anthropic/hh-rlhf" and c[1]["revision"] == COMMIT and c[1]["split"] == "test"
               and c[1]["streaming"] for c in calls)  # fmt: skip
    assert [p.metadata["origin"] for p in pairs] == ["helpful-base/test#0"]
    assert counts.dropped["missing_response"] == 1
    source, step = manifest.data["sources"][0], manifest.data["steps"][0]
    assert (source["revision"], source["pinned"], source["data_dirs"]) == (
        COMMIT,
        True,
        ["helpful-base", "harmless-base"],
    )
    assert (step["step"], step["count"], step["original"]) == ("preference_hh_rlhf", 1, 2)
    assert set(step["dropped"]) == set(DROP_REASONS)


# ---- Table 13 --------------------------------------------------------------------------------------------
def fake_rm(prompts: list[list[dict]], responses: list[str]) -> list[float]:
    """Stands in for the served reward model: score = response length / 10 - prompt turns."""
    assert len(prompts) == len(responses) and all(p[-1]["role"] == "user" for p in prompts)
    return [len(r) / 10 - len(p) for p, r in zip(prompts, responses, strict=True)]


def _fixture_sets() -> dict[str, tuple[int, list[PreferencePair]]]:
    loaded = {"arena": _load("arena", ARENA_100K), "helpsteer3": _load("helpsteer3", HELPSTEER3),
              "hh_rlhf": _load("hh_rlhf", FULL_HH)}  # fmt: skip
    return {name: (counts.original, pairs) for name, (pairs, counts) in loaded.items()}


def test_table13_with_a_fake_reward_model(tmp_path) -> None:
    sets = _fixture_sets()
    calls = []

    def rm(prompts, responses):
        calls.append(len(responses))
        return fake_rm(prompts, responses)

    rows = build_table13(sets, score=rm, count_tokens=lambda t: len(t.split()), batch_size=2)
    assert calls == [2, 1, 2, 1, 2, 2, 2, 2]  # 3 arena pairs in batches of 2, chosen then rejected, ...
    arena = rows[0]
    pairs = sets["arena"][1]
    expect_chosen = sum(len(p.chosen) / 10 - len(p.prompt) for p in pairs) / 3
    assert (arena.original, arena.valid, arena.scored, arena.score_status) == (13, 3, 3, "scored")
    assert math.isclose(arena.avg_chosen_score, expect_chosen)
    assert math.isclose(arena.avg_chosen_tokens, sum(len(p.chosen.split()) for p in pairs) / 3)
    md_path, json_path = write_table13(rows, tmp_path, drops={"arena": {"no_preference": 2}})
    data = json.loads(json_path.read_text())
    assert data["ours"][0]["avg_rejected_score"] == pytest.approx(arena.avg_rejected_score)
    assert data["paper"] == PAPER_TABLE13 and data["drops"] == {"arena": {"no_preference": 2}}
    md = md_path.read_text()
    ours, paper = md.split("## Paper")
    assert f"| Arena Human Preference | 13 | 3 | {arena.avg_chosen_score:,.2f} |" in ours
    assert "| H-RLHF | 112,052 | 75,815 | -4.23 | -8.41 | 78.8 | 72.9 |" in paper
    assert "copied, not computed here" in paper and "84,402" not in ours


def test_table13_without_a_scorer_or_counter_reads_dash_and_null(tmp_path) -> None:
    rows = build_table13(_fixture_sets())
    _, json_path = write_table13(rows, tmp_path)
    ours = json.loads(json_path.read_text())["ours"]
    for row in ours:
        assert row["avg_chosen_score"] is None and row["avg_rejected_tokens"] is None
        assert row["score_status"] == "not scored"
    line = next(x for x in render_markdown(rows).splitlines() if x.startswith("| HelpSteer3 | 12 |"))
    assert line == "| HelpSteer3 | 12 | 2 | – | – | – | – |"


def test_table13_scoring_failures_are_aborted_or_unscored_never_zero() -> None:
    sets = {"hh_rlhf": _fixture_sets()["hh_rlhf"]}

    def down(prompts, responses):
        raise ConnectionError("reward model unreachable")

    row = build_table13(sets, score=down)[0]
    assert row.avg_chosen_score is None and row.score_status.startswith("aborted: ConnectionError")
    row = build_table13(sets, score=lambda p, r: [1.0])[0]  # wrong number of scores for a batch of 2
    assert row.avg_chosen_score is None and row.score_status.startswith("aborted: ValueError")
    nan_first = iter([[float("nan"), 3.0], [1.0, 1.0]])
    row = build_table13(sets, score=lambda p, r: next(nan_first))[0]
    assert (row.scored, row.unscored, row.avg_chosen_score, row.avg_rejected_score) == (1, 1, 3.0, 1.0)
