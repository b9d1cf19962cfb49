"""RL checkpoint selection on a validation split (``eval.select_by: validation``, embedded trainer).

At tiny scale the learning rate that moves a ~1M-parameter policy within ~25 rollouts also makes its
held-out score swing by several points from one rollout to the next (stage 02's README measured it), so
the last step is a noisy draw from the run. The selector scores the stage's targets on their validation
sets (``data/validation/<metric>.jsonl``: the held-out distribution at another seed, held-out prompts left
out) every ``eval.validation_interval`` rollouts and at the last one, and keeps the best-scoring weights in
``checkpoints/selected``; the trainer exports those. Stage 00 selects by held-out plateau the same way (RA
carried SFT step 3799 of 7112). The input checkpoint is scored for reference but is not a candidate.

Scoring draws from its own seeded generator and restores the global RNG states afterwards, so a run with
selection trains exactly the weights of a run without it. It samples in ``eval.sampler_dtype``, as the
stage's evaluation does (a bf16 copy of the current weights, refreshed at every scoring).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np

from data_prep.schema import PromptRow
from infra.backends import StageJob
from infra.embedded import checkpointing as ckpt
from infra.embedded.evaluate import eval_budget, row_environment, score_rows
from infra.embedded.models import sampler_model
from infra.embedded.runtime import derive_seed, read_rows
from infra.layering import ConfigError


class ValidationSelector:
    """Scores the policy on the validation sets and keeps the best checkpoint in ``checkpoints/selected``."""

    def __init__(self, job: StageJob) -> None:
        self.job, self.cfg = job, job.stage.config.eval
        self.rows: dict[str, list[PromptRow]] = {}
        for metric in self.cfg.selecting_targets:
            path = job.validation_dir / f"{metric}.jsonl"
            if not path.is_file():
                raise ConfigError(
                    f"{path}: no validation set for target {metric!r} (eval.select_by: validation needs the "
                    "stage's data prep to write one; data_prep.rl_stage.start_manifest does)"
                )
            self.rows[metric] = read_rows(path, PromptRow)
            if not self.rows[metric]:
                raise ConfigError(f"{path}: validation set for {metric!r} is empty")
        self.selected_dir: Path = job.checkpoints_dir / ckpt.SELECTED
        self._sampler: Any = None  # the model that scores (eval.sampler_dtype; a bf16 copy or the model)

    def is_due(self, step: int, total: int) -> bool:
        """True when rollout ``step`` (1-based) of ``total`` is scored."""
        return step % self.cfg.validation_interval == 0 or step == total

    def score(self, model: Any, tokenizer: Any, stage_env: Any) -> float:
        """Mean over the selecting targets of avg@``validation_samples`` on their validation sets."""
        rng = ckpt.rng_state()
        was_training = model.training
        model.eval()
        self._sampler = sampler = sampler_model(model, self.cfg.sampler_dtype, self._sampler)
        try:
            scores = []
            for metric, rows in self.rows.items():
                env = row_environment(rows[0], stage_env, self.job.stage.config.reward)
                value, _ = score_rows(
                    sampler,
                    tokenizer,
                    rows,
                    self.job.stage.config.reward,
                    samples_per_prompt=self.cfg.validation_samples,
                    temperature=self.cfg.temperature,
                    max_new_tokens=eval_budget(self.job),
                    seed=derive_seed(self.job.seed, zlib.crc32(f"validation:{metric}".encode())),
                    environment=env,
                    drop_finished=self.cfg.drop_finished_rows,
                    eager_decode=self.cfg.eager_decode,
                )
                scores.append(value)
        finally:
            model.train(was_training)
            ckpt.set_rng_state(rng)
        return float(np.mean(scores))

    def observe(self, step: int, score: float, state: dict[str, Any], model: Any, tokenizer: Any) -> bool:
        """Record ``score`` of rollout ``step`` in ``state``; on a new best save the weights. True if so."""
        best = state.get("best")
        if best is not None and score <= best:
            return False
        state.update(best=score, selected_step=step)
        ckpt.save_hf_folder(
            self.selected_dir, model, tokenizer, ckpt.EXPORT_MARKER, {"step": step, "score": score}
        )
        return True

    def ready(self, state: dict[str, Any]) -> bool:
        """True when ``checkpoints/selected`` holds the weights ``state`` names."""
        if state.get("selected_step") is None or not ckpt.export_complete(self.selected_dir):
            return False
        return ckpt.read_export_info(self.selected_dir).get("step") == state["selected_step"]
