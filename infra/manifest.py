"""The run manifest ``runs/<name>/manifest.json``: one entry per stage, written atomically.

Every change goes through :meth:`RunManifest.save`, which writes a temp file, fsyncs it and renames it,
so a run killed at any moment leaves either the previous or the next manifest, never a torn one.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra.atomic import atomic_write_json
from infra.layering import ConfigError

Status = Literal["pending", "running", "done", "failed"]
MANIFEST = "manifest.json"
TIMESTAMP_KEYS = ("started_at", "ended_at", "updated_at")


def now_iso() -> str:
    """UTC time in ISO-8601 with seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class StageEntry(BaseModel):
    """The manifest's record of one stage."""

    model_config = ConfigDict(extra="forbid")

    id: str
    folder: str
    kind: str
    status: Status = "pending"
    started_at: str | None = None
    ended_at: str | None = None
    input_checkpoint: str | None = None
    input_hash: str | None = None
    output_checkpoint: str | None = None
    output_hash: str | None = None
    config_hash: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class RunManifest(BaseModel):
    """The whole run."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    recipe_file: str
    profile: str
    seed: int
    base: dict[str, Any]
    base_checkpoint: str | None = None
    chat_template_sha256: str | None = None
    updated_at: str | None = None
    stages: list[StageEntry] = Field(default_factory=list)

    @classmethod
    def load(cls, run_dir: Path) -> RunManifest | None:
        """The manifest in ``run_dir``, or None if the run has not started."""
        path = Path(run_dir) / MANIFEST
        if not path.is_file():
            return None
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path}: not a readable run manifest ({exc}); restore it or use another run dir"
            ) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise ConfigError(f"{path}: {where}: {first['msg']}") from None

    def save(self, run_dir: Path) -> None:
        """Atomically write the manifest."""
        self.updated_at = now_iso()
        atomic_write_json(Path(run_dir) / MANIFEST, self.model_dump(mode="json"))

    def entry(self, stage_id: str) -> StageEntry:
        """The entry of ``stage_id`` (KeyError names the known ids)."""
        for e in self.stages:
            if e.id == stage_id:
                return e
        raise KeyError(f"stage {stage_id!r} is not in the manifest ({[e.id for e in self.stages]})")


def without_timestamps(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest dict with every timestamp removed (for comparing runs)."""
    out = {k: v for k, v in manifest.items() if k not in TIMESTAMP_KEYS}
    out["stages"] = [
        {k: v for k, v in s.items() if k not in TIMESTAMP_KEYS} for s in manifest.get("stages", [])
    ]
    return out
