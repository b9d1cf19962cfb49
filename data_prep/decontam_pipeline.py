"""File-level decontamination run: corpus JSONL in, kept/removed JSONL and a report out.

Used by ``rufus decontam`` and by the SFT builder and RL prompt preparation (the same screen runs over
every prompt set). Benchmarks run in the paper's order: the ten chained sampled-phrase passes first,
then the math/knowledge benchmarks with the exhaustive phrase screen; those also go to the optional
dense-retrieval review. Custom held-out sets (``name -> file`` with the text field named in ``fields``)
run after the registered benchmarks, with the sampled-phrase screen.

Benchmark and corpus records that cannot be used are counted apart: each benchmark's drops go to its own
counter (``DecontamReport.benchmark_malformed``), the corpus's to the counter returned with the report. A
benchmark that yields no item, or no item long enough to screen, is a :class:`BenchmarkError`: a screen
that checks nothing must not report "removed 0".

:func:`decontaminate_file` streams the corpus in ~1 MB byte ranges of whole lines: each range is read,
parsed, screened and serialised in one call (in a worker with ``workers > 1``), and the main process
only finds the cuts, writes the returned bytes and hashes them, so the work spreads over the workers.
Output is byte-for-byte what reading with ``read_jsonl``, :func:`screen_rows` and ``JsonlWriter``
gives, ``file:line`` of dropped rows included.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

from data_prep.benchmarks import BenchmarkItem
from data_prep.decontam_inputs import load_benchmarks, require_screenable, row_text
from data_prep.decontaminate import THRESHOLD, Match, PhraseIndex, build_index, iter_scan, scan_texts
from data_prep.io import JsonlWriter, MalformedCounter, parse_jsonl_line, read_jsonl
from data_prep.ordered_pool import map_ordered


@dataclass
class DecontamReport:
    """Counts of one decontamination run."""

    benchmarks: list[str]
    items: dict[str, int]
    skipped_short_items: dict[str, int]
    threshold: float
    scanned: int = 0
    kept: int = 0
    removed_ids: list[str] = field(default_factory=list)
    removed_per_benchmark: Counter = field(default_factory=Counter)
    dense_review_pairs: int = 0
    # Dropped benchmark records per benchmark (filled by decontaminate_file; not part of as_dict).
    benchmark_malformed: dict[str, MalformedCounter] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``removed_ids`` and counts per benchmark in chain order)."""
        return {
            "benchmarks": self.benchmarks,
            "items_per_benchmark": self.items,
            "skipped_short_items": self.skipped_short_items,
            "threshold": self.threshold,
            "scanned": self.scanned,
            "kept": self.kept,
            "removed": len(self.removed_ids),
            "removed_per_benchmark": {b: self.removed_per_benchmark.get(b, 0) for b in self.benchmarks},
            "removed_ids": self.removed_ids,
            "dense_review_pairs": self.dense_review_pairs,
        }


def new_report(index: PhraseIndex, loaded: list[tuple[str, list[BenchmarkItem], bool]]) -> DecontamReport:
    """An empty report for ``index``."""
    return DecontamReport(
        benchmarks=index.benchmarks,
        items={name: len(items) for name, items, _ in loaded},
        skipped_short_items=dict(index.skipped_short),
        threshold=THRESHOLD,
    )


def screen_rows(
    rows: Iterable[tuple[str, dict]],
    index: PhraseIndex,
    report: DecontamReport,
    malformed: MalformedCounter,
    *,
    workers: int = 1,
    id_key: str = "id",
) -> Iterator[tuple[dict, Match | None]]:
    """Yield ``(row, match)`` for rows with an id and text; others are dropped and counted."""

    def texts() -> Iterator[tuple[dict, str]]:
        for where, row in rows:
            if not isinstance(row.get(id_key), (str, int)) or row.get(id_key) == "":
                malformed.add("missing_id", where)
                continue
            text = row_text(row)
            if text is None:
                malformed.add("no_text", where, "no messages/conversations/prompt")
                continue
            yield row, text

    for row, match in iter_scan(texts(), index, workers=workers):
        report.scanned += 1
        if match is None:
            report.kept += 1
        else:
            report.removed_ids.append(str(row[id_key]))
            report.removed_per_benchmark[match.benchmark] += 1
        yield row, match


CHUNK_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
# Serialises removed rows as json.dumps(row, ensure_ascii=False) does, without an encoder per row.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _line_ranges(path: Path, chunk_bytes: int | None = None) -> Iterator[tuple[str, int, int]]:
    """Yield ``(path, start, end)``: byte ranges of whole lines, each ``chunk_bytes`` or a little more.

    The main process only finds the cuts (the first newline at or past each ``chunk_bytes`` mark, usually
    one 64 KB read per cut); the chunk's screener reads its own bytes, so neither the corpus nor line
    counting passes through the main process (sending every chunk through a pipe to a worker capped the
    pool at the rate one process can pickle, and counting lines here cost a pass over the corpus).
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    size = path.stat().st_size
    with path.open("rb") as fh:
        start = 0
        while start < size:
            cut = min(start + chunk_bytes, size)
            fh.seek(cut - 1)
            while cut < size:  # past the newline that ends the line holding byte cut - 1
                block = fh.read(1 << 16)
                newline = block.find(b"\n")
                if newline >= 0:
                    cut = fh.tell() - len(block) + newline + 1
                    break
                cut = size if not block else fh.tell()
            yield str(path), start, cut
            start = cut


@dataclass
class _Screened:
    """One chunk's outcome: its kept lines, its removed rows serialised, and what the report needs."""

    scanned: int
    kept: bytes | str  # the kept lines, or the file a worker wrote them to
    kept_rows: int
    removed: bytes
    removed_ids: list[tuple[str, str]]  # (row id, benchmark), in order
    malformed: MalformedCounter  # line numbers counted from 1 at the chunk's first line
    lines: int


def _screen_chunk(
    index: PhraseIndex, task: tuple[str, int, int, str | None], id_key: str = "id"
) -> _Screened:
    """Read, parse, screen and serialise one range of corpus lines (in a worker when there are several).

    Lines are split as iterating the file does, and rows dropped and counted as :func:`read_jsonl` and
    :func:`screen_rows` do, with line numbers counted from the range's first line (the reading process
    adds the lines before it). A kept row is its corpus line as read, less the line ending (and a leading
    byte-order mark): nothing in it is re-encoded, and re-serialising was a quarter of the per-MB cost.
    A removed row is re-serialised with its ``decontam`` match added. With a spill folder (a worker's
    task), the kept lines go to a file there, named in the result, rather than back through the pool's
    pipe, where receiving them cost the main process more than screening saved it.
    """
    path, start, end, spill = task
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    lines = BytesIO(data).readlines()
    if start == 0 and lines and lines[0].startswith(_BOM):
        lines[0] = lines[0][len(_BOM) :]
    malformed = MalformedCounter()
    rows, raws, texts = [], [], []
    for lineno, raw in enumerate(lines, start=1):
        row = parse_jsonl_line(raw, path, lineno, malformed)
        if row is None:
            continue
        if not isinstance(row.get(id_key), (str, int)) or row.get(id_key) == "":
            malformed.add("missing_id", f"{path}:{lineno}")
            continue
        text = row_text(row)
        if text is None:
            malformed.add("no_text", f"{path}:{lineno}", "no messages/conversations/prompt")
            continue
        rows.append(row)
        raws.append(raw)
        texts.append(text)
    kept: list[bytes] = []
    removed: list[str] = []
    removed_ids: list[tuple[str, str]] = []
    for row, raw, match in zip(rows, raws, scan_texts(index, texts) if texts else [], strict=True):
        if match is None:
            kept.append(raw.rstrip(b"\r\n"))
            continue
        decontam = {
            "benchmark": match.benchmark,
            "item_id": match.item_id,
            "phrase_hits": match.hits,
            "phrases": match.phrases,
        }
        removed.append(_ENCODER.encode({**row, "decontam": decontam}))
        removed_ids.append((str(row[id_key]), match.benchmark))
    kept_bytes = b"\n".join(kept) + b"\n" if kept else b""
    return _Screened(
        scanned=len(rows),
        kept=_spill(kept_bytes, spill, start) if spill else kept_bytes,
        kept_rows=len(kept),
        removed=("\n".join(removed) + "\n").encode("utf-8") if removed else b"",
        removed_ids=removed_ids,
        malformed=malformed,
        lines=len(lines),
    )


def _spill(data: bytes, folder: str, start: int) -> str:
    path = Path(folder) / f"{start}.kept"
    path.write_bytes(data)
    return str(path)


def _screen_file(
    corpus: Path,
    index: PhraseIndex,
    report: DecontamReport,
    malformed: MalformedCounter,
    out_dir: Path,
    workers: int,
) -> tuple[str, str]:
    """Screen ``corpus`` into ``kept.jsonl`` and ``removed.jsonl`` of ``out_dir``; return their sha256."""
    if not corpus.is_file():  # ranges are read by offset: a pipe would screen as empty
        raise ValueError(f"{corpus}: not a regular file (write the corpus to a file first)")
    out_dir.mkdir(parents=True, exist_ok=True)
    spill = tempfile.mkdtemp(prefix=".kept-parts-", dir=out_dir) if workers > 1 else None
    try:
        with JsonlWriter(out_dir / "kept.jsonl") as kept, JsonlWriter(out_dir / "removed.jsonl") as removed:
            lines_before = 0
            tasks = ((path, start, end, spill) for path, start, end in _line_ranges(corpus))
            for part in map_ordered(index, _screen_chunk, tasks, workers):
                malformed.merge_shifted(part.malformed, str(corpus), lines_before)
                lines_before += part.lines
                report.scanned += part.scanned
                report.kept += part.kept_rows
                for row_id, benchmark in part.removed_ids:
                    report.removed_ids.append(row_id)
                    report.removed_per_benchmark[benchmark] += 1
                if isinstance(part.kept, str):
                    part_file = Path(part.kept)
                    kept.write_serialized(part_file.read_bytes(), part.kept_rows)
                    part_file.unlink()
                else:
                    kept.write_serialized(part.kept, part.kept_rows)
                removed.write_serialized(part.removed, len(part.removed_ids))
        return kept.close(), removed.close()
    finally:
        if spill:
            shutil.rmtree(spill, ignore_errors=True)


def decontaminate_file(
    corpus: str | Path,
    benchmarks: Mapping[str, str | Path],
    out_dir: str | Path,
    *,
    fields: Mapping[str, str] | None = None,
    workers: int = 1,
    dense_model: str | None = None,
    dense: bool = False,
    dense_threshold: float = 0.8,
) -> tuple[DecontamReport, MalformedCounter, dict[str, str]]:
    """Screen ``corpus`` and write ``kept.jsonl``, ``removed.jsonl`` (and ``dense_review.jsonl``).

    ``fields`` names the text field of custom (unregistered) benchmarks. Returns the report (with
    ``benchmark_malformed``), the corpus's malformed-row counter (lines that are not UTF-8, not JSON,
    not objects, or lack an id or text, each with its ``file:line``) and the sha256 of each output file.
    Raises :class:`BenchmarkError` before writing anything when a benchmark yields no screenable item, and
    :class:`data_prep.dense.DenseUnavailable` when ``dense`` is asked for without its packages installed.
    """
    out_dir = Path(out_dir)
    if dense:  # before any work: a missing optional package must not cost a full exact scan first
        from data_prep.dense import require_dense

        require_dense(dense_model)
    per_benchmark: dict[str, MalformedCounter] = {}
    loaded = load_benchmarks(
        benchmarks, MalformedCounter(), fields, per_benchmark=per_benchmark, require_items=True
    )
    index = build_index(loaded)
    require_screenable(index, loaded, benchmarks)
    report = new_report(index, loaded)
    report.benchmark_malformed = per_benchmark
    malformed = MalformedCounter()
    hashes: dict[str, str] = {}
    hashes["kept.jsonl"], hashes["removed.jsonl"] = _screen_file(
        Path(corpus), index, report, malformed, out_dir, workers
    )
    dense_benchmarks = [(n, items) for n, items, exhaustive in loaded if exhaustive]
    if dense and dense_benchmarks:
        from data_prep.dense import dense_screen, load_encoder

        samples = ((str(r["id"]), t) for _, r in read_jsonl(out_dir / "kept.jsonl") if (t := row_text(r)))
        with JsonlWriter(out_dir / "dense_review.jsonl") as review:
            for pair in dense_screen(samples, dense_benchmarks, load_encoder(dense_model), dense_threshold):
                review.write(pair.as_dict())
        hashes["dense_review.jsonl"] = review.close()
        report.dense_review_pairs = review.count
    return report, malformed, hashes
