"""File-level decontamination run: corpus JSONL in, kept/removed JSONL and a report out.

Used by ``rufus decontam`` and by the SFT builder and RL prompt preparation (the same screen runs over
every prompt set). Benchmarks run in the paper's order: the ten chained sampled-phrase passes first,
then the math/knowledge benchmarks with the exhaustive phrase screen; those also go to the optional
dense-retrieval review.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.benchmarks import ALL_BENCHMARKS, EXHAUSTIVE, BenchmarkItem, load_benchmark
from data_prep.decontaminate import THRESHOLD, Match, PhraseIndex, build_index, iter_scan
from data_prep.io import JsonlWriter, MalformedCounter, read_jsonl


def _turn_text(turn: Any) -> list[str]:
    if isinstance(turn, str):
        return [turn]
    if not isinstance(turn, dict):
        return []
    parts = [
        turn[k]
        for k in ("content", "value", "reasoning", "reasoning_content")
        if isinstance(turn.get(k), str)
    ]
    if isinstance(turn.get("content"), list):
        parts += [
            p.get("text", "")
            for p in turn["content"]
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    for call in turn.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        if isinstance(fn, dict):
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return parts


def row_text(row: dict) -> str | None:
    """The concatenation of all turns of a corpus row (messages, conversations or prompt), or None."""
    for key in ("messages", "conversations", "prompt"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value:
            return "\n".join(part for turn in value for part in _turn_text(turn))
    return None


def load_benchmarks(
    specs: Mapping[str, str | Path], malformed: MalformedCounter
) -> list[tuple[str, list[BenchmarkItem], bool]]:
    """Load ``name -> file`` benchmarks and order them as the paper chains them."""
    unknown = sorted(set(specs) - set(ALL_BENCHMARKS))
    if unknown:
        raise KeyError(f"unknown benchmark(s) {unknown}; known: {', '.join(ALL_BENCHMARKS)}")
    return [
        (n, load_benchmark(n, specs[n], malformed), n in EXHAUSTIVE) for n in ALL_BENCHMARKS if n in specs
    ]


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


def decontaminate_file(
    corpus: str | Path,
    benchmarks: Mapping[str, str | Path],
    out_dir: str | Path,
    *,
    workers: int = 1,
    dense_model: str | None = None,
    dense: bool = False,
    dense_threshold: float = 0.8,
) -> tuple[DecontamReport, MalformedCounter, dict[str, str]]:
    """Screen ``corpus`` and write ``kept.jsonl``, ``removed.jsonl`` (and ``dense_review.jsonl``).

    Returns the report, the malformed-row counter and the sha256 of each output file.
    """
    out_dir = Path(out_dir)
    malformed = MalformedCounter()
    loaded = load_benchmarks(benchmarks, malformed)
    index = build_index(loaded)
    report = new_report(index, loaded)
    hashes: dict[str, str] = {}
    with JsonlWriter(out_dir / "kept.jsonl") as kept, JsonlWriter(out_dir / "removed.jsonl") as removed:
        for row, match in screen_rows(
            read_jsonl(corpus, malformed), index, report, malformed, workers=workers
        ):
            if match is None:
                kept.write(row)
            else:
                removed.write(
                    {
                        **row,
                        "decontam": {
                            "benchmark": match.benchmark,
                            "item_id": match.item_id,
                            "phrase_hits": match.hits,
                            "phrases": match.phrases,
                        },
                    }
                )
    hashes["kept.jsonl"], hashes["removed.jsonl"] = kept.close(), removed.close()
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
