"""The embedded SFT trainer: assistant-only loss, packing, warmup+cosine AdamW, held-out plateau selection.

Hand-written rather than TRL's ``SFTTrainer``: our loss mask comes per *message* from the GLM markup
(:func:`infra.embedded.chat_format.render_with_loss_mask`), packed sequences need a block-diagonal
attention mask with per-sample positions so samples never see each other, the carried checkpoint is
chosen by a held-out plateau (not the last step), and a kill at any moment must resume bit-identically
(optimizer, schedule, RNG and data cursor in one atomic checkpoint), none of which HF ``Trainer`` offers
together on CPU.

Held-out loss comes from ``data/heldout_sft.jsonl`` when data prep wrote it, else from a seeded 5% slice
of the training rows. Selection: every ``eval_interval`` steps the held-out loss is measured; a new best
is saved to ``checkpoints/selected``; after ``plateau_patience`` evaluations without a new best the loss
is on its plateau and training stops. The export is the selected checkpoint (or the last with
``select_by: last``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import torch

from data_prep.io import MalformedCounter
from data_prep.schema import SFTSample
from infra.backends import StageJob, TrainResult
from infra.embedded import checkpointing as ckpt
from infra.embedded.chat_format import render_with_loss_mask
from infra.embedded.metrics import MetricsLog
from infra.embedded.models import load_model, load_tokenizer, pick_device, update_autocast
from infra.embedded.optim import build_optimizer
from infra.embedded.runtime import derive_seed, progress, read_rows, setup_determinism
from infra.plateau import observe_heldout

SELECTED = ckpt.SELECTED


@dataclass
class Encoded:
    """One tokenized sample and its loss mask."""

    ids: list[int]
    mask: list[int]


def encode_samples(
    tokenizer: Any, rows: list[SFTSample], length_cap: int, counter: MalformedCounter
) -> list[Encoded]:
    """Return tokenized rows; rows over ``length_cap`` or without supervised tokens are dropped, counted."""
    out = []
    for row in rows:
        ids, mask = render_with_loss_mask(tokenizer, row.messages, row.tools)
        if len(ids) > length_cap:
            counter.add("over_length_cap", row.id, f"{len(ids)} > {length_cap} tokens")
        elif not any(mask[1:]):
            counter.add("no_supervised_tokens", row.id)
        else:
            out.append(Encoded(ids, mask))
    return out


def pack(samples: list[Encoded], order: list[int], max_len: int, packing: bool) -> list[list[int]]:
    """Return packs (lists of sample indices) filled greedily in ``order`` up to ``max_len`` tokens."""
    packs: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i in order:
        n = len(samples[i].ids)
        if current and (not packing or used + n > max_len):
            packs.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        packs.append(current)
    return packs


def collate(
    samples: list[Encoded], packs: list[list[int]], pad_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """Return input ids, loss mask, per-sample positions and a block-diagonal causal mask for ``packs``."""
    width = max(sum(len(samples[i].ids) for i in p) for p in packs)
    n = len(packs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    loss = torch.zeros((n, width), dtype=torch.float32)
    pos = torch.zeros((n, width), dtype=torch.long)
    seg = torch.full((n, width), -1, dtype=torch.long)
    for r, p in enumerate(packs):
        at = 0
        for k, i in enumerate(p):
            s = samples[i]
            ids[r, at : at + len(s.ids)] = torch.tensor(s.ids)
            loss[r, at : at + len(s.ids)] = torch.tensor(s.mask, dtype=torch.float32)
            pos[r, at : at + len(s.ids)] = torch.arange(len(s.ids))
            seg[r, at : at + len(s.ids)] = k
            at += len(s.ids)
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool))
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    attn = (causal & same) | torch.eye(width, dtype=torch.bool)  # padding attends to itself (no NaN rows)
    batch = {"input_ids": ids, "loss_mask": loss, "position_ids": pos, "attention_mask": attn[:, None]}
    return {k: v.to(device) for k, v in batch.items()}


def _plain_causal(mask: torch.Tensor) -> bool:
    """True when the mask ``[B, 1, W, W]`` is the plain causal one (one unpadded sample per row)."""
    width = mask.shape[-1]
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool, device=mask.device))
    return torch.equal(mask, causal.expand_as(mask))


def _lean_nll_sum(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, float]:
    """:func:`token_nll_sum` projecting onto the vocabulary only at supervised positions.

    Agent rows are mostly prompt (tool schemas): with a 49K vocabulary the projection and its softmax over
    every position cost as much as the layers. Rows that each hold one unpadded sample run with the plain
    causal mask, which SDPA's fused kernel serves, instead of the explicit block-diagonal one.
    """
    mask = batch["attention_mask"]
    hidden = model.get_decoder()(
        input_ids=batch["input_ids"],
        attention_mask=None if _plain_causal(mask) else mask,
        position_ids=batch["position_ids"],
    ).last_hidden_state[:, :-1]
    weight = batch["loss_mask"][:, 1:]
    on = weight > 0
    logits = model.get_output_embeddings()(hidden[on])
    nll = torch.nn.functional.cross_entropy(logits.float(), batch["input_ids"][:, 1:][on], reduction="none")
    return (nll * weight[on]).sum(), float(weight.sum())


def token_nll_sum(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], lean: bool = False
) -> tuple[torch.Tensor, float]:
    """Return (sum of next-token NLL over supervised tokens, number of those tokens).

    ``lean`` (``sft.lean_forward``) computes the same sum, up to float rounding, with less work.
    """
    if lean:
        return _lean_nll_sum(model, batch)
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    ).logits[:, :-1]
    target = batch["input_ids"][:, 1:]
    weight = batch["loss_mask"][:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), target, reduction="none")
    return (nll * weight).sum(), float(weight.sum())


class SFTTrainer:
    """Trains one SFT stage; :meth:`run` is resumable and idempotent."""

    def __init__(self, job: StageJob) -> None:
        if job.stage.config.sft is None:
            raise ValueError(f"stage {job.stage.id}: SFT trainer needs an `sft` section")
        self.job, self.cfg, self.sft = job, job.stage.config, job.stage.config.sft
        setup_determinism(job.seed, job.extra.get("threads"))
        self.device = pick_device(job.extra.get("device"))
        self.tokenizer = load_tokenizer(job.init_checkpoint)
        self.model = load_model(job.init_checkpoint, self.device)
        self.model.train()
        self.dropped = MalformedCounter()
        rows = read_rows(job.data_dir / "train.jsonl", SFTSample, self.dropped)
        held_path = job.data_dir / "heldout_sft.jsonl"
        if held_path.is_file():
            held = read_rows(held_path, SFTSample, self.dropped)
        else:
            order = list(range(len(rows)))
            random.Random(derive_seed(job.seed, 17)).shuffle(order)
            cut = max(1, len(rows) // 20) if len(rows) > 1 else 0
            held = [rows[i] for i in order[:cut]]
            rows = [rows[i] for i in sorted(order[cut:])]
        self.train = encode_samples(self.tokenizer, rows, self.sft.length_cap, self.dropped)
        self.held = encode_samples(self.tokenizer, held, self.sft.length_cap, self.dropped)
        if not self.train:
            raise ValueError(
                f"{job.data_dir / 'train.jsonl'}: no usable SFT rows (dropped: {self.dropped.as_dict()})"
            )
        self.schedule = self._schedule()
        self.opt, self.sched = build_optimizer(self.model, self.cfg.optimizer, len(self.schedule))

    def _schedule(self) -> list[list[list[int]]]:
        """Return, per optimizer step, the packs it trains on (epochs reshuffled with the seed)."""
        steps = []
        for epoch in range(self.sft.epochs):
            order = list(range(len(self.train)))
            random.Random(derive_seed(self.job.seed, epoch)).shuffle(order)
            packs = pack(self.train, order, self.sft.max_seq_len, self.sft.packing)
            steps += [
                packs[i : i + self.sft.global_batch] for i in range(0, len(packs), self.sft.global_batch)
            ]
        return steps

    def heldout_loss(self) -> float:
        """Return the token-mean NLL of the held-out set (NaN when there is none)."""
        if not self.held:
            return float("nan")
        total, count = 0.0, 0.0
        self.model.eval()
        with torch.no_grad():
            for i in range(0, len(self.held), 8):
                packs = [[j] for j in range(i, min(i + 8, len(self.held)))]
                batch = collate(self.held, packs, self.tokenizer.pad_token_id, self.device)
                with update_autocast(self.device, self.sft.update_dtype):
                    s, n = token_nll_sum(self.model, batch, self.sft.lean_forward)
                total, count = total + float(s), count + n
        self.model.train()
        return total / max(count, 1.0)

    def train_step(self, packs: list[list[int]]) -> dict[str, float]:
        """Run one optimizer step over ``packs`` (micro-batched); return its metrics."""
        t0 = time.perf_counter()
        n_tok = float(sum(sum(self.train[i].mask[1:]) for p in packs for i in p))
        loss_sum = 0.0
        for m in range(0, len(packs), self.sft.micro_batch):
            batch = collate(
                self.train, packs[m : m + self.sft.micro_batch], self.tokenizer.pad_token_id, self.device
            )
            with update_autocast(self.device, self.sft.update_dtype):
                s, _ = token_nll_sum(self.model, batch, self.sft.lean_forward)
            (s / n_tok).backward()
            loss_sum += float(s.detach())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optimizer.clip_grad)
        lr = float(self.sched.get_last_lr()[0])
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        seq_tokens = sum(len(self.train[i].ids) for p in packs for i in p)
        return {
            "loss": loss_sum / n_tok,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "supervised_tokens": n_tok,
            "sequences": len(packs),
            "step_seconds": seconds,
            "tokens_per_s": seq_tokens / max(seconds, 1e-9),
        }

    def _select(self, step: int, loss: float, state: dict[str, Any]) -> None:
        """Update the plateau-selection state with the held-out ``loss`` measured after ``step``."""
        patience = self.sft.plateau_patience if self.sft.select_by == "heldout_plateau" else None
        if observe_heldout(state, step, loss, patience):
            sel = self.job.checkpoints_dir / SELECTED
            ckpt.save_hf_folder(
                sel, self.model, self.tokenizer, ckpt.EXPORT_MARKER, {"step": step, "loss": loss}
            )

    def run(self) -> TrainResult:
        """Train until the schedule ends or the held-out loss plateaus, export the selection, return it."""
        job = self.job
        exported = ckpt.finished_export(job.export_dir)
        if exported is not None:
            return exported
        log = MetricsLog(job.metrics_path)
        state: dict[str, Any] = {
            "step": 0,
            "best": None,
            "selected_step": None,
            "evals_since_best": 0,
            "plateau": False,
        }
        latest = ckpt.latest_checkpoint(job.checkpoints_dir)
        if latest is not None:
            state = ckpt.load_checkpoint(latest, self.model, self.opt, self.sched)
        log.truncate_after(state["step"])
        selecting = self.sft.select_by == "heldout_plateau" and bool(self.held)
        if selecting and state["step"] == 0 and state["best"] is None:
            state["initial_heldout_loss"] = self.heldout_loss()
        every = max(1, int(job.extra.get("checkpoint_every", 1)))
        total = len(self.schedule)
        with progress(f"SFT {job.stage.id}", total, state["step"]) as advance:
            while state["step"] < total and not state["plateau"]:
                step = state["step"] + 1
                row = {"step": step, **self.train_step(self.schedule[step - 1])}
                if step % self.sft.eval_interval == 0 or step == total:
                    row["heldout_loss"] = self.heldout_loss()
                    if selecting:
                        self._select(step, row["heldout_loss"], state)
                        row["selected_step"] = state["selected_step"]
                state["step"] = step
                log.append(row)
                if step % every == 0 or step == total or state["plateau"]:
                    ckpt.save_checkpoint(job.checkpoints_dir, step, self.model, self.opt, self.sched, state)
                advance(
                    loss=row["loss"], **({"heldout": row["heldout_loss"]} if "heldout_loss" in row else {})
                )
        return self._export(state)

    def _export(self, state: dict[str, Any]) -> TrainResult:
        job = self.job
        summary = {"steps": float(state["step"]), "dropped_rows": float(self.dropped.total)}
        if state.get("initial_heldout_loss") is not None:
            summary["initial_heldout_loss"] = float(state["initial_heldout_loss"])
        selected = job.checkpoints_dir / SELECTED
        if self.sft.select_by == "heldout_plateau" and ckpt.export_complete(selected):
            step = int(state["selected_step"])
            summary["heldout_loss"] = float(state["best"])
            info = {"selected_step": step, "summary": summary, "plateau": bool(state["plateau"])}
            ckpt.export_selected(selected, job.export_dir, info)
        else:
            step = int(state["step"])
            info = {"selected_step": step, "summary": summary, "plateau": False}
            ckpt.save_hf_folder(job.export_dir, self.model, self.tokenizer, ckpt.EXPORT_MARKER, info)
        return TrainResult(job.export_dir, step, summary)


def train_sft(job: StageJob) -> TrainResult:
    """Train the SFT stage of ``job`` (resuming from its checkpoints) and return the export."""
    return SFTTrainer(job).run()
