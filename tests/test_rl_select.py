"""RL checkpoint selection on a validation split (``eval.select_by: validation``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import metrics_without_timing, micro_base, toy_job, weights  # noqa: E402

from data_prep.tiny_tasks import write_heldout  # noqa: E402
from data_prep.tiny_tasks.rl_prep import prompt_text, write_stage_validation  # noqa: E402
from infra.config import StageConfig  # noqa: E402
from infra.embedded import checkpointing as ckpt  # noqa: E402
from infra.embedded import rl as rl_mod  # noqa: E402
from infra.layering import ConfigError  # noqa: E402
from infra.production.cluster import ClusterProfile  # noqa: E402
from infra.production.plan import render_stage  # noqa: E402
from infra.recipe import find_stage_folder, resolve_stage  # noqa: E402

SELECTION_KEYS = ("validation_score", "selected_step")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("rl_select"))


def selecting_job(stage_dir: Path, base: Path, select: bool, **extra):
    """A 5-step toy RL job; with ``select`` it scores a validation copy of its held-out set every 2 steps."""
    job = toy_job("toy_rl", stage_dir, base, **extra)
    job.stage.config.rl.rollout.num_rollouts = 5
    if select:
        ev = job.stage.config.eval
        ev.select_by, ev.validation_interval, ev.validation_samples = "validation", 2, 2
        job.validation_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(job.heldout_dir / "toy_a.jsonl", job.validation_dir / "toy_a.jsonl")
    return job


def _final_resume_weights(job) -> dict[str, torch.Tensor]:
    return torch.load(ckpt.latest_checkpoint(job.checkpoints_dir) / "state.pt", weights_only=False)["model"]


def test_selection_trains_the_same_weights_and_exports_the_best_scored_step(tmp_path, base):
    plain = selecting_job(tmp_path / "plain", base, select=False)
    rl_mod.train_rl(plain)
    job = selecting_job(tmp_path / "select", base, select=True)
    result = rl_mod.train_rl(job)
    rows = metrics_without_timing(job.metrics_path)
    scored = {r["step"]: r["validation_score"] for r in rows if "validation_score" in r}
    assert sorted(scored) == [2, 4, 5]
    # scoring never touches the training RNG: every training metric and the final weights are the plain run's
    assert [{k: v for k, v in r.items() if k not in SELECTION_KEYS} for r in rows] == metrics_without_timing(
        plain.metrics_path
    )
    final, plain_final = _final_resume_weights(job), _final_resume_weights(plain)
    assert all(torch.equal(final[k], plain_final[k]) for k in final)
    best = max(scored, key=lambda s: (scored[s], -s))  # the first step reaching the best score
    info = ckpt.read_export_info(job.export_dir)
    assert result.selected_step == info["selected_step"] == best == rows[-1]["selected_step"]
    assert info["summary"]["validation_score"] == scored[best]
    assert 0.0 <= info["summary"]["initial_validation_score"] <= 1.0
    exported = weights(job.export_dir)
    assert all(torch.equal(exported[k], t) for k, t in weights(job.checkpoints_dir / ckpt.SELECTED).items())
    if best != 5:
        assert any(not torch.equal(exported[k], final[k]) for k in exported)


def test_selection_resumes_after_a_crash_to_the_same_export(tmp_path, base, monkeypatch):
    ref = selecting_job(tmp_path / "ref", base, select=True)
    rl_mod.train_rl(ref)
    job = selecting_job(tmp_path / "crash", base, select=True, checkpoint_every=3)
    real_step = rl_mod.RLTrainer.step

    def crashing(self, step):
        if step == 5:  # step 4 was scored (and checkpointed with its selection state), step 5 not yet
            raise KeyboardInterrupt("simulated kill")
        return real_step(self, step)

    monkeypatch.setattr(rl_mod.RLTrainer, "step", crashing)
    with pytest.raises(KeyboardInterrupt):
        rl_mod.train_rl(job)
    monkeypatch.setattr(rl_mod.RLTrainer, "step", real_step)
    rl_mod.train_rl(job)
    assert metrics_without_timing(job.metrics_path) == metrics_without_timing(ref.metrics_path)
    assert ckpt.read_export_info(job.export_dir) == ckpt.read_export_info(ref.export_dir)
    a, b = weights(ref.export_dir), weights(job.export_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_missing_validation_set_is_a_config_error_naming_the_file(tmp_path, base):
    job = selecting_job(tmp_path / "run", base, select=True)
    (job.validation_dir / "toy_a.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"validation/toy_a\.jsonl: no validation set for target 'toy_a'"):
        rl_mod.train_rl(job)


def test_validation_set_leaves_out_every_heldout_prompt(tmp_path):
    heldout = {"code_pass1": write_heldout("code_pass1", 96, 0, tmp_path / "heldout")}
    paths, dropped = write_stage_validation(["code_pass1"], 96, 0, tmp_path / "validation", heldout)
    held = {prompt_text(json.loads(line)) for line in heldout["code_pass1"].read_text().splitlines()}
    val = [json.loads(line) for line in paths["code_pass1"].read_text().splitlines()]
    assert len(val) + dropped["code_pass1"] == 96 and len(val) > 80
    assert not held & {prompt_text(r) for r in val}
    # a held-out set that contains validation prompts (planted) makes them leave the validation set
    planted = tmp_path / "planted" / "code_pass1.jsonl"
    planted.parent.mkdir()
    planted.write_text("".join(json.dumps(r) + "\n" for r in val[:5]))
    paths2, dropped2 = write_stage_validation(["code_pass1"], 96, 0, tmp_path / "v2", {"code_pass1": planted})
    val2 = {prompt_text(json.loads(line)) for line in paths2["code_pass1"].read_text().splitlines()}
    assert dropped2["code_pass1"] >= 5 and not val2 & {prompt_text(r) for r in val[:5]}


def test_validation_selection_is_rl_only_and_embedded_only():
    stage = resolve_stage(find_stage_folder(Path("stages/02_coding_rl")), "embedded")
    assert stage.config.eval.select_by == "validation"  # the tiny Coding RL stage selects
    data = stage.config.model_dump(mode="json")
    sft = resolve_stage(find_stage_folder(Path("stages/00_sft")), "embedded").config.model_dump(mode="json")
    sft["eval"]["select_by"] = "validation"
    with pytest.raises(ValueError, match="eval.select_by 'validation' picks an RL checkpoint"):
        StageConfig.model_validate(sft)
    prod = resolve_stage(find_stage_folder(Path("stages/02_coding_rl")), "production").config
    assert prod.eval.select_by == "last"  # production carries the last checkpoint
    forced = prod.model_copy(update={"eval": StageConfig.model_validate(data).eval})
    with pytest.raises(ConfigError, match="embedded trainer's checkpoint rule"):
        render_stage("02_coding_rl", forced, "/ckpt/in", ClusterProfile(), "run", 0)


def test_fixed_heldout_cells_need_the_train_split(tmp_path):
    """07's chat prompts: another seed of the held-out split only repeats its 20 cells; `train` does not."""
    # the stage's data prep registers its metric on import
    resolve_stage(find_stage_folder(Path("stages/07_rlhf")), "embedded").module("data_prep")
    heldout = {"rlhf_rule_score": write_heldout("rlhf_rule_score", 96, 0, tmp_path / "heldout")}
    with pytest.raises(ConfigError, match="every validation prompt of 'rlhf_rule_score' is a held-out"):
        write_stage_validation(["rlhf_rule_score"], 96, 0, tmp_path / "v", heldout)
    paths, dropped = write_stage_validation(["rlhf_rule_score"], 96, 0, tmp_path / "v", heldout, "train")
    held = {prompt_text(json.loads(line)) for line in heldout["rlhf_rule_score"].read_text().splitlines()}
    val = [prompt_text(json.loads(line)) for line in paths["rlhf_rule_score"].read_text().splitlines()]
    assert len(val) == len(set(val)) == 60 and not held & set(val)  # the 60 training cells, once each
    assert dropped["rlhf_rule_score"] == 36


def test_validation_targets_must_be_targets():
    data = resolve_stage(find_stage_folder(Path("stages/07_rlhf")), "embedded").config.model_dump(mode="json")
    assert data["eval"]["validation_targets"] == ["rlhf_rule_score"]  # a rate, not the raw RM score
    data["eval"]["validation_targets"] = ["code_pass1"]
    with pytest.raises(ValueError, match=r"validation_targets \['code_pass1'\] are not among targets"):
        StageConfig.model_validate(data)
