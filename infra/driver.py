"""The stage driver: runs a recipe's stages in order and hands each verified checkpoint to the next.

Per stage: verify the input handoff → prepare data (cached) → train (the backend resumes from its own
checkpoints) → evaluate input and output checkpoints → write and verify the output handoff → record.
A stage is marked ``done`` only after its handoff verifies, so a failed or killed stage never hands
anything forward. Re-running skips stages that are done with matching config and input hashes and resumes
the interrupted one; killing the driver at any moment and re-running gives the same final manifest (apart
from timestamps) as an uninterrupted run.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from infra.atomic import atomic_write_json, atomic_write_text
from infra.backend_registry import get_backend
from infra.backends import Backend, StageJob
from infra.handoff import (
    HANDOFF,
    HandoffError,
    TamperedHandoffError,
    export_path,
    read_handoff,
    verify_handoff,
    write_handoff,
)
from infra.hashing import sha256_json
from infra.layering import ConfigError
from infra.manifest import RunManifest, StageEntry, now_iso
from infra.prep import run_data_prep
from infra.recipe import REPO_ROOT, LoadedRecipe, ResolvedStage, dump_resolved

BASE_DIR = "base"


@dataclass
class Selection:
    """Which stages of the recipe to run."""

    start: str | None = None
    until: str | None = None
    only: str | None = None

    def pick(self, ids: list[str]) -> list[str]:
        """The selected ids, in recipe order; unknown names and empty selections are errors."""
        for name in (self.start, self.until, self.only):
            if name is not None and name not in ids:
                raise ConfigError(f"no stage {name!r} in the recipe; stages are {ids}")
        if self.only:
            if self.start or self.until:
                raise ConfigError("--only runs one stage: it cannot be combined with --from or --until")
            return [self.only]
        lo = ids.index(self.start) if self.start else 0
        hi = ids.index(self.until) + 1 if self.until else len(ids)
        if lo >= hi:
            raise ConfigError(
                f"--from {self.start} --until {self.until} selects no stage: {self.until!r} comes before "
                f"{self.start!r} in the recipe ({' → '.join(ids)})"
            )
        return ids[lo:hi]


def _relative(path: Path, run_dir: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(run_dir).resolve()).as_posix()
    except ValueError:
        return str(Path(path).resolve())


class Driver:
    """Runs the stages of one loaded recipe in one run directory."""

    def __init__(
        self,
        loaded: LoadedRecipe,
        run_dir: Path,
        *,
        backend: Backend | None = None,
        console: Console | None = None,
        seed: int | None = None,
        extra: dict[str, Any] | None = None,
        rebuild: tuple[str, ...] = (),
    ) -> None:
        self.loaded = loaded
        self.recipe = loaded.recipe
        self.run_dir = Path(run_dir)
        self.backend = backend or get_backend(self.recipe.profile)
        self.console = console or Console()
        self.seed = self.recipe.seed if seed is None else seed
        self.extra = extra or {}
        known = {BASE_DIR, *(s.id for s in loaded.stages)}
        unknown = sorted(set(rebuild) - known)
        if unknown:
            raise ConfigError(f"--rebuild {', '.join(unknown)}: not a stage of the recipe (nor 'base')")
        self.rebuild = set(rebuild)

    # ----------------------------------------------------------------- manifest
    def _manifest(self) -> RunManifest:
        m = RunManifest.load(self.run_dir)
        base = self.recipe.base.model_dump(mode="json")
        if m is not None and (m.profile != self.recipe.profile or m.base != base or m.seed != self.seed):
            raise ConfigError(
                f"{self.run_dir}: holds a run with another base/profile/seed "
                f"({m.base}, {m.profile}, seed {m.seed}); use another --run-dir"
            )
        if m is None:
            m = RunManifest(
                recipe=self.recipe.name,
                recipe_file=str(self.loaded.path),
                profile=self.recipe.profile,
                seed=self.seed,
                base=base,
            )
        elif m.recipe != self.recipe.name or m.recipe_file != str(self.loaded.path):
            self.console.print(
                f"[yellow]![/] {self.run_dir}: continuing a run of recipe {m.recipe!r} ({m.recipe_file}) "
                f"with {self.recipe.name!r} ({self.loaded.path}); stages with equal ids, configs and inputs "
                "are kept, the manifest now names the new recipe",
                highlight=False,
            )
            m.recipe, m.recipe_file = self.recipe.name, str(self.loaded.path)
        known = {e.id: e for e in m.stages}
        m.stages = [
            known.get(s.id) or StageEntry(id=s.id, folder=_relative(s.folder, REPO_ROOT), kind=s.config.kind)
            for s in self.loaded.stages
        ]
        return m

    # --------------------------------------------------------------------- base
    def _signed_or_refuse(self, name: str, stage_dir: Path, expected_template: str | None = None) -> bool:
        """True when ``stage_dir`` holds a handoff its files (and chat template) still match; False when none.

        A handoff whose files no longer match is never re-signed: the run stops with the file named,
        unless ``--rebuild NAME`` asked to delete that output and build it again from its verified input.
        """
        if not (stage_dir / HANDOFF).is_file():
            return False
        try:
            verify_handoff(stage_dir, expected_template=expected_template)
            return True
        except HandoffError as exc:
            if name not in self.rebuild:
                raise TamperedHandoffError(
                    f"{exc}; refusing to re-sign it: restore the files, or run again with --rebuild {name} "
                    f"to delete and rebuild {stage_dir}"
                ) from None
        self.console.print(f"[yellow]![/] {name}: --rebuild: deleting {stage_dir} outputs and rebuilding")
        _clear_outputs(stage_dir)
        return False

    def _base(self, manifest: RunManifest) -> Path:
        """Materialize and hand off the base checkpoint (once); return its stage-like dir."""
        base_dir = self.run_dir / BASE_DIR
        if not self._signed_or_refuse(BASE_DIR, base_dir):
            # Never sign files left by an interrupted earlier attempt: the base is rebuilt from its spec.
            if (base_dir / "export").exists():
                shutil.rmtree(base_dir / "export")
            export = self.backend.materialize_base(self.recipe.base, base_dir / "export", self.seed)
            write_handoff(
                base_dir,
                export,
                stage=BASE_DIR,
                lineage={"base": self.recipe.base.model_dump(mode="json"), "parent": None, "chain": []},
                config_hash=sha256_json(self.recipe.base.model_dump(mode="json")),
                metrics={},
            )
        if manifest.base_checkpoint is None:
            manifest.base_checkpoint = _relative(export_path(base_dir, read_handoff(base_dir)), self.run_dir)
            manifest.save(self.run_dir)
        return base_dir

    # -------------------------------------------------------------------- run
    def run(self, selection: Selection | None = None, dry_run: bool = False) -> RunManifest:
        """Run the selected stages; returns the final manifest."""
        selection = selection or Selection()
        ids = [s.id for s in self.loaded.stages]
        chosen = selection.pick(ids)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        manifest = self._manifest()
        if dry_run:
            return self._dry_run(manifest, chosen)
        manifest.save(self.run_dir)
        prev_dir = self._base(manifest)
        for stage in self.loaded.stages:
            if stage.id not in chosen:
                entry = manifest.entry(stage.id)
                if ids.index(stage.id) < ids.index(chosen[0]):
                    if entry.status != "done":
                        raise ConfigError(
                            f"cannot start at {chosen[0]!r}: earlier stage {stage.id!r} is {entry.status}"
                        )
                    prev_dir = self.run_dir / stage.id
                continue
            prev_dir = self.run_stage(manifest, stage, prev_dir)
        return manifest

    def _dry_run(self, manifest: RunManifest, chosen: list[str]) -> RunManifest:
        """Resolve and write each chosen stage's config; train nothing."""
        for stage in self.loaded.stages:
            if stage.id in chosen:
                stage_dir = self.run_dir / stage.id
                atomic_write_text(stage_dir / "config.resolved.yaml", dump_resolved(stage))
                self.console.print(
                    f"[cyan]dry run[/] {stage.id}: config → {stage_dir / 'config.resolved.yaml'}"
                )
        return manifest

    def _expected_template(self, manifest: RunManifest) -> str | None:
        return manifest.chat_template_sha256

    def run_stage(self, manifest: RunManifest, stage: ResolvedStage, input_dir: Path) -> Path:
        """Run one stage from the handoff in ``input_dir``; returns the stage dir (its handoff)."""
        entry = manifest.entry(stage.id)
        stage_dir = self.run_dir / stage.id
        in_record = verify_handoff(
            input_dir,
            expected_template=self._expected_template(manifest),
            check_loads=self.backend.check_loads,
        )
        input_hash = in_record["content_hash"]
        changed = entry.config_hash not in (None, stage.config_hash) or entry.input_hash not in (
            None,
            input_hash,
        )
        if changed:
            # Config or input changed: old checkpoints must not be resumed from.
            if any((stage_dir / sub).exists() for sub in STAGE_OUTPUTS):
                what = "config" if entry.config_hash != stage.config_hash else "input checkpoint"
                self.console.print(
                    f"[yellow]![/] {stage.id}: its {what} changed since the last run in {stage_dir}: "
                    "deleting its checkpoints, export and evaluations and training it again",
                    highlight=False,
                )
            _clear_outputs(stage_dir)
        elif self._signed_or_refuse(stage.id, stage_dir, self._expected_template(manifest)) and (
            entry.status == "done"
        ):
            self.console.print(f"[green]✓[/] {stage.id}: done, hashes match — skipped")
            return stage_dir
        resuming = entry.status == "running" and entry.started_at is not None
        entry.started_at = entry.started_at if resuming else now_iso()
        entry.status = "running"
        entry.ended_at = None
        entry.error = None
        entry.output_checkpoint = entry.output_hash = None
        entry.metrics = {}
        entry.config_hash = stage.config_hash
        entry.input_hash = input_hash
        entry.input_checkpoint = _relative(export_path(input_dir, in_record), self.run_dir)
        manifest.save(self.run_dir)
        self.console.rule(f"[bold]{stage.id}[/] — {stage.config.title}")
        try:
            record = self._execute(stage, stage_dir, input_dir, in_record, manifest)
        except BaseException as exc:
            entry.status = "failed"
            entry.ended_at = now_iso()
            entry.error = f"{type(exc).__name__}: {exc}"[:2000]
            manifest.save(self.run_dir)
            raise
        entry.status = "done"
        entry.ended_at = now_iso()
        entry.output_checkpoint = _relative(export_path(stage_dir, record), self.run_dir)
        entry.output_hash = record["content_hash"]
        entry.metrics = record["metrics"]
        if stage.config.kind == "sft" or manifest.chat_template_sha256 is None:
            manifest.chat_template_sha256 = record["chat_template_sha256"]
        manifest.save(self.run_dir)
        return stage_dir

    def _execute(
        self,
        stage: ResolvedStage,
        stage_dir: Path,
        input_dir: Path,
        in_record: dict[str, Any],
        manifest: RunManifest,
    ) -> dict[str, Any]:
        init_ckpt = export_path(input_dir, in_record)
        atomic_write_text(stage_dir / "config.resolved.yaml", dump_resolved(stage))
        (stage_dir / "logs").mkdir(parents=True, exist_ok=True)
        job = StageJob(
            stage=stage,
            stage_dir=stage_dir,
            init_checkpoint=init_ckpt,
            seed=self.seed,
            run_name=self.recipe.name,
            extra=dict(self.extra),
        )
        self.console.print(f"[cyan]data[/] {stage.id}: preparing (cached by input hash)")
        run_data_prep(
            stage,
            job.data_dir,
            seed=self.seed,
            tokenizer_dir=init_ckpt,
            input_hash=in_record["content_hash"],
            console=self.console,
        )
        eval_in = self._eval_cached(job, init_ckpt, stage_dir / "eval_input.json", in_record["content_hash"])
        self.console.print(f"[cyan]train[/] {stage.id} from {init_ckpt}")
        result = self.backend.train(job)
        out_eval = self.backend.evaluate(job, result.export_dir)
        eval_cfg = stage.config.eval
        atomic_write_json(
            stage_dir / "eval.json",
            {
                "input": eval_in,
                "output": out_eval,
                "targets": eval_cfg.targets,
                "guardrails": eval_cfg.guardrails,
            },
        )
        metrics: dict[str, Any] = dict(out_eval)
        if result.selected_step is not None:
            metrics["selected_step"] = result.selected_step
        parent = in_record.get("stage")
        chain = list(in_record.get("lineage", {}).get("chain", [])) + [stage.id]
        record = write_handoff(
            stage_dir,
            result.export_dir,
            stage=stage.id,
            lineage={"base": manifest.base, "parent": parent, "chain": chain},
            config_hash=stage.config_hash,
            metrics=metrics,
        )
        expected = self._expected_template(manifest)
        if stage.config.kind == "sft":
            expected = record["chat_template_sha256"]
        return verify_handoff(stage_dir, expected_template=expected, check_loads=self.backend.check_loads)

    def _eval_cached(self, job: StageJob, ckpt: Path, path: Path, ckpt_hash: str) -> dict[str, float]:
        """Evaluate the input checkpoint once per (checkpoint, held-out data)."""
        key = sha256_json({"ckpt": ckpt_hash, "data": (job.data_dir / ".prep.json").read_text()})
        if path.is_file():
            cached = json.loads(path.read_text())
            if cached.get("key") == key:
                return cached["metrics"]
        metrics = self.backend.evaluate(job, ckpt)
        atomic_write_json(path, {"key": key, "metrics": metrics})
        return metrics


#: What a stage writes into its folder besides its config and data (deleted when it must be rebuilt).
STAGE_OUTPUTS = ("checkpoints", "export", HANDOFF, "eval.json", "metrics.jsonl", "eval_input.json")


def _clear_outputs(stage_dir: Path) -> None:
    """Delete a stage's outputs (checkpoints, export, handoff, evaluations, metrics)."""
    for sub in STAGE_OUTPUTS:
        p = stage_dir / sub
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
