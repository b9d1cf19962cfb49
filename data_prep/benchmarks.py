"""Per-benchmark loaders: the text of every item, read from a local copy in its public release format.

Each loader returns :class:`BenchmarkItem` (``id``, ``text``): the fields a contaminated training sample
would copy (problem statement, prompt, instruction or user scenario). Files may be JSONL, JSON (a list
or ``{"data"/"tasks": [...]}``), CSV or Parquet; Terminal-Bench may also be a directory of task folders
(``instruction.md`` or ``task.yaml``). Records without the expected text field, JSONL lines that are
not UTF-8 or not a JSON object are dropped and counted; a file that cannot be read as a whole (wrong
type, not UTF-8 JSON/CSV, unreadable Parquet) raises :class:`BenchmarkError` naming the benchmark and the
file, in one line.

Order and screening mode follow paper §3.1: ten chained sampled-phrase passes, then the math/knowledge
benchmarks screened exhaustively (all 8-word phrases) and by dense retrieval.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.io import MalformedCounter, read_jsonl

CHAINED = (
    "terminal-bench-2.0",
    "hle",
    "hle-verified",
    "tau2-bench",
    "sealqa",
    "swe-bench-verified",
    "multi-challenge",
    "ifeval",
    "ifbench",
    "mcp-atlas",
)
EXHAUSTIVE = ("aime24", "aime25", "aime26", "hmmt-feb25", "hmmt-nov25", "hmmt-feb26", "gpqa-diamond")
ALL_BENCHMARKS = CHAINED + EXHAUSTIVE


@dataclass(frozen=True)
class BenchmarkItem:
    """One benchmark item: its id and the text screened for."""

    id: str
    text: str


class BenchmarkError(ValueError):
    """A benchmark file (or name) that cannot be used; the message is one line naming it."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _json_records(path: Path, malformed: MalformedCounter) -> Iterator[tuple[str, dict]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = next(
            (data[k] for k in ("data", "tasks", "items", "questions") if isinstance(data.get(k), list)),
            [data],
        )
    if not isinstance(data, list):
        raise ValueError(f"expected a JSON list or object, found {type(data).__name__}")
    for i, rec in enumerate(data):
        if isinstance(rec, dict):
            yield f"{path}[{i}]", rec
        else:
            malformed.add("not_an_object", f"{path}[{i}]")


def _csv_records(path: Path) -> Iterator[tuple[str, dict]]:
    with path.open(newline="", encoding="utf-8") as fh:
        for i, rec in enumerate(csv.DictReader(fh), start=2):
            yield f"{path}:{i}", rec


def _parquet_records(path: Path) -> Iterator[tuple[str, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ValueError("reading .parquet needs pyarrow (pip install pyarrow)") from exc
    for i, rec in enumerate(pq.read_table(path).to_pylist()):
        if isinstance(rec, dict):
            yield f"{path}[{i}]", rec


def benchmark_records(name: str, path: str | Path, malformed: MalformedCounter) -> Iterator[tuple[str, dict]]:
    """Yield ``(where, record)`` from benchmark ``name``'s JSONL/JSON/CSV/Parquet file.

    Bad JSONL lines are dropped and counted in ``malformed``; a file that cannot be read as a whole
    raises :class:`BenchmarkError` (``benchmark NAME: FILE: why``).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    readers = {
        ".jsonl": lambda: read_jsonl(path, malformed),
        ".json": lambda: _json_records(path, malformed),
        ".csv": lambda: _csv_records(path),
        ".parquet": lambda: _parquet_records(path),
    }
    if not path.exists():
        raise BenchmarkError(f"benchmark {name}: {path} does not exist")
    if path.is_dir():
        raise BenchmarkError(f"benchmark {name}: {path} is a directory (expected a file)")
    if suffix not in readers:
        raise BenchmarkError(
            f"benchmark {name}: {path}: unsupported file type {suffix or '(none)'!r} "
            "(use .jsonl, .json, .csv or .parquet)"
        )
    try:
        yield from readers[suffix]()
    except UnicodeDecodeError as exc:
        raise BenchmarkError(
            f"benchmark {name}: {path}: not UTF-8 text (invalid byte at offset {exc.start})"
        ) from exc
    except json.JSONDecodeError as exc:
        raise BenchmarkError(
            f"benchmark {name}: {path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc
    except (OSError, ValueError, csv.Error, RecursionError) as exc:
        raise BenchmarkError(f"benchmark {name}: {path}: cannot be read ({_one_line(exc)})") from exc


def _first(rec: dict, keys: tuple[str, ...]) -> Any:
    return next((rec[k] for k in keys if rec.get(k) not in (None, "")), None)


def _generic(
    text_keys: tuple[str, ...], id_keys: tuple[str, ...]
) -> Callable[[dict, int], BenchmarkItem | None]:
    def extract(rec: dict, i: int) -> BenchmarkItem | None:
        text = _first(rec, text_keys)
        if not isinstance(text, str) or not text.strip():
            return None
        ident = _first(rec, id_keys)
        return BenchmarkItem(str(ident if ident is not None else i), text)

    return extract


def _tau2(rec: dict, i: int) -> BenchmarkItem | None:
    scenario = rec.get("user_scenario") or {}
    instr = scenario.get("instructions") if isinstance(scenario, dict) else None
    if isinstance(instr, dict):
        keys = ("reason_for_call", "known_info", "unknown_info", "task_instructions")
        text = "\n".join(str(instr[k]) for k in keys if instr.get(k))
    else:
        text = instr if isinstance(instr, str) else ""
    return BenchmarkItem(str(rec.get("id", i)), text) if text.strip() else None


def _multi_challenge(rec: dict, i: int) -> BenchmarkItem | None:
    conv = rec.get("CONVERSATION") or rec.get("conversation") or []
    if not isinstance(conv, list):
        return None
    text = "\n".join(str(t.get("content", "")) for t in conv if isinstance(t, dict))
    ident = rec.get("QUESTION_ID", rec.get("question_id", i))
    return BenchmarkItem(str(ident), text) if text.strip() else None


_PROMPT = _generic(("prompt",), ("key", "id"))
_PROBLEM = _generic(("problem", "Problem", "question", "Question"), ("id", "ID", "problem_idx", "idx"))
_QUESTION = _generic(("question", "Question", "prompt"), ("id", "question_id", "Record ID", "idx"))
_EXTRACTORS: dict[str, Callable[[dict, int], BenchmarkItem | None]] = {
    "terminal-bench-2.0": _generic(("instruction", "descriptions", "description"), ("task_id", "id", "name")),
    "hle": _QUESTION,
    "hle-verified": _QUESTION,
    "tau2-bench": _tau2,
    "sealqa": _QUESTION,
    "swe-bench-verified": _generic(("problem_statement",), ("instance_id",)),
    "multi-challenge": _multi_challenge,
    "ifeval": _PROMPT,
    "ifbench": _PROMPT,
    "mcp-atlas": _generic(
        ("prompt", "PROMPT", "task", "TASK", "query", "question"), ("TASK", "task_id", "TASK_ID", "id")
    ),
    "gpqa-diamond": _generic(("Question", "question"), ("Record ID", "id")),
    **{name: _PROBLEM for name in EXHAUSTIVE if name != "gpqa-diamond"},
}


def _terminal_bench_dir(path: Path, malformed: MalformedCounter) -> list[BenchmarkItem]:
    import yaml

    items = []
    for task in sorted(p for p in path.iterdir() if p.is_dir()):
        try:
            if (task / "instruction.md").is_file():
                text = (task / "instruction.md").read_text(encoding="utf-8")
                source = task / "instruction.md"
            elif (task / "task.yaml").is_file():
                source = task / "task.yaml"
                data = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
                text = data.get("instruction") if isinstance(data, dict) else None
            else:
                malformed.add("missing_text", str(task), "no instruction.md or task.yaml")
                continue
        except UnicodeDecodeError:
            malformed.add("not_utf8", str(task))
            continue
        except yaml.YAMLError as exc:
            malformed.add("invalid_yaml", str(task / "task.yaml"), _one_line(exc))
            continue
        if isinstance(text, str) and text.strip():
            items.append(BenchmarkItem(task.name, text))
        else:
            malformed.add("missing_text", str(source))
    return items


def load_benchmark(
    name: str, path: str | Path, malformed: MalformedCounter | None = None
) -> list[BenchmarkItem]:
    """Load benchmark ``name`` from a local file (or Terminal-Bench task directory) in its public format.

    Raises ``KeyError`` for a name not in the registry, :class:`BenchmarkError` for a file that cannot be
    read (records that cannot be used are dropped and counted in ``malformed``). An empty result is
    returned as it is: callers that need items check for it (see ``decontam_pipeline.load_benchmarks``).
    """
    if name not in _EXTRACTORS:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(ALL_BENCHMARKS)}")
    malformed = malformed if malformed is not None else MalformedCounter()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark {name}: {path} does not exist")
    if path.is_dir():
        if name != "terminal-bench-2.0":
            raise BenchmarkError(
                f"benchmark {name}: {path} is a directory; only terminal-bench-2.0 reads task folders"
            )
        try:
            return _terminal_bench_dir(path, malformed)
        except OSError as exc:
            raise BenchmarkError(f"benchmark {name}: {path}: cannot be read ({_one_line(exc)})") from exc
    extract = _EXTRACTORS[name]
    items = []
    for i, (where, rec) in enumerate(benchmark_records(name, path, malformed)):
        item = extract(rec, i)
        if item is None:
            malformed.add("missing_text", where, f"no text field for {name}")
        else:
            items.append(item)
    return items
