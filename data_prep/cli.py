"""``rufus decontam``: screen a corpus against benchmark files (mounted by ``infra.cli``).

``decontam_app`` is a Typer app whose callback is the command itself, so
``app.add_typer(decontam_app, name="decontam")`` gives
``rufus decontam --benchmark NAME=FILE [...] --corpus FILE.jsonl --out DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from data_prep.benchmarks import ALL_BENCHMARKS
from data_prep.decontam_pipeline import decontaminate_file
from data_prep.manifest import Manifest

decontam_app = typer.Typer(add_completion=False, help="Remove benchmark-contaminated rows from a corpus.")


def _parse_benchmarks(values: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise typer.BadParameter(f"{value!r}: expected NAME=FILE", param_hint="--benchmark")
        if name not in ALL_BENCHMARKS:
            raise typer.BadParameter(
                f"unknown benchmark {name!r}; known: {', '.join(ALL_BENCHMARKS)}", param_hint="--benchmark"
            )
        if not Path(path).exists():
            raise typer.BadParameter(f"{name}: file {path} does not exist", param_hint="--benchmark")
        out[name] = Path(path)
    return out


@decontam_app.callback(invoke_without_command=True)
def decontam(
    benchmark: list[str] = typer.Option(
        ..., "--benchmark", "-b", help="NAME=FILE in the benchmark's public format."
    ),
    corpus: Path = typer.Option(
        ..., "--corpus", exists=True, dir_okay=False, help="JSONL rows with id + messages."
    ),
    out: Path = typer.Option(..., "--out", help="Output directory."),
    workers: int = typer.Option(1, "--workers", min=1, help="Scanning processes."),
    dense: bool = typer.Option(
        False, "--dense/--no-dense", help="Dense-retrieval review for math/knowledge."
    ),
    embedding_model: str | None = typer.Option(
        None, "--embedding-model", help="Sentence-transformers path/id."
    ),
    dense_threshold: float = typer.Option(
        0.8, "--dense-threshold", help="Cosine similarity for the review list."
    ),
) -> None:
    """Write kept.jsonl, removed.jsonl (with the matching benchmark item), report.json and manifest.json."""
    specs = _parse_benchmarks(benchmark)
    report, malformed, hashes = decontaminate_file(
        corpus,
        specs,
        out,
        workers=workers,
        dense=dense,
        dense_model=embedding_model,
        dense_threshold=dense_threshold,
    )
    report_dict = {**report.as_dict(), "malformed": malformed.as_dict()}
    (out / "report.json").write_text(json.dumps(report_dict, indent=2) + "\n", encoding="utf-8")
    manifest = Manifest(
        "decontam",
        {
            "corpus": str(corpus),
            "benchmarks": {k: str(v) for k, v in specs.items()},
            "workers": workers,
            "dense": dense,
        },
    )
    manifest.step("read", report.scanned)
    manifest.step("decontaminated", report.kept)
    manifest.set("decontamination", {k: v for k, v in report_dict.items() if k != "removed_ids"})
    manifest.set("malformed", malformed.as_dict())
    for name, sha in hashes.items():
        manifest.add_output(out / name, sha)
    manifest.add_output(out / "report.json")
    manifest.write(out / "manifest.json")
    typer.echo(
        f"scanned {report.scanned}, kept {report.kept}, removed {len(report.removed_ids)} "
        f"{dict(report.removed_per_benchmark)}; malformed {malformed.total} -> {out}"
    )
