"""``sampler_dtype``: embedded rollouts and evaluations may sample in bf16; training stays float32."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base, toy_job  # noqa: E402

from infra.embedded import evaluate as eval_mod  # noqa: E402
from infra.embedded import rl as rl_mod  # noqa: E402
from infra.embedded import rl_select  # noqa: E402
from infra.embedded.models import load_model, load_tokenizer, sampler_model  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("sampler"))


def test_sampler_model_is_a_bf16_copy_that_follows_the_trained_weights(base):
    model = load_model(base).train()
    assert sampler_model(model, "float32") is model
    copy = sampler_model(model, "bfloat16")
    assert copy is not model and not copy.training
    assert {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the trained weights are untouched
    assert all(p.requires_grad for p in model.parameters())
    assert not any(p.requires_grad for p in copy.parameters())
    assert {b.dtype for b in copy.buffers()} == {b.dtype for b in model.buffers()}  # rotary stays float32
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    assert sampler_model(model, "bfloat16", copy) is copy  # refreshed in place
    assert sampler_model(model, "bfloat16", model) is not model  # never a float32 model cast in place
    for mine, theirs in zip(copy.parameters(), model.parameters(), strict=True):
        assert torch.equal(mine, theirs.detach().to(torch.bfloat16))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        close = (copy(input_ids=ids).logits.float() - model(input_ids=ids).logits).abs().max()
    assert float(close) < 0.5  # the same function up to bf16 rounding


def test_rl_rollouts_sample_from_bf16_weights_synced_before_every_step(tmp_path, base, monkeypatch):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.rl.rollout.num_rollouts = 2
    job.stage.config.rl.dynamic_sampling.filter = "none"
    job.stage.config.rl.rollout.sampler_dtype = "bfloat16"
    seen: list[tuple[torch.dtype, float, dict[str, torch.Tensor]]] = []
    real = rl_mod.sampler_model

    def spy(model, dtype, into=None):
        out = real(model, dtype, into)
        lag = max(
            float((a.float() - b.detach().to(torch.bfloat16).float()).abs().max())
            for a, b in zip(out.parameters(), model.parameters(), strict=True)
        )
        state = {k: v.clone() for k, v in model.state_dict().items()}
        seen.append((next(out.parameters()).dtype, lag, state))
        return out

    monkeypatch.setattr(rl_mod, "sampler_model", spy)
    rl_mod.train_rl(job)
    assert len(seen) >= 2
    assert all(dtype == torch.bfloat16 and lag == 0.0 for dtype, lag, _ in seen)
    first, last = seen[0][2], seen[-1][2]
    assert any(not torch.equal(first[k], last[k]) for k in first)  # trained in between, and the copy followed
    for p in load_model(job.export_dir).parameters():
        assert p.dtype == torch.float32  # the export is the float32 trained model


def test_stage_eval_loads_the_checkpoint_in_the_sampler_dtype(tmp_path, base, monkeypatch):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.eval.sampler_dtype = "bfloat16"
    dtypes: list[torch.dtype] = []
    real = eval_mod.load_model

    def spy(path, device="cpu", dtype=None):
        model = real(path, device, dtype)
        dtypes.append(next(model.parameters()).dtype)
        return model

    monkeypatch.setattr(eval_mod, "load_model", spy)
    scores = eval_mod.evaluate_stage(job, base)
    assert dtypes == [torch.bfloat16]
    assert all(0.0 <= v <= 1.0 for v in scores.values())


def test_validation_selector_scores_a_bf16_copy_of_the_current_weights(tmp_path, base, monkeypatch):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.eval.sampler_dtype = "bfloat16"
    job.validation_dir.mkdir(parents=True, exist_ok=True)
    (job.validation_dir / "toy_a.jsonl").write_text((job.heldout_dir / "toy_a.jsonl").read_text())
    job.stage.config.eval.select_by = "validation"
    selector = rl_select.ValidationSelector(job)
    model, tokenizer = load_model(base).train(), load_tokenizer(base)
    seen: list[tuple[object, torch.dtype, float]] = []
    real = rl_select.score_rows

    def spy(sampler, *args, **kwargs):
        lag = max(
            float((a.detach().float() - b.detach().to(torch.bfloat16).float()).abs().max())
            for a, b in zip(sampler.parameters(), model.parameters(), strict=True)
        )
        seen.append((sampler, next(sampler.parameters()).dtype, lag))
        return real(sampler, *args, **kwargs)

    monkeypatch.setattr(rl_select, "score_rows", spy)
    first = selector.score(model, tokenizer, None)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.25)
    selector.score(model, tokenizer, None)
    assert 0.0 <= first <= 1.0 and len(seen) == 2
    assert all(dtype == torch.bfloat16 and lag == 0.0 for _, dtype, lag in seen)  # synced at every scoring
    assert seen[0][0] is seen[1][0] is not model  # one copy, refreshed in place
    assert model.training and {p.dtype for p in model.parameters()} == {torch.float32}
    job.stage.config.eval.sampler_dtype = "float32"
    selector.score(model, tokenizer, None)
    assert seen[-1][0] is model  # float32 scores the trained model itself


def test_sampler_dtype_is_left_out_of_older_configs_and_checked():
    from pydantic import ValidationError

    from infra.config import RolloutConfig

    base = {"prompts_per_step": 2, "samples_per_prompt": 2, "max_response_tokens": 8, "num_rollouts": 1}
    assert "sampler_dtype" not in RolloutConfig.model_validate(base).model_dump()  # old hashes hold
    assert RolloutConfig.model_validate({**base, "sampler_dtype": "bfloat16"}).sampler_dtype == "bfloat16"
    with pytest.raises(ValidationError, match="sampler_dtype"):
        RolloutConfig.model_validate({**base, "sampler_dtype": "float16"})
