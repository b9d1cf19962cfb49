"""Streaming JSONL input/output for data prep.

Reading never crashes on bad input: a line that is not valid JSON, or not a JSON object, is dropped and
counted by reason in a :class:`MalformedCounter`, with ``file:line`` in the kept example message, so a
run's manifest can say exactly what was thrown away. Writing is atomic (temporary file, then rename)
and hashes the bytes as they are written.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


class MalformedCounter:
    """Counts dropped records by reason and keeps the first few messages (``file:line: why``)."""

    def __init__(self, max_examples: int = 20) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: list[str] = []
        self.max_examples = max_examples

    def add(self, reason: str, where: str, detail: str = "") -> None:
        """Record one dropped record; ``where`` is ``file:line`` or a record id."""
        self.counts[reason] += 1
        if len(self.examples) < self.max_examples:
            self.examples.append(f"{where}: {reason}" + (f" ({detail})" if detail else ""))

    def merge(self, other: MalformedCounter) -> None:
        """Add another counter's counts and examples to this one."""
        self.counts.update(other.counts)
        room = self.max_examples - len(self.examples)
        self.examples.extend(other.examples[: max(room, 0)])

    def merge_shifted(self, other: MalformedCounter, path: str, lines: int) -> None:
        """Merge ``other``, whose examples name lines of ``path`` counted ``lines`` too low.

        For a chunk of a file screened apart: its lines are numbered from 1 where it starts.
        """
        prefix = f"{path}:"
        shifted = MalformedCounter(other.max_examples)
        shifted.counts = other.counts
        for example in other.examples:
            if example.startswith(prefix):
                number, _, rest = example[len(prefix) :].partition(":")
                example = f"{prefix}{int(number) + lines}:{rest}"
            shifted.examples.append(example)
        self.merge(shifted)

    @property
    def total(self) -> int:
        """Number of records dropped."""
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        """Counts by reason plus example messages, for manifests and reports."""
        return {
            "total": self.total,
            "by_reason": dict(sorted(self.counts.items())),
            "examples": self.examples,
        }


def read_jsonl(path: str | Path, malformed: MalformedCounter | None = None) -> Iterator[tuple[str, dict]]:
    """Yield ``(file:line, row)`` for each JSON-object line of ``path``; nothing is silently altered.

    A line that is not valid UTF-8 is dropped and counted (``not_utf8``), never read with replacement
    characters, and so is a line whose strings hold a lone surrogate escape (``invalid_unicode``: it
    could not be written back as UTF-8); so are invalid JSON (``invalid_json``) and non-objects
    (``not_an_object``).
    """
    malformed = malformed if malformed is not None else MalformedCounter()
    path = Path(path)
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
                raw = raw[3:]
            row = parse_jsonl_line(raw, path, lineno, malformed)
            if row is not None:
                yield f"{path}:{lineno}", row


def parse_jsonl_line(raw: bytes, path: str | Path, lineno: int, malformed: MalformedCounter) -> dict | None:
    """Return the JSON object on one line of ``path``, or None (blank, or dropped and counted).

    The per-line rule of :func:`read_jsonl`, for callers that read lines in bulk (a byte-order mark
    on the first line is the caller's to strip).
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        malformed.add("not_utf8", f"{path}:{lineno}", f"invalid byte at column {exc.start + 1}")
        return None
    if not line or line.isspace():  # blank (isspace, unlike strip, copies nothing)
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        malformed.add("invalid_json", f"{path}:{lineno}", exc.msg)
        return None
    except RecursionError:
        malformed.add("invalid_json", f"{path}:{lineno}", "nested too deeply")
        return None
    if not isinstance(row, dict):
        malformed.add("not_an_object", f"{path}:{lineno}", type(row).__name__)
        return None
    if b"\\u" in raw and (b"\\ud" in raw or b"\\uD" in raw):  # possibly a lone surrogate escape
        try:
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            malformed.add("invalid_unicode", f"{path}:{lineno}", "lone surrogate escape")
            return None
    return row


class JsonlWriter:
    """Atomic JSONL writer: rows go to ``<path>.tmp``; ``close()`` renames it and returns the sha256."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        self._fh: IO[bytes] = self._tmp.open("wb")
        self._sha = hashlib.sha256()
        self.count = 0
        self.sha256: str | None = None

    def write(self, row: dict) -> None:
        """Append one row."""
        data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        self._fh.write(data)
        self._sha.update(data)
        self.count += 1

    def write_serialized(self, data: bytes, rows: int) -> None:
        """Append ``rows`` rows already serialised, one JSON object per ``\n``-ended line."""
        self._fh.write(data)
        self._sha.update(data)
        self.count += rows

    def close(self) -> str:
        """Flush, rename into place and return the file's sha256."""
        if self.sha256 is None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self._tmp, self.path)
            self.sha256 = self._sha.hexdigest()
        return self.sha256

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.close()
        else:  # leave no half-written output behind
            self._fh.close()
            self._tmp.unlink(missing_ok=True)


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> str:
    """Write ``rows`` atomically and return the file's sha256."""
    with JsonlWriter(path) as writer:
        for row in rows:
            writer.write(row)
    return writer.close()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Return the sha256 hex digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
