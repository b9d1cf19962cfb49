"""Stage 01 and 03 data prep, embedded profile: outputs, manifest, and gold passes the stage's own reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
        > 0.8
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
