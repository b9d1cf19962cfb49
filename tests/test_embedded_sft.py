"""Embedded SFT: assistant-only loss lowers held-out loss, plateau selection, exact resume, idempotence."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import metrics_without_timing, micro_base, toy_job, weights  # noqa: E402

from infra.embedded import sft as sft_mod  # noqa: E402
from infra.embedded.backend import EmbeddedBackend  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("sft"))


def overfit_job(stage_dir: Path, base: Path, **extra):
    """A toy SFT job that memorises 8 rows, so held-out loss falls, then rises: a plateau to select."""
    job = toy_job("toy_sft", stage_dir, base, **extra)
    job.stage.module("data_prep").run(stage_dir / "data", n_train=8)
    job.stage.config.sft.epochs = 40
    job.stage.config.sft.eval_interval = 2
    job.stage.config.optimizer.lr = 0.01
    return job


def test_sft_lowers_heldout_loss_and_selects_plateau_checkpoint(tmp_path, base):
    job = overfit_job(tmp_path / "run", base)
    result = EmbeddedBackend().train(job)
    rows = [json.loads(x) for x in job.metrics_path.read_text().splitlines()]
    evals = {r["step"]: r["heldout_loss"] for r in rows if "heldout_loss" in r}
    best_step = min(evals, key=evals.get)
    assert result.selected_step == best_step
    assert result.summary["heldout_loss"] == pytest.approx(evals[best_step])
    assert evals[best_step] < result.summary["initial_heldout_loss"] - 1.0
    last = rows[-1]["step"]
    assert best_step < last  # not the last step: the plateau ended training after `plateau_patience` evals
    assert sum(1 for s in evals if s > best_step) == job.stage.config.sft.plateau_patience
    assert last < len(sft_mod.SFTTrainer(job).schedule)
    # The export is the selected checkpoint, not the last weights.
    exported = weights(job.export_dir)
    selected = weights(job.checkpoints_dir / sft_mod.SELECTED)
    assert all(torch.equal(exported[k], selected[k]) for k in selected)
    EmbeddedBackend().check_loads(job.export_dir)
    # Idempotent: a second train() returns the finished export without touching it.
    mtime = (job.export_dir / "model.safetensors").stat().st_mtime_ns
    again = EmbeddedBackend().train(job)
    assert again.selected_step == best_step
    assert (job.export_dir / "model.safetensors").stat().st_mtime_ns == mtime


def test_sft_resume_after_crash_is_identical(tmp_path, base, monkeypatch):
    ref = overfit_job(tmp_path / "ref", base, checkpoint_every=3)
    ref_result = sft_mod.train_sft(ref)

    job = overfit_job(tmp_path / "crash", base, checkpoint_every=3)
    real_step = sft_mod.SFTTrainer.train_step
    calls = {"n": 0}

    def crashing(self, packs):
        calls["n"] += 1
        if calls["n"] == 5:  # metrics of step 4 are written, the last checkpoint is step 3
            raise KeyboardInterrupt("simulated kill")
        return real_step(self, packs)

    monkeypatch.setattr(sft_mod.SFTTrainer, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        sft_mod.train_sft(job)
    assert len(job.metrics_path.read_text().splitlines()) == 4
    monkeypatch.setattr(sft_mod.SFTTrainer, "train_step", real_step)
    result = sft_mod.train_sft(job)
    assert result.selected_step == ref_result.selected_step
    assert metrics_without_timing(job.metrics_path) == metrics_without_timing(ref.metrics_path)
    a, b = weights(ref.export_dir), weights(job.export_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bf16_sft_steps_track_float32_and_keep_float32_weights(tmp_path, base):
    """``sft.update_dtype: bfloat16``: mixed-precision steps near the float32 ones, float32 weights."""
    runs = {}
    for dtype in ("float32", "bfloat16"):
        job = overfit_job(tmp_path / dtype, base)
        job.stage.config.sft.epochs = 2
        job.stage.config.sft.update_dtype = dtype
        EmbeddedBackend().train(job)
        rows = [json.loads(x) for x in job.metrics_path.read_text().splitlines()]
        runs[dtype] = [r["loss"] for r in rows if "loss" in r], weights(job.export_dir)
    l32, (l16, w16) = runs["float32"][0], runs["bfloat16"]
    assert len(l32) == len(l16) > 1 and l32 != l16  # the bf16 forward did run
    assert l16 == pytest.approx(l32, rel=2e-2)
    assert l16[-1] < l16[0]  # and it trains
    assert all(w.dtype == torch.float32 for w in w16.values())
