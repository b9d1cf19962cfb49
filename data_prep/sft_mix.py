"""Build the SFT mix: stream sources, convert, repair, split, validate, measure, decontaminate, report.

``build_sft_mix`` runs the paper's §3.1 pipeline over registered sources (hub, pinned revision) or local
files in a source's format, writes ``sft.jsonl`` (``SFTSample`` rows), ``mixture.md``/``mixture.png`` and
``manifest.json``, and returns the manifest. Nothing malformed stops the run: every dropped row or
example is counted by reason (``file:line`` examples kept) and the counts land in the manifest. A
decontamination benchmark file that yields no item stops it before anything is read (``ConfigError``
naming the benchmark and the file), as ``rufus decontam`` does: screening against nothing is no screen.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_prep.benchmarks import BenchmarkError
from data_prep.converters import ConversionError, convert_row
from data_prep.decontam_pipeline import load_benchmarks, new_report, screen_rows
from data_prep.decontaminate import build_index
from data_prep.io import JsonlWriter, MalformedCounter, read_jsonl
from data_prep.length import LONG_MIN_TOKENS, MAX_TOKENS, apply_length, loss_characters
from data_prep.manifest import Manifest
from data_prep.mixture import MixtureAccumulator
from data_prep.repairs import RowRejected, repair_conversation
from data_prep.schema import SFTSample
from data_prep.sources import SourceSpec, iter_source_rows, local_source
from data_prep.split import split_interleaved
from data_prep.validators import validate_sample
from infra.layering import ConfigError


def _examples(
    spec: SourceSpec, malformed: MalformedCounter, counts: Counter, repairs: Counter, allow_unpinned: bool
) -> Iterator[SFTSample]:
    for where, category, row in iter_source_rows(spec, malformed, allow_unpinned=allow_unpinned):
        counts["rows_read"] += 1
        try:
            messages, tools = convert_row(row, spec.format)
            messages, applied = repair_conversation(
                messages, spec.system_prompt_patterns, spec.keep_answer_tags
            )
        except (ConversionError, RowRejected) as exc:
            malformed.add(exc.reason, where, exc.detail[:120])
            continue
        repairs.update(applied)
        counts["rows_converted"] += 1
        base = str(row.get("id") or row.get("uuid") or where)
        for k, msgs in enumerate(split_interleaved(messages)):
            counts["examples_split"] += 1
            sample = SFTSample(
                id=f"{spec.name}/{base}#{k}", messages=msgs, tools=tools, source=spec.name, category=category
            )
            problems = validate_sample(sample)
            if problems:
                malformed.add(f"invalid:{problems[0]}", sample.id, ",".join(problems))
                continue
            counts["examples_valid"] += 1
            yield sample


def build_sft_mix(
    sources: Sequence[SourceSpec | str | Path],
    out_dir: str | Path,
    tokenizer: Any | None = None,
    *,
    benchmarks: Mapping[str, str | Path] | None = None,
    workers: int = 1,
    max_tokens: int = MAX_TOKENS,
    long_min_tokens: int = LONG_MIN_TOKENS,
    allow_unpinned: bool = False,
) -> dict[str, Any]:
    """Build ``sft.jsonl`` + mixture report + ``manifest.json`` in ``out_dir`` and return the manifest."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = [s if isinstance(s, SourceSpec) else local_source(s) for s in sources]
    malformed, counts, repairs = MalformedCounter(), Counter(), Counter()
    manifest = Manifest(
        "sft_mix",
        {
            "max_tokens": max_tokens,
            "long_min_tokens": long_min_tokens,
            "tokenizer": getattr(tokenizer, "name_or_path", None),
            "benchmarks": {k: str(v) for k, v in (benchmarks or {}).items()},
        },
    )
    try:  # a benchmark file that yields nothing would screen nothing: refuse it before any work
        loaded = load_benchmarks(benchmarks or {}, malformed, require_items=True)
    except BenchmarkError as exc:
        raise ConfigError(f"data.benchmarks: {exc}") from None
    staged = out_dir / "sft.staged.jsonl"
    with JsonlWriter(staged) as stage:
        for spec in specs:
            manifest.add_source(spec.manifest_entry())
            for sample in _examples(spec, malformed, counts, repairs, allow_unpinned):
                if tokenizer is not None:
                    measured, loss_units = apply_length(sample, tokenizer, max_tokens, long_min_tokens)
                    if measured is None:
                        malformed.add("over_max_tokens", sample.id)
                        continue
                    sample = measured
                else:
                    loss_units = loss_characters(sample)
                counts["examples_length_ok"] += 1
                stage.write({**sample.model_dump(exclude_none=True), "_loss": loss_units})
    for step in ("rows_read", "rows_converted", "examples_split", "examples_valid", "examples_length_ok"):
        manifest.step(step, counts[step])

    index = build_index(loaded)
    report = new_report(index, loaded)
    mixture = MixtureAccumulator("tokens" if tokenizer is not None else "characters")
    with JsonlWriter(out_dir / "sft.jsonl") as final:
        for row, match in screen_rows(
            read_jsonl(staged, malformed), index, report, malformed, workers=workers
        ):
            if match is None:
                loss_units = row.pop("_loss")
                mixture.add(row.get("category", ""), loss_units)
                final.write(row)
    staged.unlink()
    manifest.step("decontaminated", report.kept, removed_per_benchmark=dict(report.removed_per_benchmark))
    manifest.set("decontamination", report.as_dict())
    manifest.set("repairs_applied", dict(sorted(repairs.items())))
    manifest.set("malformed", malformed.as_dict())
    manifest.set("long_bucket_samples", _count_long(out_dir / "sft.jsonl") if tokenizer is not None else None)
    manifest.add_output(out_dir / "sft.jsonl", final.close())
    for path in mixture.write(out_dir).values():
        manifest.add_output(path)
    manifest.set("mixture", mixture.rows())
    return manifest.write(out_dir / "manifest.json")


def _count_long(path: Path) -> int:
    with path.open(encoding="utf-8") as fh:
        return sum(1 for line in fh if json.loads(line).get("long_bucket"))
