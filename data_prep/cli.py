"""``rufus decontam``: screen a corpus against benchmark files.

``decontam`` is a plain command: ``infra.cli`` registers it with ``app.command("decontam")``, giving
``rufus decontam --benchmark NAME=FILE [...] --corpus FILE.jsonl --out DIR``. ``decontam_app`` wraps the
same function as a Typer app whose callback is the command (no subcommands, none shown in its usage),
for ``app.add_typer(decontam_app, name="decontam")`` or running it alone.

Expected failures (a malformed ``NAME=FILE``, an unknown benchmark, a missing file, a benchmark file that
yields no item) print one line, ``error: ...`` naming the benchmark, file or option, and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from data_prep.benchmarks import ALL_BENCHMARKS, BenchmarkError
from data_prep.decontam_pipeline import decontaminate_file
from data_prep.io import MalformedCounter
from data_prep.manifest import Manifest

HELP = "Remove benchmark-contaminated rows from a corpus."
OUTPUTS = ("kept.jsonl", "removed.jsonl", "dense_review.jsonl", "report.json", "manifest.json")
console = Console()


class UsageError(Exception):
    """An expected failure of the command: printed as one line, exit 2."""


def _fail(message: str) -> None:
    console.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    raise typer.Exit(code=2)


def _pairs(values: list[str], option: str, right: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for value in values:
        name, sep, rest = value.partition("=")
        name = name.strip()
        if not sep or not name or not rest:
            raise UsageError(f"{option} {value!r}: expected NAME={right}")
        if name in seen:
            raise UsageError(f"{option} {name} is given twice")
        seen.add(name)
        out.append((name, rest))
    return out


def parse_benchmarks(values: list[str], field_values: list[str]) -> tuple[dict[str, Path], dict[str, str]]:
    """Return ``name -> file`` and ``name -> text field`` (custom sets) or raise :class:`UsageError`."""
    specs = {name: Path(path) for name, path in _pairs(values, "--benchmark", "FILE")}
    fields = dict(_pairs(field_values, "--benchmark-field", "FIELD"))
    for name in fields:
        if name not in specs:
            raise UsageError(f"--benchmark-field {name}: no --benchmark {name}=FILE is given")
        if name in ALL_BENCHMARKS:
            raise UsageError(
                f"--benchmark-field {name}: {name} is a registered benchmark, read in its public format; "
                "give your own set another name"
            )
    for name, path in specs.items():
        if name not in ALL_BENCHMARKS and name not in fields:
            raise UsageError(
                f"unknown benchmark {name!r} (known: {', '.join(ALL_BENCHMARKS)}); for your own JSONL set "
                f"also pass --benchmark-field {name}=FIELD naming the field that holds each row's text"
            )
        if not path.exists():
            raise UsageError(f"benchmark {name}: {path} does not exist")
    return specs, fields


def _check_paths(corpus: Path, out: Path, specs: dict[str, Path]) -> None:
    if not corpus.exists():
        raise UsageError(f"--corpus {corpus} does not exist")
    if not corpus.is_file():
        raise UsageError(f"--corpus {corpus} is not a file")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    outputs = {(out / name).resolve() for name in OUTPUTS}
    for label, path in [("--corpus", corpus), *((f"benchmark {n}", p) for n, p in specs.items())]:
        if path.resolve() in outputs:
            raise UsageError(f"{label} {path} is one of the files --out {out} would overwrite")


def _malformed_summary(per_benchmark: dict[str, MalformedCounter]) -> dict:
    return {
        "total": sum(c.total for c in per_benchmark.values()),
        "per_benchmark": {name: c.as_dict() for name, c in per_benchmark.items()},
    }


def decontam(
    benchmark: list[str] = typer.Option(
        ...,
        "--benchmark",
        "-b",
        help="NAME=FILE: a registered benchmark in its public format, or your own set "
        "(JSONL/JSON/CSV/Parquet) with --benchmark-field NAME=FIELD.",
    ),
    benchmark_field: list[str] = typer.Option(
        [],
        "--benchmark-field",
        help="NAME=FIELD: the text field of custom set NAME (a string, or a list of chat messages "
        "whose contents are joined). Rows without it are counted as malformed.",
    ),
    corpus: Path = typer.Option(..., "--corpus", help="JSONL rows with id + messages."),
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
    """Remove benchmark-contaminated rows from a corpus.

    Writes kept.jsonl (each kept row's corpus line as read), removed.jsonl (the row with the matching
    benchmark item), report.json and manifest.json.

    Malformed corpus rows and benchmark records are counted apart ("malformed", "benchmark_malformed").

    A benchmark file that yields no item is an error.
    """
    from data_prep.dense import DenseUnavailable  # numpy: only when the command runs

    try:
        specs, fields = parse_benchmarks(benchmark, benchmark_field)
        _check_paths(corpus, out, specs)
        report, malformed, hashes = decontaminate_file(
            corpus,
            specs,
            out,
            fields=fields,
            workers=workers,
            dense=dense,
            dense_model=embedding_model,
            dense_threshold=dense_threshold,
        )
        bench_malformed = _malformed_summary(report.benchmark_malformed)
        report_dict = {
            **report.as_dict(),
            "malformed": malformed.as_dict(),
            "benchmark_malformed": bench_malformed,
        }
        (out / "report.json").write_text(json.dumps(report_dict, indent=2) + "\n", encoding="utf-8")
        manifest = Manifest(
            "decontam",
            {
                "corpus": str(corpus),
                "benchmarks": {k: str(v) for k, v in specs.items()},
                "benchmark_fields": fields,
                "workers": workers,
                "dense": dense,
            },
        )
        manifest.step("read", report.scanned)
        manifest.step("decontaminated", report.kept)
        manifest.set("decontamination", {k: v for k, v in report_dict.items() if k != "removed_ids"})
        manifest.set("malformed", malformed.as_dict())
        manifest.set("benchmark_malformed", bench_malformed)
        for name, sha in hashes.items():
            manifest.add_output(out / name, sha)
        manifest.add_output(out / "report.json")
        manifest.write(out / "manifest.json")
    except (UsageError, BenchmarkError, DenseUnavailable) as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(" ".join(str(exc).split()))
        return
    per_bench = {n: c.total for n, c in report.benchmark_malformed.items() if c.total}
    typer.echo(
        f"scanned {report.scanned}, kept {report.kept}, removed {len(report.removed_ids)} "
        f"{dict(report.removed_per_benchmark)}; benchmark items {report.items}; "
        f"malformed corpus rows {malformed.total}, malformed benchmark records {bench_malformed['total']}"
        + (f" {per_bench}" if per_bench else "")
        + f" -> {out}"
    )


decontam_app = typer.Typer(add_completion=False, help=HELP, subcommand_metavar="")
decontam_app.callback(invoke_without_command=True)(decontam)
