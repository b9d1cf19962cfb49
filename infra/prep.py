"""Running a stage's data prep, cached by a hash of its inputs.

A stage folder's ``data_prep.py`` exposes ``prepare(ctx: PrepContext) -> dict`` (plus an optional pydantic
``Params`` model for its ``data`` section). It writes into ``ctx.out_dir``: ``train.jsonl`` (or
``sft.jsonl``), ``heldout/<metric>.jsonl`` for each eval metric, and ``manifest.json``. The driver runs it
in a temporary folder and renames it into place, so an interrupted prep is simply redone, and skips it
when the cache key (data-prep code, parameters, seed, profile, input checkpoint) is unchanged.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from infra.hashing import sha256_file, sha256_json
from infra.recipe import ResolvedStage

PREP_RECORD = ".prep.json"


@dataclass
class PrepContext:
    """What a stage's ``prepare`` receives."""

    stage: ResolvedStage
    out_dir: Path
    seed: int
    profile: str
    tokenizer_dir: Path | None = None
    console: Console = field(default_factory=Console)

    @property
    def params(self) -> Any:
        """The stage's validated data parameters (its ``Params`` model, or the raw dict)."""
        return self.stage.data_params

    @property
    def heldout_dir(self) -> Path:
        return self.out_dir / "heldout"


def _package_code_hash() -> str:
    """SHA-256 over every source file of the ``data_prep`` package (stage preps delegate to it)."""
    root = Path(__file__).resolve().parent.parent / "data_prep"
    return sha256_json({p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*.py"))})


def prep_key(stage: ResolvedStage, seed: int, input_hash: str | None) -> str:
    """Cache key of a stage's data: its code (and the data_prep package), parameters, seed, profile, input.

    The input checkpoint counts whole (weights and tokenizer): length caps use its chat template and
    warm-up filters (Coding RL's drop-all-pass) sample from its weights.
    """
    return sha256_json(
        {
            "data_prep": sha256_file(stage.folder / "data_prep.py"),
            "data_prep_package": _package_code_hash(),
            "data": stage.resolved.get("data"),
            "eval": stage.resolved.get("eval"),
            "seed": seed,
            "profile": stage.profile,
            "input": input_hash,
        }
    )


def run_data_prep(
    stage: ResolvedStage,
    data_dir: Path,
    *,
    seed: int,
    tokenizer_dir: Path | None,
    input_hash: str | None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Prepare ``data_dir`` unless its record matches; returns the prep summary."""
    key = prep_key(stage, seed, input_hash)
    record_path = data_dir / PREP_RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        if record.get("key") == key:
            return record.get("summary", {})
    tmp = data_dir.with_name(data_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    ctx = PrepContext(
        stage=stage,
        out_dir=tmp,
        seed=seed,
        profile=stage.profile,
        tokenizer_dir=tokenizer_dir,
        console=console or Console(),
    )
    summary = stage.module("data_prep").prepare(ctx) or {}
    # The prep wrote into the temporary folder; paths it reports must name the folder it is renamed to.
    record = json.dumps({"key": key, "summary": summary}, indent=2, default=str)
    record = record.replace(str(tmp), str(data_dir))
    (tmp / PREP_RECORD).write_text(record)
    manifest = tmp / "manifest.json"
    if manifest.is_file():  # data-prep manifests name their outputs by path, too
        manifest.write_text(manifest.read_text().replace(str(tmp), str(data_dir)))
    summary = json.loads(record)["summary"]
    if data_dir.exists():
        shutil.rmtree(data_dir)
    tmp.rename(data_dir)
    return summary
