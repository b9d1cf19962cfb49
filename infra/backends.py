"""The contract between the driver and a training backend, and the per-stage run directory layout.

The driver owns the run directory, the manifest, data-prep caching and handoff verification; a backend
only trains, evaluates and loads checkpoints. Both backends (``embedded``: local CPU/GPU training;
``production``: slime commands) see the same :class:`StageJob`. This module is the contract only and
imports neither backend; ``infra.backend_registry.get_backend`` picks the backend of a profile.

Run directory of one stage (``runs/<name>/<stage>/``)::

    config.resolved.yaml   resolved stage config (all layers applied)
    data/                  data prep output: train.jsonl, heldout/<metric>.jsonl, manifest.json
    checkpoints/           backend checkpoints (resume points), backend-specific layout
    export/                HF-format export of the selected checkpoint (what the next stage loads)
    eval.json              {"input": {m: v}, "output": {m: v}, "targets": [...], "guardrails": [...]}
    metrics.jsonl          one JSON object per training step, with a "step" key
    handoff.json           hashes, chat-template hash, lineage, config hash, commit, metrics
    logs/                  free-form logs
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from infra.recipe import BaseModelSpec, ResolvedStage


@dataclass
class StageJob:
    """Everything a backend needs to train or evaluate one stage."""

    stage: ResolvedStage
    stage_dir: Path
    init_checkpoint: Path
    seed: int
    run_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.stage_dir / "data"

    @property
    def checkpoints_dir(self) -> Path:
        return self.stage_dir / "checkpoints"

    @property
    def export_dir(self) -> Path:
        return self.stage_dir / "export"

    @property
    def metrics_path(self) -> Path:
        return self.stage_dir / "metrics.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.stage_dir / "logs"

    @property
    def heldout_dir(self) -> Path:
        return self.data_dir / "heldout"

    @property
    def validation_dir(self) -> Path:
        """Validation sets for RL checkpoint selection (``eval.select_by: validation``)."""
        return self.data_dir / "validation"


@dataclass
class TrainResult:
    """What training produced: the export folder and a few headline numbers."""

    export_dir: Path
    selected_step: int | None = None
    summary: dict[str, float] = field(default_factory=dict)


class Backend(Protocol):
    """A training backend (see ``infra.embedded.backend`` and ``infra.production.backend``)."""

    name: str

    def materialize_base(self, spec: BaseModelSpec, dest: Path, seed: int) -> Path:
        """Write the base checkpoint as an HF folder under ``dest`` (idempotent) and return it."""
        ...

    def train(self, job: StageJob) -> TrainResult:
        """Train the stage from ``job.init_checkpoint``, resuming from ``job.checkpoints_dir`` if present."""
        ...

    def evaluate(self, job: StageJob, checkpoint: Path) -> dict[str, float]:
        """Score ``checkpoint`` on the stage's held-out sets (``job.heldout_dir``/<metric>.jsonl)."""
        ...

    def check_loads(self, checkpoint: Path) -> None:
        """Raise if the HF folder does not load (config, tokenizer, weights)."""
        ...
