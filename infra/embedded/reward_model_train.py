"""Training the embedded scale's Bradley–Terry reward model (the stand-in for Skywork-Reward-V2) with TRL.

A small Llama-style sequence classifier (one output, the last real token pooled) with the micro model's
offline tokenizer, initialised from a fixed seed and trained with TRL's ``RewardTrainer`` (loss
``-log σ(r_chosen − r_rejected)``) on labelled preference pairs. The pairs are tokenized here with
:func:`rewards.reward_model.render_ids`, the very function the local reward-model client scores with, so
training and scoring see the same tokens (TRL would otherwise apply its own template and EOS rule).
The folder is an ordinary HF checkpoint: ``rewards.reward_model.LocalRewardModel`` loads it.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from infra.embedded.chat_format import install_glm_markup
from infra.embedded.checkpointing import atomic_folder
from infra.embedded.runtime import progress
from infra.embedded.tokenizer_build import EOS_TOKEN, build_micro_tokenizer

COMPLETE_MARKER = ".trained"


class RewardModelTraining(BaseModel):
    """Shape and optimisation of the embedded reward model."""

    model_config = ConfigDict(extra="forbid")
    hidden_size: int = Field(64, ge=8)
    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    epochs: int = Field(3, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    seed: int = Field(0, description="Initialisation and data order (one reward model for every run seed).")


def _build(cfg: RewardModelTraining) -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(cfg.seed)
    tokenizer = build_micro_tokenizer(0)
    install_glm_markup(tokenizer)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokenizer.pad_token = EOS_TOKEN
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=3 * cfg.hidden_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=1024,
        num_labels=1,
        pad_token_id=eos,
        eos_token_id=eos,
    )
    return LlamaForSequenceClassification(config), tokenizer


def train_reward_model(
    pairs: Sequence[dict[str, Any]], out_dir: Path, cfg: RewardModelTraining, heldout: Sequence[dict] = ()
) -> dict[str, Any]:
    """Train on ``pairs`` (``prompt`` messages, ``chosen``, ``rejected`` response texts), save to ``out_dir``.

    Returns the training summary (pairs, steps, final loss, pairwise accuracy on ``heldout`` pairs), also
    written as ``out_dir/training.json``.
    """
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import RewardConfig, RewardTrainer

    from rewards.reward_model import pairwise_accuracy, render_ids

    model, tokenizer = _build(cfg)
    rows = [
        {
            "chosen_ids": render_ids(tokenizer, p["prompt"], p["chosen"]),
            "rejected_ids": render_ids(tokenizer, p["prompt"], p["rejected"]),
        }
        for p in pairs
    ]
    with atomic_folder(out_dir, f".{out_dir.name}.") as tmp:
        args = RewardConfig(
            output_dir=str(tmp / "trainer"),
            num_train_epochs=cfg.epochs,
            learning_rate=cfg.lr,
            per_device_train_batch_size=cfg.batch_size,
            lr_scheduler_type="cosine",
            warmup_steps=10,
            seed=cfg.seed,
            data_seed=cfg.seed,
            save_strategy="no",
            report_to=[],
            logging_steps=10,
            disable_tqdm=True,
            use_cpu=True,
            dataloader_num_workers=0,
            center_rewards_coefficient=0.01,  # keeps scores near 0 (BT leaves the offset free)
        )
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            trainer = RewardTrainer(
                model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
            )
            trainer.remove_callback(PrinterCallback)  # the log history goes to training.json instead
            steps = math.ceil(len(rows) / cfg.batch_size) * cfg.epochs
            with progress("reward model (Bradley–Terry)", steps) as advance:

                class _Bar(TrainerCallback):
                    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
                        last = state.log_history[-1] if state.log_history else {}
                        advance(**{k: float(last[k]) for k in ("loss", "accuracy") if k in last})

                trainer.add_callback(_Bar())
                result = trainer.train()
        finally:
            hf_logging.set_verbosity(verbosity)
        model.eval()
        shutil.rmtree(tmp / "trainer", ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        summary = {
            "pairs": len(rows),
            "steps": int(result.global_step),
            "train_loss": round(float(result.training_loss), 4),
            "config": cfg.model_dump(),
            "heldout_pairs": len(heldout),
            "heldout_accuracy": pairwise_accuracy(model, tokenizer, heldout) if heldout else None,
            "log": [
                {k: round(float(v), 4) for k, v in e.items() if k in ("step", "loss", "accuracy", "margin")}
                for e in trainer.state.log_history
                if "loss" in e
            ],
        }
        (tmp / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        (tmp / COMPLETE_MARKER).write_text("ok\n")
    return summary


__all__ = ["COMPLETE_MARKER", "RewardModelTraining", "train_reward_model"]
