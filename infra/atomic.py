"""Crash-safe file writes: temp file in the same folder, fsync, rename (and fsync the folder)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def process_umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_mode(path: Path | str, *, folder: bool = False) -> None:
    """Give a file (0666) or folder (0777) the mode ``open``/``mkdir`` would, minus the umask.

    ``tempfile`` creates 0600 files and 0700 folders, which a team sharing a run directory cannot read.
    """
    os.chmod(path, (0o777 if folder else 0o666) & ~process_umask())


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees either the old or the new file, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    default_mode(tmp)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
