"""``manifest.json`` for every data-prep run: what went in, what each step kept, what came out.

Records sources (hub ids, revisions, licenses), the count after each step, the decontamination report,
malformed-row counts by reason, the sha256 of the code that ran and of every output file. Written
atomically so a crashed run never leaves a manifest that describes outputs it did not finish.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from data_prep.io import atomic_write_text, sha256_file

_PACKAGE_DIR = Path(__file__).resolve().parent


def code_hash(paths: list[str | Path] | None = None) -> str:
    """sha256 over the given source files (default: every ``data_prep`` module), in sorted path order."""
    files = sorted(Path(p) for p in paths) if paths else sorted(_PACKAGE_DIR.glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class Manifest:
    """Accumulates a run's facts; :meth:`write` puts them in ``manifest.json``."""

    def __init__(
        self, kind: str, args: dict[str, Any] | None = None, code_files: list[str | Path] | None = None
    ):
        self.data: dict[str, Any] = {
            "kind": kind,
            "created_unix": int(time.time()),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "args": args or {},
            "script_sha256": code_hash(code_files),
            "sources": [],
            "steps": [],
            "malformed": {"total": 0, "by_reason": {}, "examples": []},
            "decontamination": None,
            "outputs": {},
        }

    def add_source(self, entry: dict[str, Any]) -> None:
        """Record one input source (hub id, revision, license…)."""
        self.data["sources"].append(entry)

    def step(self, name: str, count: int, **extra: Any) -> None:
        """Record the number of rows left after step ``name``."""
        self.data["steps"].append({"step": name, "count": count, **extra})

    def set(self, key: str, value: Any) -> None:
        """Set a top-level field (e.g. ``decontamination``, ``malformed``)."""
        self.data[key] = value

    def add_output(self, path: str | Path, sha256: str | None = None) -> None:
        """Record an output file and its sha256 (computed if not given)."""
        path = Path(path)
        self.data["outputs"][path.name] = {"path": str(path), "sha256": sha256 or sha256_file(path)}

    def write(self, path: str | Path) -> dict[str, Any]:
        """Write ``manifest.json`` atomically and return its content."""
        atomic_write_text(path, json.dumps(self.data, indent=2, sort_keys=False, default=str) + "\n")
        return self.data
