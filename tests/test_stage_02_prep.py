"""Stage 02 (Coding RL) data prep: every filter on planted rows, the warm-up screen, production source specs.

Runs the real sandbox (bubblewrap) and a real micro checkpoint for the warm-up samples. No hub access:
production sources are read from local JSONL files written here, in the hub datasets' own field layout.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from data_prep.tiny_tasks import heldout_tasks
from infra import recipe
from infra.embedded.models import materialize
from infra.prep import PrepContext
from rewards.code_reward import score_batch
from rewards.contract import RewardRequest

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "stages" / "02_coding_rl"
SMALL = {"evolvecoder": 20, "nemotron": 12, "dolci": 8, "adr": 4}


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> Path:
    return materialize("micro", tmp_path_factory.mktemp("base") / "micro")


def _stage(profile: str, **data):
    stage = recipe.resolve_stage(STAGE, profile)
    dp = stage.module("data_prep")
    stage.data_params = dp.Params.model_validate({**stage.data_params.model_dump(), **data})
    return stage, dp


def _write(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _planted_adr(tmp_path: Path, heldout_n: int, generated: set[str]) -> str:
    """ADR-layout rows: 2 good, 1 duplicate, 1 held-out leak, 1 wrong reference, 1 empty payload, 1 bad line.

    The leaking statement is a held-out one the generated sources do not already hold (dedup would win).
    """
    held = heldout_tasks("code_pass1", heldout_n, 0)
    leak = next(
        t for t in held if t.metadata["modality"] == "io" and t.prompt[-1]["content"] not in generated
    )
    code = leak.answer.removeprefix("```python\n").removesuffix("\n```")
    add = {
        "inputs": ["1 2\n", "5 7\n"],
        "outputs": ["3\n", "12\n"],
        "solution": "a, b = map(int, input().split())\nprint(a + b)",
    }
    return _write(
        tmp_path / "adr.jsonl",
        [
            {"question": "Read two integers a and b on one line and print a + b.", **add},
            {
                "question": "Print the word hello.",
                "inputs": ["\n"],
                "outputs": ["hello\n"],
                "solution": "print('hello')",
            },
            {"question": "  READ two integers A and B on one line\n and print a + b. ", **add},  # duplicate
            {"question": "  " + leak.prompt[-1]["content"].upper(), **leak.label, "solution": code},  # leak
            {
                "question": "Read x and print x squared.",
                "inputs": ["3\n"],
                "outputs": ["9\n"],
                "solution": "print(int(input()) + 1)",
            },
            {"question": "Read nothing and print nothing.", "inputs": [], "outputs": []},
            "{not json",
        ],
    )


def test_embedded_prepare_filters_and_warmup(micro, tmp_path):
    stage, dp = _stage("embedded", sources=SMALL, heldout_per_metric=24)
    generated = {p.statement for p in dp.load_candidates(stage.data_params, "embedded", 0)}
    stage.data_params.specs["adr"].local_files = [_planted_adr(tmp_path, 24, generated)]
    out = tmp_path / "out"
    summary = dp.prepare(
        PrepContext(stage=stage, out_dir=out, seed=0, profile="embedded", tokenizer_dir=micro)
    )
    rows = _rows(out / "train.jsonl")
    manifest = json.loads((out / "manifest.json").read_text())
    steps = {s["step"]: s for s in manifest["steps"]}
    ids = {r["id"] for r in rows}

    assert summary["train"] == len(rows) == steps["final"]["count"] > 20
    assert steps["loaded"]["per_source"] == {**SMALL, "adr": 6} and manifest["malformed"]["total"] == 1
    assert steps["schema"]["dropped_by_reason"] == {"bad_inputs": 1}
    assert steps["dedup"]["dropped"] >= 1 and "adr-2" not in ids and "adr-0" in ids
    leaks = manifest["decontamination"]["leaks"]
    assert steps["lcb_leak"]["by_reason"].get("prefix_hash", 0) >= 1 and "adr-3" not in ids
    assert (
        any(e["id"] == "adr-3" for e in leaks)
        and manifest["decontamination"]["against"] == "heldout/code_pass1"
    )
    assert steps["reference_check"]["dropped_by_reason"] == {"wrong_answer": 1} and "adr-4" not in ids
    assert steps["teacher_solvability"]["skipped"] is True
    warm = steps["drop_all_pass"]
    assert warm["samples"] == 4 and warm["max_new_tokens"] == stage.config.rl.rollout.max_response_tokens
    assert sum(warm["pass_histogram"].values()) == steps["reference_check"]["count"]
    assert warm["kept"] == warm["count"] == len(rows) and len(warm["policy"]["weights_sha256"]) == 64
    assert sorted(p.stem for p in (out / "heldout").glob("*.jsonl")) == ["code_pass1", "math_acc"]

    for r in rows:
        (user,) = r["prompt"]  # the embedded profile drops the system turn; launch.yaml says why
        assert user["role"] == "user"
        assert r["metadata"]["reward"] == "code" and r["metadata"]["modality"] in ("fn", "io")
        assert ("tests" in r["label"]) == (r["metadata"]["modality"] == "fn")
        assert ("fn_name" in r["metadata"]) == ("fn_name" in r["label"])
    # every kept row's reference passes the stage's own reward in the sandbox
    candidates = {p.id: p for p in dp.load_candidates(stage.data_params, "embedded", 0)}
    first = next(iter(candidates.values()))
    sample = dataclasses.replace(first, modality="fn" if "tests" in first.label else "io")
    system, user = sample.row(dp.SYSTEM_PROMPTS).prompt  # the production default keeps the system turn
    assert system["role"] == "system" and "```python" in system["content"] and user["role"] == "user"
    results = score_batch(
        [
            RewardRequest(prompt=r["prompt"], response=candidates[r["id"]].reference, label=r["label"])
            for r in rows
        ]
    )
    assert all(res.score == 1.0 for res in results)


def test_warmup_screen_drops_all_pass_and_keeps_zero_pass():
    """Scored in one sandbox batch: 4/4 is dropped as too easy, 3/4 and 0/4 stay."""
    stage, dp = _stage("embedded", sources={"evolvecoder": 3})
    specs = dp.source_specs(stage.data_params)
    probs = dp.generated_problems("evolvecoder", specs["evolvecoder"], 3, 0)
    for p in probs:
        p.modality = "fn"
    rows = [p.row(stage.data_params.system_prompts) for p in probs]
    wrong = "```python\ndef nope(x):\n    return None\n```"
    groups = [[p.reference] * 4 for p in probs[:1]] + [
        [probs[1].reference] * 3 + [wrong],
        [wrong, "no code"] * 2,
    ]
    report, stats = dp.screen(rows, groups, dp.filters.coding_drop_all_pass(4))
    assert [r.id for r in report.kept] == [rows[1].id, rows[2].id]
    assert report.dropped == {"too_easy": [rows[0].id]}
    assert stats == {"pass_histogram": {0: 1, 3: 1, 4: 1}, "no_code_block": 2, "kept_zero_pass": 1}
    # The embedded scale's option: zero-pass problems go too, named as such.
    report, stats = dp.screen(rows, groups, dp.filters.coding_drop_all_pass(4, drop_zero=True))
    assert [r.id for r in report.kept] == [rows[1].id]
    assert report.dropped == {"too_easy": [rows[0].id], "zero_pass": [rows[2].id]}
    assert stats["kept_zero_pass"] == 0


def test_production_specs_refuse_unpinned_revisions(tmp_path, monkeypatch):
    """The pin check runs before any hub access (datasets.load_dataset is replaced by a tripwire)."""
    import datasets

    stage, dp = _stage("production")
    specs = dp.source_specs(stage.data_params)
    assert {n: s.hub_id for n, s in specs.items()}[
        "nemotron"
    ] == "nvidia/Nemotron-RL-coding-competitive_coding"
    assert set(specs) == {"evolvecoder", "nemotron", "dolci", "adr"}
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("hub accessed"))
    ctx = PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="production")
    with pytest.raises(ValueError, match=r"4 Coding RL source\(s\).*evolvecoder.*nemotron.*dolci.*adr"):
        dp.prepare(ctx)
    pinned = recipe.resolve_stage(STAGE, "production", sets={"data.specs.adr.revision": "abc"})
    specs = dp.source_specs(pinned.data_params)
    assert specs["adr"].revision == "abc" and specs["adr"].hub_id == "icip-cas/ADR"
    with pytest.raises(ValueError, match=r"3 Coding RL source\(s\).*evolvecoder.*nemotron.*dolci"):
        dp.check_pinned(specs, allow_unpinned=False)
    dp.check_pinned(specs, allow_unpinned=True)
    with pytest.raises(ValueError, match=r"sources \['leetcode'\] have no entry under specs"):
        dp.Params.model_validate({**stage.data_params.model_dump(), "sources": {"leetcode": 5}})


def test_production_prepare_from_local_hub_layouts(tmp_path):
    """Hub field layouts parse; a problem sharing 60-grams with a LiveCodeBench statement is dropped."""
    lcb_text = (
        "You are given a string s of lowercase letters and an integer k. Find the length of the longest "
        "substring of s in which every letter appears at least k times, and print it on one line."
    )
    lcb = _write(tmp_path / "lcb.jsonl", [{"question_id": "abc301_x", "question_content": lcb_text}])
    sq = {"tests": ["assert sq(3) == 9", "assert sq(0) == 0"], "fn_name": "sq"}
    files = {
        "evolvecoder": [
            {"question": "Write sq(x) returning x squared.", **sq},
            {"question": "Preface. " + lcb_text[40:], **sq},  # shares >= 5 character 60-grams
        ],
        "nemotron": [
            {
                "responses_create_params": {
                    "input": [{"role": "user", "content": "Print the sum of two ints."}]
                },
                "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}},
            }
        ],
        "dolci": [
            {
                "prompt": "Write neg(x).",
                "ground_truth": '["assert neg(1) == -1"]',
                "solution": "def neg(x):\n    return -x",
            },
            {
                "prompt": "Write bad(x).",
                "ground_truth": ["assert bad(1) == 2"],
                "solution": "def bad(x):\n    return x",
            },
        ],
        "adr": [
            {
                "question": "Echo a line.",
                "inputs": ["hi\n"],
                "outputs": ["hi\n"],
                "solution": "print(input())",
            }
        ],
    }
    stage, dp = _stage("production", lcb_files=[lcb], heldout_per_metric=4)
    for name, rows in files.items():
        stage.data_params.specs[name].local_files = [_write(tmp_path / f"{name}.jsonl", rows)]
    summary = dp.prepare(PrepContext(stage=stage, out_dir=tmp_path / "out", seed=0, profile="production"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    steps = {s["step"]: s for s in manifest["steps"]}
    assert steps["lcb_leak"]["by_reason"] == {"char_ngrams": 1} and manifest["decontamination"]["items"] == 1
    assert steps["reference_check"]["dropped_by_reason"] == {"wrong_answer": 1}
    assert steps["reference_check"]["unchecked_no_reference"] == 2  # evolvecoder + nemotron carry none
    assert steps["teacher_solvability"]["skipped"] and steps["drop_all_pass"]["skipped"]
    assert summary["sources"] == {"evolvecoder": 1, "nemotron": 1, "dolci": 1, "adr": 1}
    assert summary["modalities"] == {"fn": 2, "io": 2} and steps["final"]["table7"]["nemotron"] == 9393
    assert all(len(s["local_sha256"]) == 1 for s in manifest["sources"])
