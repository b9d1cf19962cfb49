"""Embedded RL: a toy verifiable task is learned, resume is exact, evaluation and loading checks work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import metrics_without_timing, micro_base, toy_job, weights  # noqa: E402

from data_prep.schema import PromptRow  # noqa: E402
from infra.embedded import rl as rl_mod  # noqa: E402
from infra.embedded.backend import EmbeddedBackend  # noqa: E402
from infra.embedded.evaluate import score_heldout  # noqa: E402
from infra.embedded.runtime import read_rows  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("rl"))


def test_rl_raises_mean_reward_on_toy_task(tmp_path, base):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.rl.rollout.num_rollouts = 24
    backend = EmbeddedBackend()
    before = backend.evaluate(job, base)
    result = backend.train(job)
    rows = metrics_without_timing(job.metrics_path)
    assert [r["step"] for r in rows] == list(range(1, 25))
    first = sum(r["reward_mean"] for r in rows[:4]) / 4
    last = sum(r["reward_mean"] for r in rows[-4:]) / 4
    assert last > first + 0.2, (first, last)
    assert rows[-1]["pass_rate"] > rows[0]["pass_rate"]
    for key in ("entropy", "kl", "clip_fraction", "zero_signal_group_fraction", "dropped_groups", "lr"):
        assert key in rows[-1]
    assert rows[0]["kl"] < rows[-1]["kl"]  # the policy moved away from the stage's initial policy
    after = backend.evaluate(job, result.export_dir)
    assert after["toy_a"] > before["toy_a"] + 0.2
    assert backend.evaluate(job, result.export_dir) == after  # seeded: evaluation is deterministic
    for role, scores in (("input", before), ("output", after)):  # each checkpoint's scores and details
        logged = json.loads((job.logs_dir / f"eval_details_{role}.json").read_text())
        assert logged["metrics"] == scores and logged["details"]["toy_a"]["prompts"] > 0
    held = read_rows(job.heldout_dir / "toy_a.jsonl", PromptRow)
    score = score_heldout(result.export_dir, held, "toy_letter_a", samples_per_prompt=2, temperature=1.0)
    assert 0.0 <= score <= 1.0
    backend.check_loads(result.export_dir)


def small_rl_job(stage_dir: Path, base: Path, **extra):
    """A 5-step toy RL job exercising TIS, KL, entropy, truncation masking and dynamic sampling."""
    job = toy_job("toy_rl", stage_dir, base, **extra)
    cfg = job.stage.config.rl
    cfg.rollout.num_rollouts = 5
    cfg.rollout.prompts_per_step = 4
    cfg.rollout.over_sampling_factor = 1.5
    cfg.policy.use_tis = True
    cfg.policy.kl_coef = 0.01
    cfg.policy.entropy_coef = 0.001
    cfg.policy.mask_truncated = True
    cfg.dynamic_sampling.filter = "nonzero_std"
    return job


def one_update_jobs(tmp_path: Path, base: Path, *names: str) -> list:
    """Toy RL jobs of one update on every group of one draw (sampling cannot diverge between them)."""
    jobs = [small_rl_job(tmp_path / name, base) for name in names]
    for job in jobs:
        job.stage.config.rl.rollout.num_rollouts = 1
        job.stage.config.rl.dynamic_sampling.filter = "none"
        job.stage.config.rl.policy.mask_truncated = False  # the toy's responses all hit the budget
    return jobs


def test_rl_resume_after_crash_is_identical(tmp_path, base, monkeypatch):
    ref = small_rl_job(tmp_path / "ref", base, checkpoint_every=2)
    rl_mod.train_rl(ref)
    job = small_rl_job(tmp_path / "crash", base, checkpoint_every=2)
    real_step = rl_mod.RLTrainer.step

    def crashing(self, step):
        if step == 4:  # metrics of step 3 are written, the last checkpoint is step 2
            raise KeyboardInterrupt("simulated kill")
        return real_step(self, step)

    monkeypatch.setattr(rl_mod.RLTrainer, "step", crashing)
    with pytest.raises(KeyboardInterrupt):
        rl_mod.train_rl(job)
    assert len(job.metrics_path.read_text().splitlines()) == 3
    monkeypatch.setattr(rl_mod.RLTrainer, "step", real_step)
    rl_mod.train_rl(job)
    assert metrics_without_timing(job.metrics_path) == metrics_without_timing(ref.metrics_path)
    a, b = weights(ref.export_dir), weights(job.export_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ckpts = [p.name for p in job.checkpoints_dir.iterdir()]
    assert ckpts == ["step-00000005"]  # only the last resume point is kept


def test_reusing_the_training_forward_for_old_logprobs_is_bit_identical(tmp_path, base, monkeypatch):
    """One optimizer step per rollout: TIS's old logprobs from the training forward equal a separate pass."""
    reused, separate = small_rl_job(tmp_path / "reused", base), small_rl_job(tmp_path / "separate", base)
    for job in (reused, separate):
        job.stage.config.rl.rollout.steps_per_rollout = 1
    rl_mod.train_rl(reused)
    monkeypatch.setattr(
        rl_mod.RLTrainer,
        "_old_logprobs",
        lambda self, items, n, phase: self._no_grad_logprobs(self.model, items, phase.rollout),
    )
    rl_mod.train_rl(separate)
    assert metrics_without_timing(reused.metrics_path) == metrics_without_timing(separate.metrics_path)
    a, b = weights(reused.export_dir), weights(separate.export_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_check_loads_names_what_is_missing(tmp_path, base):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(base, broken)
    (broken / "chat_template.jinja").unlink()
    cfg = (broken / "tokenizer_config.json").read_text()
    (broken / "tokenizer_config.json").write_text(cfg.replace('"chat_template"', '"unused_template"'))
    with pytest.raises(ValueError, match="chat template"):
        EmbeddedBackend().check_loads(broken)
    (broken / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json"):
        EmbeddedBackend().check_loads(broken)


def test_phases_override_rollout_and_policy(tmp_path, base):
    job = toy_job("toy_rl", tmp_path / "run", base)
    cfg = job.stage.config.rl
    cfg.rollout.num_rollouts = 2
    cfg.phases = [{"rollout": {"num_rollouts": 3, "max_response_tokens": 9}, "policy": {"estimator": "gspo"}}]
    plan = rl_mod.phase_plan(cfg)
    assert [p.index for p in plan] == [0, 0, 1, 1, 1]
    assert plan[0].rollout.max_response_tokens == 6 and plan[-1].rollout.max_response_tokens == 9
    assert plan[0].policy.estimator == "grpo" and plan[-1].policy.estimator == "gspo"
    with pytest.raises(ValueError, match=r"phases\.0\.shaping"):  # rejected when set, not when trained
        cfg.phases = [{"shaping": {}}]


@pytest.mark.parametrize("cap", ["episodes", "tokens"])
def test_micro_batched_training_matches_one_forward_per_step(tmp_path, base, monkeypatch, cap):
    """``train_micro_batch`` / ``train_max_tokens``: accumulated forwards give the same update as one."""
    whole, split = one_update_jobs(tmp_path, base, "whole", "split")
    if cap == "episodes":
        split.stage.config.rl.rollout.train_micro_batch = 3  # 16 episodes: 3+3+3+3+3+1
    else:
        split.stage.config.rl.rollout.train_max_tokens = 45  # a toy episode is ~20 padded tokens
    seen: list[list[list[int]]] = []

    def spy(idx, prompts, responses, **caps):
        out = real(idx, prompts, responses, **caps)
        seen.append([[len(prompts[i]) + len(responses[i]) for i in mb] for mb in out])
        return out

    real = rl_mod.micro_batches
    monkeypatch.setattr(rl_mod, "micro_batches", spy)
    rl_mod.train_rl(whole)
    assert all(len(split_) == 1 for split_ in seen)  # no cap: one forward
    seen.clear()
    rl_mod.train_rl(split)
    assert seen and all(len(split_) >= 3 for split_ in seen)
    if cap == "tokens":  # whole-sequence forwards: episodes x the longest row
        assert all(len(mb) * max(mb) <= 45 for split_ in seen for mb in split_), seen
    m_whole, m_split = metrics_without_timing(whole.metrics_path), metrics_without_timing(split.metrics_path)
    assert m_whole[0]["reward_mean"] == m_split[0]["reward_mean"]
    for key in ("loss", "grad_norm", "kl", "entropy"):  # a mis-weighted micro-batch changes these
        assert m_whole[0][key] == pytest.approx(m_split[0][key], rel=1e-5, abs=1e-7), key
    a, b, start = weights(whole.export_dir), weights(split.export_dir), weights(base)
    moved = max(float((a[k] - start[k]).abs().max()) for k in a)
    assert moved > 1e-3  # the step changed the weights, so equal weights are not vacuous
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-4) for k in a)  # Adam on near-zero gradients


def test_shared_prompt_training_matches_whole_sequences(tmp_path, base):
    """``rollout.shared_prompt_forward``: one encoding of each group's prompt gives the same update."""
    whole, shared = one_update_jobs(tmp_path, base, "whole", "shared")
    for job in (whole, shared):
        job.stage.config.rl.rollout.train_micro_batch = 3  # micro-batches that cut across groups
    shared.stage.config.rl.rollout.shared_prompt_forward = True
    rl_mod.train_rl(whole)
    rl_mod.train_rl(shared)
    m_whole = metrics_without_timing(whole.metrics_path)
    m_shared = metrics_without_timing(shared.metrics_path)
    for key in ("loss", "grad_norm", "kl", "entropy"):  # a misplaced position or prompt changes these
        assert m_whole[0][key] == pytest.approx(m_shared[0][key], rel=1e-4, abs=1e-6), key
    a, b, start = weights(whole.export_dir), weights(shared.export_dir), weights(base)
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-4) for k in a)


def test_update_autocast_runs_products_in_bf16_only_when_asked():
    from infra.embedded.models import update_autocast

    layer, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    with update_autocast(torch.device("cpu"), "float32"):
        assert layer(x).dtype == torch.float32
    with update_autocast(torch.device("cpu"), "bfloat16"):
        assert layer(x).dtype == torch.bfloat16
    assert layer.weight.dtype == torch.float32  # master weights untouched


def test_bf16_update_stays_within_bf16_rounding_of_float32(tmp_path, base):
    """``rollout.update_dtype: bfloat16``: a mixed-precision step, near the float32 one, float32 weights."""
    exact, mixed = one_update_jobs(tmp_path, base, "f32", "bf16")
    mixed.stage.config.rl.rollout.update_dtype = "bfloat16"
    rl_mod.train_rl(exact)
    rl_mod.train_rl(mixed)
    m_exact, m_mixed = metrics_without_timing(exact.metrics_path), metrics_without_timing(mixed.metrics_path)
    assert m_exact[0]["reward_mean"] == m_mixed[0]["reward_mean"]  # same rollout: sampling is float32
    assert m_exact[0]["entropy"] != m_mixed[0]["entropy"]  # the forward did run in bf16
    for key in ("loss", "grad_norm", "entropy"):
        assert m_exact[0][key] == pytest.approx(m_mixed[0][key], rel=5e-2, abs=1e-3), key
    a, b, start = weights(exact.export_dir), weights(mixed.export_dir), weights(base)
    assert all(b[k].dtype == torch.float32 for k in b)
    step_a = torch.cat([(a[k] - start[k]).flatten() for k in a])
    step_b = torch.cat([(b[k] - start[k]).flatten() for k in a])
    assert float(torch.nn.functional.cosine_similarity(step_a, step_b, dim=0)) > 0.9  # same direction
