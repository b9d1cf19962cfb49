"""Exact-resume checkpoints and the atomic HF export.

A checkpoint ``checkpoints/step-NNNNNNNN/`` holds the model and optimizer/scheduler state, the RNG states
(python, numpy, torch CPU and CUDA) and the trainer's own state (data cursor, best score…) as JSON. It is
written into a temporary folder and renamed, so every ``step-*`` folder is complete; older ones are then
deleted. Restoring it and continuing gives the same weights and metrics as never having stopped.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from infra.atomic import default_mode
from infra.backends import TrainResult

EXPORT_MARKER = ".export_complete"
_PREFIX = "step-"
#: ``checkpoints/selected/``: the HF folder of the checkpoint a trainer's selection rule holds (SFT held-out
#: plateau, RL validation); exported at the end instead of the last weights.
SELECTED = "selected"


def rng_state() -> dict[str, Any]:
    """Return the python, numpy and torch RNG states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore states captured by :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def atomic_folder(dest: Path, prefix: str) -> Iterator[Path]:
    """Yield a new temp folder beside ``dest`` (named ``prefix``…) that replaces ``dest`` once the block ends.

    When the block raises, the temp folder is removed and ``dest`` is left as it was.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    default_mode(tmp, folder=True)
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def latest_checkpoint(root: Path) -> Path | None:
    """Return the newest complete ``step-*`` folder under ``root``, or None."""
    if not Path(root).is_dir():
        return None
    steps = sorted(p for p in Path(root).iterdir() if p.is_dir() and p.name.startswith(_PREFIX))
    return steps[-1] if steps else None


def save_checkpoint(
    root: Path, step: int, model: torch.nn.Module, optimizer: Any, scheduler: Any, trainer_state: dict
) -> Path:
    """Atomically write the resume point of ``step`` and delete older ``step-*`` folders."""
    root = Path(root)
    final = root / f"{_PREFIX}{step:08d}"
    with atomic_folder(final, ".tmp-") as tmp:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_state(),
            },
            tmp / "state.pt",
        )
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, sort_keys=True, indent=1))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    for old in root.iterdir():
        if old.is_dir() and old.name.startswith(_PREFIX) and old != final:
            shutil.rmtree(old)
        elif old.is_dir() and old.name.startswith(".tmp-"):
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: Any, scheduler: Any) -> dict:
    """Restore model, optimizer, scheduler and RNG states from ``path``; return the trainer state."""
    blob = torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])
    return json.loads((Path(path) / "trainer_state.json").read_text())


def export_complete(export_dir: Path) -> bool:
    """True when ``export_dir`` holds a finished export (its marker is written last)."""
    return (Path(export_dir) / EXPORT_MARKER).is_file()


def read_export_info(export_dir: Path) -> dict:
    """Return the JSON written in the export marker."""
    return json.loads((Path(export_dir) / EXPORT_MARKER).read_text())


def finished_export(export_dir: Path) -> TrainResult | None:
    """Return the result recorded by a finished export at ``export_dir``, or None when there is none."""
    if not export_complete(export_dir):
        return None
    info = read_export_info(export_dir)
    return TrainResult(Path(export_dir), info.get("selected_step"), info.get("summary", {}))


def save_hf_folder(
    dest: Path, model: Any, tokenizer: Any, marker: str | None = None, info: dict | None = None
) -> Path:
    """Save ``model`` and ``tokenizer`` as an HF folder at ``dest`` atomically (marker file last)."""
    dest = Path(dest)
    with atomic_folder(dest, f".{dest.name}.") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if marker:
            (tmp / marker).write_text(json.dumps(info or {}, sort_keys=True) + "\n")
    return dest


def export_selected(selected: Path, export_dir: Path, info: dict) -> None:
    """Copy the HF folder ``selected`` to ``export_dir`` atomically, its marker holding ``info``."""
    export_dir = Path(export_dir)
    tmp = export_dir.with_name(f".{export_dir.name}.copy")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(selected, tmp)
    (tmp / EXPORT_MARKER).write_text(json.dumps(info, sort_keys=True) + "\n")
    shutil.rmtree(export_dir, ignore_errors=True)
    tmp.rename(export_dir)
