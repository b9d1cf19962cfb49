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
when TIS is on, with the rollout ones as the TIS reference). With ``policy.score_centering_top_k`` the
loss centres each token's score on the sampler's top-k candidates (FireFlash SC): the embedded sampler is
the trained model at the rollout's weights, so its top-k come from the pre-update forward (see
:meth:`RLTrainer._sampler_top`).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from data_prep.schema import PromptRow
from infra.backends import StageJob, TrainResult
from infra.config import PolicyConfig, RLConfig, RolloutConfig
from infra.embedded import checkpointing as ckpt
from infra.embedded.episode_tensors import env_token_mask, pad_floats, pad_top_k
from infra.embedded.evaluate import row_type
from infra.embedded.metrics import MetricsLog
from infra.embedded.micro_batching import micro_batches
from infra.embedded.models import load_model, load_tokenizer, pick_device, sampler_model, update_autocast
from infra.embedded.optim import build_optimizer
from infra.embedded.rl_select import ValidationSelector
from infra.embedded.runtime import derive_seed, progress, read_rows, setup_determinism
from infra.embedded.sampling import Group, collect_groups, group_filter
from infra.embedded.token_logprobs import (
    TokenBatch,
    build_batch,
    logprobs_from_logits,
    response_logits,
    shared_prompt_logits,
)
from infra.environments import Policy, Sampling
from infra.objectives import (
    entropy_from_logits,
    group_advantages,
    kl_k3,
    mask_truncated,
    policy_loss,
    shape_group,
)
from infra.objectives.centering import candidate_logprobs_from_logits, sampler_top_k
from infra.objectives.group_view import advantage_kwargs, shaping_kwargs, view_from_embedded


@dataclass
class Phase:
    """The rollout and policy settings in force for one rollout step."""

    index: int
    rollout: RolloutConfig
    policy: PolicyConfig


def phase_plan(rl: RLConfig) -> list[Phase]:
    """Return one :class:`Phase` per rollout step, from :meth:`RLConfig.phase_settings` (cumulative)."""
    plan: list[Phase] = []
    for i, (rollout, policy) in enumerate(rl.phase_settings()):
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


def group_advantage_values(group: Group, rl: RLConfig, phase: Phase) -> tuple[list[float], list[float]]:
    """Return ``(shaped_rewards, advantages)`` of one group: the stage's shaping, then the phase's estimator.

    The per-sample facts (correct, lengths, turns, ...) come from :mod:`infra.objectives.group_view`, the
    same definitions slime's ``post_process_rewards`` hook uses.
    """
    sh, kind = rl.shaping, phase.policy.advantage
    view = view_from_embedded(group.samples, phase.rollout.max_response_tokens)
    shaped = shape_group(sh.kind, view.scores, **shaping_kwargs(sh.kind, view, sh.coef, sh.params))
    adv = group_advantages(kind, torch.tensor(shaped), **advantage_kwargs(kind, view))
    return shaped, adv.tolist()


def _trained(item: tuple) -> int:
    """Tokens of a batch item that its loss covers (model-sampled ones)."""
    return len(item[1]) if item[5] is None else sum(item[5])


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
        self._sampler: torch.nn.Module | None = None  # the rollouts' bf16 copy (rl.rollout.sampler_dtype)
        self.ref = None
        if job.extra.get("track_kl", True) or any(p.policy.kl_coef > 0 for p in self.plan):
            self.ref = load_model(job.init_checkpoint, self.device).eval().requires_grad_(False)
        total_opt = sum(p.rollout.steps_per_rollout for p in self.plan)
        self.opt, self.sched = build_optimizer(self.model, self.cfg.optimizer, total_opt)
        self.env = job.stage.environment()
        self.cursor = PromptCursor(read_rows(job.data_dir / "train.jsonl", PromptRow), job.seed)
        self.pad_id = self.tokenizer.pad_token_id

    # ---- rollout -------------------------------------------------------------------------------
    def rollout(self, rows: list[PromptRow], rc: RolloutConfig, seed: int) -> list[Group]:
        """Return one group of ``rc.samples_per_prompt`` scored episodes per row, from the environment."""
        sampling = Sampling(
            max_new_tokens=rc.max_response_tokens,
            temperature=rc.temperature,
            top_p=rc.top_p,
            seed=seed,
            batch_size=self.job.extra.get("rollout_batch_size"),
            max_context_tokens=rc.max_context_tokens,
            drop_finished=rc.drop_finished_rows,
            eager_decode=rc.eager_decode,
        )
        self._sampler = sampler_model(self.model, rc.sampler_dtype, self._sampler)  # synced to this step
        return self.env.rollout(Policy(self._sampler, self.tokenizer), rows, rc.samples_per_prompt, sampling)

    # ---- update --------------------------------------------------------------------------------
    def _batch(self, items: list, mb: list[int]) -> TokenBatch:
        return build_batch([items[i][0] for i in mb], [items[i][1] for i in mb], self.pad_id, self.device)

    def _logits(
        self, model: torch.nn.Module, items: list, mb: list[int], batch: TokenBatch, rc: RolloutConfig
    ) -> torch.Tensor:
        """Float32 logits predicting the response tokens of ``mb``, ``[B, T, V]`` (one pass or per prompt).

        The forward runs in ``rc.update_dtype`` (autocast); both logit functions return float32, so every
        log-prob, loss and KL term after them is float32.
        """
        with update_autocast(self.device, rc.update_dtype):
            if rc.shared_prompt_forward:
                prompts, responses = [items[i][0] for i in mb], [items[i][1] for i in mb]
                return shared_prompt_logits(
                    model, prompts, responses, self.pad_id, rc.temperature, self.device
                )
            return response_logits(model, batch, rc.temperature)

    def _no_grad_logprobs(self, model: torch.nn.Module, items: list, rc: RolloutConfig) -> list[list[float]]:
        out: list[list[float]] = []
        for mb in self._micro_batches(items, list(range(len(items))), rc):
            batch = self._batch(items, mb)
            with torch.no_grad():
                lp = logprobs_from_logits(self._logits(model, items, mb, batch, rc), batch.response_ids)
            out += [lp[j, : len(items[i][1])].tolist() for j, i in enumerate(mb)]
        return out

    def _old_logprobs(self, items: list, n_steps: int, phase: Phase) -> list[list[float]] | None:
        """TIS's "old" (pre-update) logprobs; None means: take them from the training forward.

        With one optimizer step per rollout the pre-update policy is the one the training forward runs
        (same weights, same micro-batches), so :meth:`_micro_step` detaches its own logprobs instead of
        paying a second forward here; the numbers are bit-identical (tested).
        """
        if n_steps == 1:
            return None
        return self._no_grad_logprobs(self.model, items, phase.rollout)

    def _sampler_top(self, items: list, n_steps: int, phase: Phase) -> list[tuple[torch.Tensor, ...]] | None:
        """The sampler's top-k ``(ids, log-probs)`` per response token, for score centering.

        The embedded sampler is the model being trained, at the rollout's weights, sampling from
        ``softmax(logits / temperature)`` (top-k taken before top-p truncation, as SGLang reports them):
        its top-k are those of the pre-update forward, equal to what :mod:`infra.embedded.generation`
        captures up to KV-cached versus full-sequence kernels. With one optimizer step per rollout that
        forward is the training forward itself, so None tells :meth:`_micro_step` to take them from its
        own detached logits (as TIS's old log-probs); otherwise a no-grad pass runs before the first update.
        """
        if n_steps == 1:
            return None
        k = phase.policy.score_centering_top_k
        out: list[tuple[torch.Tensor, ...]] = []
        for mb in self._micro_batches(items, list(range(len(items))), phase.rollout):
            batch = self._batch(items, mb)
            with torch.no_grad():
                ids, lps = sampler_top_k(self._logits(self.model, items, mb, batch, phase.rollout), int(k))
            out += [(ids[j, : len(items[i][1])], lps[j, : len(items[i][1])]) for j, i in enumerate(mb)]
        return out

    def _micro_batches(self, items: list, idx: list[int], rc: RolloutConfig) -> list[list[int]]:
        size = self.job.extra.get("micro_batch") or rc.train_micro_batch
        return micro_batches(
            idx,
            [it[0] for it in items],
            [it[1] for it in items],
            max_episodes=None if size is None else int(size),
            max_tokens=rc.train_max_tokens,
            shared_prompt=rc.shared_prompt_forward,
        )

    def update(self, groups: list[Group], phase: Phase) -> dict[str, float]:
        """Run ``steps_per_rollout`` optimizer mini-steps on ``groups``; return averaged loss metrics."""
        rc, pc = phase.rollout, phase.policy
        items = []  # (prompt_ids, response_ids, rollout_logprobs, advantage, truncated, loss_mask | None)
        shaped_all = []
        for g in groups:
            shaped, adv = group_advantage_values(g, self.cfg.rl, phase)
            shaped_all += shaped
            for s, a in zip(g.samples, adv, strict=False):
                prompt = g.prompt_ids if s.prompt_ids is None else s.prompt_ids
                items.append((prompt, s.token_ids, s.logprobs, a, s.truncated, s.loss_mask))
        chunks = [c.tolist() for c in np.array_split(np.arange(len(items)), rc.steps_per_rollout) if len(c)]
        old_all = self._old_logprobs(items, len(chunks), phase) if pc.use_tis else [it[2] for it in items]
        ref_all = self._no_grad_logprobs(self.ref, items, rc) if self.ref is not None else None
        top_all = self._sampler_top(items, len(chunks), phase) if pc.score_centering_top_k else None
        sums: dict[str, float] = {}
        for chunk in chunks:
            total_tokens = sum(_trained(items[i]) for i in chunk)
            for mb in self._micro_batches(items, chunk, rc):
                weight = len(mb) / len(chunk)
                if pc.loss_reduction == "token":
                    weight = sum(_trained(items[i]) for i in mb) / max(total_tokens, 1)
                metrics = self._micro_step(items, mb, old_all, ref_all, phase, weight, top_all)
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

    def _micro_step(
        self, items, mb, old_all, ref_all, phase: Phase, weight: float, top_all=None
    ) -> dict[str, float]:
        pc = phase.policy
        batch = self._batch(items, mb)
        logits = self._logits(self.model, items, mb, batch, phase.rollout)
        logprobs = logprobs_from_logits(logits, batch.response_ids)
        mask = response_mask = env_token_mask(batch.response_mask, [items[i][5] for i in mb])
        if pc.mask_truncated:
            mask = mask_truncated(mask, torch.tensor([items[i][4] for i in mb], device=self.device))
        old = logprobs.detach() if old_all is None else pad_floats([old_all[i] for i in mb], self.device)
        rollout_lp = pad_floats([items[i][2] for i in mb], self.device) if pc.use_tis else None
        adv = torch.tensor([items[i][3] for i in mb], dtype=torch.float32, device=self.device)
        centering: dict[str, torch.Tensor] = {}
        if pc.score_centering_top_k is not None:
            if top_all is None:
                top_ids, top_lp = sampler_top_k(logits, pc.score_centering_top_k)
            else:
                top_ids, top_lp = pad_top_k([top_all[i] for i in mb], logprobs.shape[1], self.device)
            centering = {
                "sampler_top_logprobs": top_lp,
                "candidate_logprobs": candidate_logprobs_from_logits(logits, top_ids),
            }
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
            **centering,
        )
        if pc.entropy_coef > 0:
            entropy = entropy_from_logits(logits, mask)
            loss = loss - pc.entropy_coef * entropy
        else:
            with torch.no_grad():
                entropy = entropy_from_logits(logits.detach(), response_mask)
        metrics["entropy"] = float(entropy.detach())
        if ref_all is not None:
            kl = kl_k3(logprobs, pad_floats([ref_all[i] for i in mb], self.device), mask)
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
            max_attempts=int(self.job.extra.get("max_sampling_attempts", rc.max_sampling_attempts)),
        )
        rollout_seconds = time.perf_counter() - t0
        samples = [s for g in groups for s in g.samples]
        row: dict[str, Any] = {"step": step, "phase": phase.index, "lr": float(self.sched.get_last_lr()[0])}
        if samples:
            row.update(self.update(groups, phase))
        row.update(
            reward_mean=float(np.mean([s.reward.score for s in samples])) if samples else 0.0,
            pass_rate=float(np.mean([s.reward.passed for s in samples])) if samples else 0.0,
            response_length_mean=float(np.mean([len(s.token_ids) for s in samples])) if samples else 0.0,
            turns_mean=float(np.mean([s.metrics.get("turns", 1) for s in samples])) if samples else 0.0,
            truncation_ratio=float(np.mean([s.truncated for s in samples])) if samples else 0.0,
            samples=len(samples),
            failures=sum(s.reward.failure is not None for s in samples),
            **report.as_metrics(),
        )
        for end, count in Counter(
            s.metrics["termination"] for s in samples if "termination" in s.metrics
        ).items():
            row[f"episodes_{end}"] = count
        row.update(reward_by_type(groups))
        seconds = time.perf_counter() - t0
        row["step_seconds"] = seconds
        row["rollout_seconds"] = rollout_seconds  # sampling and scoring; the rest is the update
        row["tokens_per_s"] = sum(len(s.token_ids) for s in samples) / max(seconds, 1e-9)
        return row

    def run(self) -> TrainResult:
        """Train every rollout step not done yet, export, and return the result."""
        job = self.job
        exported = ckpt.finished_export(job.export_dir)
        if exported is not None:
            return exported
        log = MetricsLog(job.metrics_path)
        done, select = 0, {}
        selector = ValidationSelector(job) if self.cfg.eval.select_by == "validation" else None
        latest = ckpt.latest_checkpoint(job.checkpoints_dir)
        if latest is not None:
            state = ckpt.load_checkpoint(latest, self.model, self.opt, self.sched)
            self.cursor.load(state["cursor"])
            done, select = int(state["step"]), state.get("select", {})
        elif selector is not None:
            select["initial"] = selector.score(self.model, self.tokenizer, self.env)
        log.truncate_after(done)
        every = max(1, int(job.extra.get("checkpoint_every", 1)))
        total = len(self.plan)
        last: dict[str, Any] = {}
        with progress(f"RL {job.stage.id}", total, done) as advance:
            for step in range(done + 1, total + 1):
                last = self.step(step)
                if selector is not None and selector.is_due(step, total):
                    last["validation_score"] = selector.score(self.model, self.tokenizer, self.env)
                    selector.observe(step, last["validation_score"], select, self.model, self.tokenizer)
                    last["selected_step"] = select["selected_step"]
                log.append(last)
                if step % every == 0 or step == total or "validation_score" in last:
                    state = {"step": step, "cursor": self.cursor.state(), "select": select}
                    ckpt.save_checkpoint(job.checkpoints_dir, step, self.model, self.opt, self.sched, state)
                advance(reward=last["reward_mean"], pass_rate=last["pass_rate"])
        rows = log.rows()[-max(1, math.ceil(total / 10)) :]
        summary = {
            k: float(np.mean([r[k] for r in rows]))
            for k in ("reward_mean", "pass_rate", "response_length_mean")
        }
        summary["steps"] = float(total)
        if selector is not None:
            if not selector.ready(select):
                raise RuntimeError(f"{selector.selected_dir}: does not hold the selected step {select}")
            step = int(select["selected_step"])
            summary["validation_score"] = select["best"]
            if "initial" in select:  # absent when resuming a checkpoint written before selection was on
                summary["initial_validation_score"] = select["initial"]
            info = {"selected_step": step, "summary": summary}
            ckpt.export_selected(selector.selected_dir, job.export_dir, info)
            return TrainResult(job.export_dir, step, summary)
        info = {"selected_step": total, "summary": summary}
        ckpt.save_hf_folder(job.export_dir, self.model, self.tokenizer, ckpt.EXPORT_MARKER, info)
        return TrainResult(job.export_dir, total, summary)


def train_rl(job: StageJob) -> TrainResult:
    """Train the RL stage of ``job`` (resuming from its checkpoints) and return the export."""
    return RLTrainer(job).run()


def reward_by_type(groups: list[Group]) -> dict[str, float]:
    """Per environment type of the kept groups' rows: ``reward_mean/<type>`` and ``groups/<type>``.

    A step draws other tasks than the last, so its overall reward mixes task types in varying shares;
    the per-type means say which type a change in the overall mean comes from.
    """
    scores: dict[str, list[float]] = defaultdict(list)
    counts: Counter[str] = Counter()
    for group in groups:
        kind = row_type(group.row)
        if kind is not None and group.samples:
            scores[kind].extend(group.scores)
            counts[kind] += 1
    out: dict[str, float] = {}
    for kind in sorted(scores):
        out[f"reward_mean/{kind}"] = float(np.mean(scores[kind]))
        out[f"groups/{kind}"] = float(counts[kind])
    return out
