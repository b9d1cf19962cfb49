"""Stable content hashes for configs, files and folders (SHA-256 everywhere)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's content, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal objects give equal strings."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_json(obj: Any) -> str:
    """Hex SHA-256 of the canonical JSON form of ``obj``."""
    return sha256_bytes(canonical_json(obj).encode())


def hash_tree(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Map every file below ``root`` (relative POSIX path) to its SHA-256, skipping names in ``exclude``."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in exclude:
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out
