"""``rufus stage``: one stage alone — data prep, training and/or evaluation — from any HF checkpoint.

Outside a recipe there is no manifest and no chain: the input is hashed as an external checkpoint
(``infra.handoff.external_checkpoint_record``), the stage writes into its own folder, and a training
step writes a handoff like the driver's so the export can start another stage. Each call records its seed,
input and config in the stage folder (``stage_run.json``), so ``rufus seeds`` and ``rufus report`` read a
``--run-dir`` of stage-alone runs as they read a recipe's run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from eval.stagewise import STAGE_RUN
from infra.atomic import atomic_write_json, atomic_write_text
from infra.backend_registry import get_backend
from infra.backends import Backend, StageJob
from infra.handoff import write_handoff
from infra.layering import ConfigError
from infra.prep import run_data_prep
from infra.recipe import ResolvedStage, dump_resolved


def run_single_stage(
    stage: ResolvedStage,
    init_from: Path,
    stage_dir: Path,
    steps: tuple[str, ...],
    *,
    seed: int = 0,
    backend: Backend | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """``rufus stage``: prep/train/eval one stage alone from any HF checkpoint."""
    from infra.handoff import external_checkpoint_record

    backend = backend or get_backend(stage.profile)
    console = console or Console()
    record = external_checkpoint_record(init_from)
    try:
        backend.check_loads(Path(record["export"]))
    except ValueError as exc:
        raise ConfigError(f"--init-from {init_from}: {exc}") from None
    init_ckpt = Path(record["export"])
    job = StageJob(stage=stage, stage_dir=stage_dir, init_checkpoint=init_ckpt, seed=seed, run_name=stage.id)
    atomic_write_text(stage_dir / "config.resolved.yaml", dump_resolved(stage))
    run_record = {"seed": seed, "init_from": str(init_from), "input_hash": record["content_hash"],
                  "config_hash": stage.config_hash}  # fmt: skip
    atomic_write_json(stage_dir / STAGE_RUN, run_record)  # read by `rufus seeds` / `rufus report`
    out: dict[str, Any] = {}
    run_data_prep(
        stage,
        job.data_dir,
        seed=seed,
        tokenizer_dir=init_ckpt,
        input_hash=record["content_hash"],
        console=console,
    )
    out["data"] = str(job.data_dir)
    if "train" in steps:
        result = backend.train(job)
        rec = write_handoff(
            stage_dir,
            result.export_dir,
            stage=stage.id,
            lineage={"base": str(init_ckpt), "parent": None, "chain": [stage.id]},
            config_hash=stage.config_hash,
            metrics=dict(result.summary),
        )
        out["export"] = str(result.export_dir)
        out["handoff"] = rec["content_hash"]
    if "eval" in steps:
        evals = {"input": backend.evaluate(job, init_ckpt)}
        if job.export_dir.is_dir() and (stage_dir / "handoff.json").is_file():
            evals["output"] = backend.evaluate(job, job.export_dir)
        evals["targets"] = stage.config.eval.targets
        evals["guardrails"] = stage.config.eval.guardrails
        atomic_write_json(stage_dir / "eval.json", evals)
        out["eval"] = evals
    return out
