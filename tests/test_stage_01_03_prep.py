"""Stage 01 and 03 data prep, embedded profile: outputs, manifest, and gold passes the stage's own reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.schema import PromptRow
from infra import recipe
from infra.prep import PrepContext
from rewards import RewardRequest, safe_score

ROOT = Path(__file__).resolve().parent.parent


def _stage(name: str, monkeypatch):
    folder = ROOT / "stages" / name
    if not (folder / "README.md").is_file():  # the README is written separately; resolution needs the rest
        monkeypatch.setattr(recipe, "STAGE_FILES", ("data_prep.py", "reward.py", "launch.yaml"))
    return recipe.resolve_stage(folder, "embedded")


@pytest.mark.parametrize(
    ("name", "families"),
    [
        ("01_reasoning_rl", {"math", "puzzle", "science"}),
        ("03_if_rl", {"if_multi_constraint", "if_multiturn"}),
    ],
)
def test_embedded_prepare(name, families, tmp_path, monkeypatch):
    stage = _stage(name, monkeypatch)
    ctx = PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="embedded")
    summary = stage.module("data_prep").prepare(ctx)
    rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert (
        summary["train"]
        == len(rows)
        > 0.6
        * sum(
            stage.data_params.model_dump().get("families", {}).values()
            or [stage.data_params.multi_constraint]
        )
    )
    assert {r["metadata"]["family"] for r in rows} == families
    metrics = [*stage.config.eval.targets, *stage.config.eval.guardrails]
    assert sorted(p.stem for p in (tmp_path / "heldout").glob("*.jsonl")) == sorted(metrics)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    steps = {s["step"]: s for s in manifest["steps"]}
    assert any(s.get("skipped") for s in steps.values()) and manifest["decontamination"]["scanned"] > 0
    assert set(manifest["outputs"]) >= {"train.jsonl"}
    reward = stage.module("reward").reward
    held_prompts = {
        json.dumps(json.loads(x)["prompt"])
        for m in metrics
        for x in (tmp_path / "heldout" / f"{m}.jsonl").read_text().splitlines()
    }
    assert not any(json.dumps(r["prompt"]) in held_prompts for r in rows)
    # wrong answers score 0 under the stage's own reward
    for r in rows[:20]:
        res = safe_score(
            reward,
            RewardRequest(
                prompt=r["prompt"],
                response="<think>x</think>\n\\boxed{qqq}, Q",
                label=r["label"],
                metadata=r["metadata"],
            ),
        )
        assert res.score == 0.0 and not res.aborted


def test_gold_passes_stage_reward_for_every_row(monkeypatch):
    """Regenerate the training tasks (with references) and score every reference with the stage reward."""
    from data_prep.tiny_tasks import generate, instructions

    for name in ("01_reasoning_rl", "03_if_rl"):
        stage = _stage(name, monkeypatch)
        p = stage.data_params
        if name == "01_reasoning_rl":
            tasks = [t for fam, n in p.families.items() for t in generate(fam, n, 0)]
        else:
            tasks = instructions.multi_constraint(p.multi_constraint, 0, "train", p.constraints_per_prompt)
            tasks += instructions.multi_turn(p.multi_turn, 0)
        reward = stage.module("reward").reward
        for t in tasks:
            res = reward(
                RewardRequest(prompt=t.prompt, response=t.response(), label=t.label, metadata=t.metadata)
            )
            assert res.score == 1.0, (t.id, res)


def test_params_reject_unknown_keys(monkeypatch):
    stage = _stage("01_reasoning_rl", monkeypatch)
    params_cls = stage.module("data_prep").Params
    with pytest.raises(Exception, match="families"):
        params_cls.model_validate({"families": {"poetry": 3}})
    with pytest.raises(Exception, match="extra"):
        params_cls.model_validate({"families": {"math": 3}, "bogus": 1})


def test_production_loader_reads_local_copies(tmp_path, monkeypatch):
    stage = _stage("01_reasoning_rl", monkeypatch)
    mod = stage.module("data_prep")
    src = tmp_path / "crawl.jsonl"
    src.write_text(
        "\n".join(
            [
                json.dumps({"problem": "Find the remainder when 17 is divided by 5.", "solution": "2"}),
                json.dumps(
                    {"problem": "Which gas do plants absorb in photosynthesis reaction?", "solution": "CO2"}
                ),
                "not json",
                json.dumps({"problem": "", "solution": "1"}),
            ]
        )
    )
    from data_prep.io import MalformedCounter

    malformed = MalformedCounter()
    source = mod.RLSource(
        name="crawl",
        hub_id="org/crawl",
        question_key="problem",
        answer_key="solution",
        local_files=[str(src)],
    )
    rows = mod.source_rows(source, malformed)
    assert [r.metadata["family"] for r in rows] == ["math", "science"]
    assert malformed.total == 2


def test_embedded_learnability_samples_the_input_checkpoint(tmp_path, monkeypatch):
    """01's learnability pass samples the stage's input checkpoint; a random model never answers, so the
    paper's zero-pass rule drops every prompt and the manifest says why and which weights were sampled."""
    from data_prep import filters
    from data_prep.manifest import Manifest
    from data_prep.rl_stage import checkpoint_completions, checkpoint_filter
    from infra.embedded.models import materialize

    micro = materialize("micro", tmp_path / "micro")
    stage = _stage("01_reasoning_rl", monkeypatch)
    stage.data_params.families = {"math": 4, "puzzle": 4, "science": 4}
    ctx = PrepContext(stage=stage, out_dir=tmp_path / "out", seed=0, profile="embedded", tokenizer_dir=micro)
    survived = r"no training prompt survived the filters .*learnability → 0.*step 'learnability' removed"
    with pytest.raises(ValueError, match=survived):
        stage.module("data_prep").prepare(ctx)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    step = {s["step"]: s for s in manifest["steps"]}["learnability"]
    before = {s["step"]: s for s in manifest["steps"]}["correctness"]["count"]
    assert not step.get("skipped") and step["samples"] == 8 and step["temperature"] == 1.0
    assert step["count"] == 0 and step["dropped_zero_pass"] == before == sum(step["pass_histogram"].values())
    assert len(step["policy"]["weights_sha256"]) == 64

    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Hi"}]]
    first = checkpoint_completions(micro, prompts, 3, 8, seed=5)
    assert [len(g) for g in first] == [3, 3] and first == checkpoint_completions(micro, prompts, 3, 8, seed=5)
    rows = [
        PromptRow(id=f"p{i}", prompt=p, label="5", metadata={"family": "math"}) for i, p in enumerate(prompts)
    ]
    kept = checkpoint_filter(
        rows, micro, filters.BandRule("keep_unsolved", 2, drop_above=0.8), _exact, Manifest("t"), "band",
        max_new_tokens=4, seed=1,
    )  # fmt: skip
    assert [r.id for r in kept] == ["p0", "p1"]


def _exact(req):
    from rewards import RewardResult

    return RewardResult(score=float(req.response.strip() == req.label))


def test_run_data_prep_records_final_paths_and_reuses_its_output(tmp_path, monkeypatch):
    from infra.prep import PREP_RECORD, run_data_prep

    stage = _stage("03_if_rl", monkeypatch)
    data_dir = tmp_path / "data"
    run_data_prep(stage, data_dir, seed=0, tokenizer_dir=None, input_hash=None)
    for name in ("manifest.json", PREP_RECORD):
        text = (data_dir / name).read_text()
        assert "data.tmp" not in text and f"{data_dir}/" in text
    assert not (tmp_path / "data.tmp").exists()
    stamp = (data_dir / "train.jsonl").stat().st_mtime_ns
    run_data_prep(stage, data_dir, seed=0, tokenizer_dir=None, input_hash=None)
    assert (data_dir / "train.jsonl").stat().st_mtime_ns == stamp
