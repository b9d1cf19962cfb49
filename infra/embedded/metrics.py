"""Append-only per-step metrics (``metrics.jsonl``) that stay consistent across crashes and resumes.

A step's line is written (and fsynced) before its checkpoint; on resume, lines of steps after the restored
checkpoint are cut, so a resumed run's file is byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Wall-clock metrics: the only keys that differ between a resumed and an uninterrupted run.
TIMING_KEYS = ("step_seconds", "rollout_seconds", "tokens_per_s")


class MetricsLog:
    """One JSON object per line, each with a ``step`` key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        """Drop lines whose step is greater than ``step`` (and any torn last line)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and int(row.get("step", 0)) <= step:
                kept.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(k + "\n" for k in kept))
        os.replace(tmp, self.path)

    def append(self, row: dict[str, Any]) -> None:
        """Append one step's metrics durably."""
        if "step" not in row:
            raise ValueError("metrics row needs a 'step' key")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def rows(self) -> list[dict[str, Any]]:
        """Return every row written so far."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
