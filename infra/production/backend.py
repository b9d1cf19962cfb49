"""``ProductionBackend``: the driver's backend for the production profile (render, write, optionally run).

No GPU exists where the driver's dry run happens, so ``train`` renders the stage's commands into
``<stage_dir>/launch/`` (``commands.sh``, ``rayjob.yaml``, ``argv.json``) and returns a
:class:`TrainResult` pointing at where the cluster writes the HF export, with ``summary={"dry_run": 1}``.
Only when ``job.extra["execute"]`` is true does it run the head-node steps for real. Evaluation and
checkpoint loading need the model on GPUs, so on a dry run they report nothing rather than invent scores.
"""

from __future__ import annotations

import json
from pathlib import Path

from infra.backends import StageJob, TrainResult
from infra.production.cluster import ClusterProfile
from infra.production.plan import (
    cluster_stage_files,
    commands_sh,
    execute_plan,
    render_stage,
    stage_setup_steps,
)
from infra.production.validate import validate_plan
from infra.recipe import BaseModelSpec


class ProductionBackend:
    """Renders slime + Megatron + SGLang commands per stage; executes them only when asked."""

    name = "production"

    def __init__(self, cluster: ClusterProfile | None = None) -> None:
        self.cluster = cluster or ClusterProfile()

    def materialize_base(self, spec: BaseModelSpec, dest: Path, seed: int) -> Path:
        """Return the base model's HF folder on the cluster's shared storage (downloaded there beforehand)."""
        return Path(self.cluster.base_hf(spec.model))

    def train(self, job: StageJob) -> TrainResult:
        """Write ``launch/`` for the stage, refuse a plan with problems, run it when ``extra['execute']``."""
        plan = render_stage(
            job.stage.id,
            job.stage.config,
            str(job.init_checkpoint),
            self.cluster,
            job.run_name or "rufus-air",
            job.seed,
            cluster_stage_files(job.stage, self.cluster),
            setup=stage_setup_steps(job.stage, self.cluster),
        )
        problems = validate_plan([plan])
        launch = job.stage_dir / "launch"
        launch.mkdir(parents=True, exist_ok=True)
        (launch / "commands.sh").write_text(commands_sh(plan))
        (launch / "rayjob.yaml").write_text("---\n".join(plan.rayjobs.values()))
        (launch / "argv.json").write_text(
            json.dumps(
                {
                    "stage": plan.stage,
                    "nodes": plan.nodes,
                    "commands": [s.argv for s in plan.steps],
                    "files": plan.files,
                    "problems": problems,
                },
                indent=2,
            )
        )
        if problems:
            raise ValueError(f"{job.stage.id}: rendered commands fail validation:\n" + "\n".join(problems))
        if job.extra.get("execute"):
            execute_plan([plan])
            return TrainResult(export_dir=Path(plan.export_hf), summary={"dry_run": 0})
        return TrainResult(export_dir=Path(plan.export_hf), summary={"dry_run": 1})

    def evaluate(self, job: StageJob, checkpoint: Path) -> dict[str, float]:
        """Held-out scores come from slime's eval rollouts on the cluster (W&B); a dry run has none."""
        return {}

    def check_loads(self, checkpoint: Path) -> None:
        """On the cluster ``handoff verify`` checks the export; a dry run only requires a path."""
        if not str(checkpoint):
            raise ValueError("empty checkpoint path")
