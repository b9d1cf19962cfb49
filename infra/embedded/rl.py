"""The embedded RL trainer: rollouts, rewards, shaping, dynamic sampling, advantages and policy updates.

Hand-written rather than TRL's ``GRPOTrainer`` because the stage semantics are slime's, not TRL's: DAPO
refill of filtered groups, aborted samples leaving their group before advantages, group-aware shaping,
FireFlash advantages, TIS against separately recomputed trainer logprobs, phases, and exact resume
(checkpoint after each rollout step with the prompt cursor). Every formula comes from
:mod:`infra.objectives`, the module the production backend calls from slime's hooks.

One rollout step: draw prompts (seeded order) → ``samples_per_prompt`` samples each with logprobs →
reward via ``rewards.contract`` (``metadata.reward`` of the row, else the stage's reward) → drop aborted →
filter (none / nonzero_std / band, refilling) → shape → advantages → ``steps_per_rollout`` optimizer
mini-steps, old logprobs = rollout logprobs (or trainer logprobs recomputed before the first mini-step
when TIS is on, with the rollout ones as the TIS reference).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from data_prep.schema import PromptRow
from infra.backends import StageJob, TrainResult
from infra.config import PolicyConfig, RLConfig, RolloutConfig
from infra.embedded import checkpointing as ckpt
from infra.embedded.chat_format import render_prompt_ids, stop_token_ids
from infra.embedded.generation import generate
from infra.embedded.metrics import MetricsLog
from infra.embedded.models import load_model, load_tokenizer, pick_device
from infra.embedded.optim import build_optimizer
from infra.embedded.runtime import derive_seed, progress, read_rows, setup_determinism
from infra.embedded.sampling import Group, Sample, collect_groups, group_filter
from infra.embedded.token_logprobs import build_batch, logprobs_from_logits, response_logits
from infra.objectives import (
    entropy_from_logits,
    group_advantages,
    kl_k3,
    mask_truncated,
    policy_loss,
    shape_group,
)
from rewards.contract import RewardRequest, get_reward, safe_score


@dataclass
class Phase:
    """The rollout and policy settings in force for one rollout step."""

    index: int
    rollout: RolloutConfig
    policy: PolicyConfig


def phase_plan(rl: RLConfig) -> list[Phase]:
    """Return one :class:`Phase` per rollout step; each phase overrides the previous one's fields."""
    rollout, policy = rl.rollout, rl.policy
    plan = [Phase(0, rollout, policy)] * rollout.num_rollouts
    for i, override in enumerate(rl.phases, start=1):
        unknown = sorted(set(override) - {"rollout", "policy"})
        if unknown:
            raise ValueError(
                f"rl.phases[{i - 1}]: unknown keys {unknown}; a phase overrides `rollout` and `policy`"
            )
        try:
            rollout = RolloutConfig.model_validate({**rollout.model_dump(), **override.get("rollout", {})})
            policy = PolicyConfig.model_validate({**policy.model_dump(), **override.get("policy", {})})
        except ValidationError as exc:
            raise ValueError(f"rl.phases[{i - 1}]: {exc}") from None
        plan += [Phase(i, rollout, policy)] * rollout.num_rollouts
    return plan


class PromptCursor:
    """Prompts in a seeded order, reshuffled each epoch; its state is two integers."""

    def __init__(self, rows: list[PromptRow], seed: int) -> None:
        if not rows:
            raise ValueError("no valid prompt rows to train on")
        self.rows, self.seed, self.epoch, self.pos = rows, seed, 0, 0
        self._order = self._perm()

    def _perm(self) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(derive_seed(self.seed, self.epoch)).shuffle(order)
        return order

    def draw(self, n: int) -> list[PromptRow]:
        """Return the next ``n`` prompts."""
        out = []
        for _ in range(n):
            if self.pos >= len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._perm()
            out.append(self.rows[self._order[self.pos]])
            self.pos += 1
        return out

    def state(self) -> dict[str, int]:
        """Return the resume state."""
        return {"epoch": self.epoch, "pos": self.pos}

    def load(self, state: dict[str, int]) -> None:
        """Restore :meth:`state`."""
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self._perm()


def _shaping_kwargs(kind: str, group: Group, coef: float, params: dict[str, float], max_len: int) -> dict:
    lengths = [len(s.token_ids) for s in group.samples]
    table = {
        "none": lambda: {},
        "shortest_correct_length": lambda: {
            "lengths": lengths,
            "correct": [s.reward.passed for s in group.samples],
            "max_len": max_len,
            "coef": coef,
        },
        "positive_length": lambda: {"lengths": lengths, "max_len": max_len, "coef": coef, **params},
        "ultramarine": lambda: {
            "output_tokens": lengths,
            "turns": [int(s.reward.details.get("turns", 1)) for s in group.samples],
            "invalid_tool_calls": [int(s.reward.details.get("invalid_tool_calls", 0)) for s in group.samples],
            "params": params,
        },
    }
    return table[kind]()


def _advantage_kwargs(kind: str, group: Group) -> dict:
    if kind != "fireflash":
        return {}
    return {
        "solved": [s.reward.passed for s in group.samples],
        "num_tokens": [len(s.token_ids) for s in group.samples],
    }


class RLTrainer:
    """Trains one RL stage; :meth:`run` is resumable and idempotent."""

    def __init__(self, job: StageJob) -> None:
        if job.stage.config.rl is None:
            raise ValueError(f"stage {job.stage.id}: RL trainer needs an `rl` section")
        self.job, self.cfg = job, job.stage.config
        job.stage.module("reward")  # the stage's reward module registers its rewards on import
        self.plan = phase_plan(self.cfg.rl)
        setup_determinism(job.seed, job.extra.get("threads"))
        self.device = pick_device(job.extra.get("device"))
        self.tokenizer = load_tokenizer(job.init_checkpoint)
        self.model = load_model(job.init_checkpoint, self.device)
        self.model.train()
        self.ref = None
        if job.extra.get("track_kl", True) or any(p.policy.kl_coef > 0 for p in self.plan):
            self.ref = load_model(job.init_checkpoint, self.device).eval().requires_grad_(False)
        total_opt = sum(p.rollout.steps_per_rollout for p in self.plan)
        self.opt, self.sched = build_optimizer(self.model, self.cfg.optimizer, total_opt)
        self.cursor = PromptCursor(read_rows(job.data_dir / "train.jsonl", PromptRow), job.seed)
        self.stops = stop_token_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id
        self._prompt_cache: dict[str, list[int]] = {}

    # ---- rollout -------------------------------------------------------------------------------
    def _prompt_ids(self, row: PromptRow) -> list[int]:
        if row.id not in self._prompt_cache:
            self._prompt_cache[row.id] = render_prompt_ids(self.tokenizer, row.prompt, row.tools)
        return self._prompt_cache[row.id]

    def _score(self, row: PromptRow, text: str) -> Any:
        name = row.metadata.get("reward") or self.cfg.reward
        request = RewardRequest(prompt=row.prompt, response=text, label=row.label, metadata=row.metadata)
        return safe_score(get_reward(name), request)

    def rollout(self, rows: list[PromptRow], rc: RolloutConfig, seed: int) -> list[Group]:
        """Return one group of ``rc.samples_per_prompt`` scored samples per row."""
        n = rc.samples_per_prompt
        prompts = [self._prompt_ids(r) for r in rows for _ in range(n)]
        gens = generate(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=rc.max_response_tokens,
            temperature=rc.temperature,
            top_p=rc.top_p,
            stop_token_ids=self.stops,
            seed=seed,
            batch_size=self.job.extra.get("rollout_batch_size"),
        )
        groups = []
        for gi, row in enumerate(rows):
            samples = []
            for g in gens[gi * n : (gi + 1) * n]:
                body = g.token_ids[:-1] if g.finish_reason == "stop" else g.token_ids
                text = self.tokenizer.decode(body, skip_special_tokens=False)
                samples.append(Sample(g.token_ids, g.logprobs, g.finish_reason, self._score(row, text), text))
            groups.append(Group(row, prompts[gi * n], samples))
        return groups

    # ---- update --------------------------------------------------------------------------------
    def _no_grad_logprobs(self, model: torch.nn.Module, items: list, temperature: float) -> list[list[float]]:
        out: list[list[float]] = []
        for mb in self._micro_batches(list(range(len(items)))):
            batch = build_batch(
                [items[i][0] for i in mb], [items[i][1] for i in mb], self.pad_id, self.device
            )
            with torch.no_grad():
                lp = logprobs_from_logits(response_logits(model, batch, temperature), batch.response_ids)
            out += [lp[j, : len(items[i][1])].tolist() for j, i in enumerate(mb)]
        return out

    def _micro_batches(self, idx: list[int]) -> list[list[int]]:
        size = int(self.job.extra.get("micro_batch") or len(idx) or 1)
        return [idx[i : i + size] for i in range(0, len(idx), size)]

    def _pad(self, rows: list[list[float]]) -> torch.Tensor:
        width = max(max(len(r) for r in rows), 1)
        return torch.tensor(
            [r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32, device=self.device
        )

    def update(self, groups: list[Group], phase: Phase) -> dict[str, float]:
        """Run ``steps_per_rollout`` optimizer mini-steps on ``groups``; return averaged loss metrics."""
        rc, pc, sh = phase.rollout, phase.policy, self.cfg.rl.shaping
        items = []  # (prompt_ids, response_ids, rollout_logprobs, advantage, truncated)
        shaped_all = []
        for g in groups:
            kw = _shaping_kwargs(sh.kind, g, sh.coef, sh.params, rc.max_response_tokens)
            shaped = shape_group(sh.kind, g.scores, **kw)
            adv = group_advantages(pc.advantage, torch.tensor(shaped), **_advantage_kwargs(pc.advantage, g))
            shaped_all += shaped
            for s, a in zip(g.samples, adv.tolist(), strict=False):
                items.append((g.prompt_ids, s.token_ids, s.logprobs, a, s.truncated))
        if pc.use_tis:
            old_all = self._no_grad_logprobs(self.model, items, rc.temperature)
        else:
            old_all = [it[2] for it in items]
        ref_all = self._no_grad_logprobs(self.ref, items, rc.temperature) if self.ref is not None else None
        sums: dict[str, float] = {}
        chunks = [c.tolist() for c in np.array_split(np.arange(len(items)), rc.steps_per_rollout) if len(c)]
        for chunk in chunks:
            total_tokens = sum(len(items[i][1]) for i in chunk)
            for mb in self._micro_batches(chunk):
                weight = len(mb) / len(chunk)
                if pc.loss_reduction == "token":
                    weight = sum(len(items[i][1]) for i in mb) / max(total_tokens, 1)
                metrics = self._micro_step(items, mb, old_all, ref_all, phase, weight)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v * weight / len(chunks)
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optimizer.clip_grad)
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm) / len(chunks)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad(set_to_none=True)
        sums["shaped_reward_mean"] = float(np.mean(shaped_all)) if shaped_all else 0.0
        sums["advantage_abs_mean"] = float(np.mean([abs(it[3]) for it in items])) if items else 0.0
        return sums

    def _micro_step(self, items, mb, old_all, ref_all, phase: Phase, weight: float) -> dict[str, float]:
        pc, temp = phase.policy, phase.rollout.temperature
        batch = build_batch([items[i][0] for i in mb], [items[i][1] for i in mb], self.pad_id, self.device)
        logits = response_logits(self.model, batch, temp)
        logprobs = logprobs_from_logits(logits, batch.response_ids)
        mask = batch.response_mask
        if pc.mask_truncated:
            mask = mask_truncated(mask, torch.tensor([items[i][4] for i in mb], device=self.device))
        old = self._pad([old_all[i] for i in mb])
        rollout_lp = self._pad([items[i][2] for i in mb]) if pc.use_tis else None
        adv = torch.tensor([items[i][3] for i in mb], dtype=torch.float32, device=self.device)
        loss, metrics = policy_loss(
            pc.estimator,
            logprobs,
            old,
            adv,
            mask,
            eps_clip=pc.eps_clip,
            eps_clip_high=pc.eps_clip_high,
            rollout_logprobs=rollout_lp,
            tis_clip_low=pc.tis_clip_low,
            tis_clip_high=pc.tis_clip_high if pc.use_tis else None,
            reduction=pc.loss_reduction,
            min_denominator=pc.min_attempt_tokens,
        )
        if pc.entropy_coef > 0:
            entropy = entropy_from_logits(logits, mask)
            loss = loss - pc.entropy_coef * entropy
        else:
            with torch.no_grad():
                entropy = entropy_from_logits(logits.detach(), batch.response_mask)
        metrics["entropy"] = float(entropy.detach())
        if ref_all is not None:
            kl = kl_k3(logprobs, self._pad([ref_all[i] for i in mb]), mask)
            metrics["kl"] = float(kl.detach())
            if pc.kl_coef > 0:
                loss = loss + pc.kl_coef * kl
        (loss * weight).backward()
        return metrics

    # ---- loop ----------------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, Any]:
        """Run rollout step ``step`` (1-based) and return its metrics row."""
        phase = self.plan[step - 1]
        rc, ds = phase.rollout, self.cfg.rl.dynamic_sampling
        t0 = time.perf_counter()
        groups, report = collect_groups(
            rc.prompts_per_step,
            self.cursor.draw,
            lambda rows, attempt: self.rollout(rows, rc, derive_seed(self.job.seed, step, attempt)),
            group_filter(ds),
            over_sampling_factor=rc.over_sampling_factor,
            filtering=ds.filter != "none",
            max_attempts=int(self.job.extra.get("max_sampling_attempts", 8)),
        )
        samples = [s for g in groups for s in g.samples]
        row: dict[str, Any] = {"step": step, "phase": phase.index, "lr": float(self.sched.get_last_lr()[0])}
        if samples:
            row.update(self.update(groups, phase))
        row.update(
            reward_mean=float(np.mean([s.reward.score for s in samples])) if samples else 0.0,
            pass_rate=float(np.mean([s.reward.passed for s in samples])) if samples else 0.0,
            response_length_mean=float(np.mean([len(s.token_ids) for s in samples])) if samples else 0.0,
            truncation_ratio=float(np.mean([s.truncated for s in samples])) if samples else 0.0,
            samples=len(samples),
            failures=sum(s.reward.failure is not None for s in samples),
            **report.as_metrics(),
        )
        seconds = time.perf_counter() - t0
        row["step_seconds"] = seconds
        row["tokens_per_s"] = sum(len(s.token_ids) for s in samples) / max(seconds, 1e-9)
        return row

    def run(self) -> TrainResult:
        """Train every rollout step not done yet, export, and return the result."""
        job = self.job
        exported = ckpt.finished_export(job.export_dir)
        if exported is not None:
            return exported
        log = MetricsLog(job.metrics_path)
        done = 0
        latest = ckpt.latest_checkpoint(job.checkpoints_dir)
        if latest is not None:
            state = ckpt.load_checkpoint(latest, self.model, self.opt, self.sched)
            self.cursor.load(state["cursor"])
            done = int(state["step"])
        log.truncate_after(done)
        every = max(1, int(job.extra.get("checkpoint_every", 1)))
        total = len(self.plan)
        last: dict[str, Any] = {}
        with progress(f"RL {job.stage.id}", total, done) as advance:
            for step in range(done + 1, total + 1):
                last = self.step(step)
                log.append(last)
                if step % every == 0 or step == total:
                    state = {"step": step, "cursor": self.cursor.state()}
                    ckpt.save_checkpoint(job.checkpoints_dir, step, self.model, self.opt, self.sched, state)
                advance(reward=last["reward_mean"], pass_rate=last["pass_rate"])
        rows = log.rows()[-max(1, math.ceil(total / 10)) :]
        summary = {
            k: float(np.mean([r[k] for r in rows]))
            for k in ("reward_mean", "pass_rate", "response_length_mean")
        }
        summary["steps"] = float(total)
        info = {"selected_step": total, "summary": summary}
        ckpt.save_hf_folder(job.export_dir, self.model, self.tokenizer, ckpt.EXPORT_MARKER, info)
        return TrainResult(job.export_dir, total, summary)


def train_rl(job: StageJob) -> TrainResult:
    """Train the RL stage of ``job`` (resuming from its checkpoints) and return the export."""
    return RLTrainer(job).run()
