"""Loaders of each benchmark's public release format, from local files (the hub is not reachable here).

``load(name, path)`` reads the file(s) of a benchmark (``eval.registry``) and returns :class:`EvalItem`
rows in one shape: chat messages to send, the reference the scorer needs, and metadata. Malformed
records are dropped and counted (``LoadResult.dropped``, with the first reasons); a missing or unreadable
file raises an error that names it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import pickle
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eval.agent_loaders import AGENT_LOADERS, task_dir_records
from eval.records import BadRecord, EvalItem, LoadResult, Record
from eval.registry import get_benchmark

_WS = re.compile(r"\s*")


def _json_list(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line the element starts on, element) of a file holding one JSON list."""
    text = path.read_text(encoding="utf-8")
    decoder, line, last = json.JSONDecoder(), 1, 0
    pos = _WS.match(text).end()
    if not text.startswith("[", pos):
        raise ValueError(f"{path}: expected a JSON list of records")
    pos = _WS.match(text, pos + 1).end()
    while not text.startswith("]", pos):
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from exc
        line, last = line + text.count("\n", last, pos), pos
        yield line, value
        pos = _WS.match(text, end).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
        elif not text.startswith("]", pos):
            line += text.count("\n", last, pos)
            raise ValueError(f"{path}: invalid JSON (expected ',' or ']' at line {line})")
    if text[pos + 1 :].strip():
        raise ValueError(f"{path}: invalid JSON (extra data after the list)")


def read_records(path: Path) -> Iterator[tuple[int, Record | BadRecord]]:
    """Yield (line, record) of a .jsonl/.json/.csv file or (row, record) of a .parquet; bad ones as BadRecord.

    The number is the line a record starts on in the text formats (a .json file holds one list), the
    1-based row in a .parquet file. A directory is a benchmark released as task folders (Terminal-Bench
    2.x): one record per folder, numbered in sorted order (``eval.agent_loaders.task_dir_records``).
    """
    if path.is_dir():
        yield from task_dir_records(path)
        return
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield no, BadRecord(f"invalid JSON ({exc.msg})")
                    continue
                yield no, row if isinstance(row, dict) else BadRecord("not an object")
    elif suffix == ".json":
        for no, row in _json_list(path):
            yield no, row if isinstance(row, dict) else BadRecord("not an object")
    elif suffix == ".csv":
        # Agent benchmarks' CSV exports carry whole trajectories in one field (over csv's 128 KiB default).
        limit = csv.field_size_limit(2**31 - 1)
        try:
            with path.open(encoding="utf-8", newline="") as fh:
                reader = csv.DictReader(fh)
                reader.fieldnames  # noqa: B018 (reads the header, so line_num counts it)
                start = reader.line_num + 1
                for row in reader:
                    yield start, dict(row)  # the line a record starts on (quoted fields span lines)
                    start = reader.line_num + 1
        finally:
            csv.field_size_limit(limit)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for no, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield no, row
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r} (expected .jsonl, .json, .csv, .parquet)")


def _need(row: Record, key: str, kind: type | tuple[type, ...] = str) -> Any:
    value = row.get(key)
    if value is None or not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise BadRecord(f"missing or invalid {key!r}")
    return value


def _first(row: Record, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if row.get(key) not in (None, ""):
            return row[key]
    raise BadRecord(f"none of {keys} present")


def _messages(raw: Any) -> list[dict[str, str]]:
    msgs = json.loads(raw) if isinstance(raw, str) else raw
    if isinstance(msgs, dict):
        msgs = [msgs]
    if not isinstance(msgs, list) or not msgs:
        raise BadRecord("conversation is not a non-empty list of messages")
    out = []
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRecord(f"bad message {str(m)[:60]!r}")
        out.append({"role": m["role"], "content": str(m.get("content", ""))})
    return out


def _ifeval(row: Record) -> EvalItem:
    """IFEval / IFBench ``input_data.jsonl``: key, prompt, instruction_id_list, kwargs."""
    ids = _need(row, "instruction_id_list", list)
    kwargs = _need(row, "kwargs", list)
    if len(ids) != len(kwargs) or not ids:
        raise BadRecord("instruction_id_list and kwargs differ in length or are empty")
    prompt = _need(row, "prompt")
    return EvalItem(
        id=str(_first(row, ("key", "id"))),
        messages=[{"role": "user", "content": prompt}],
        reference={"instruction_id_list": ids, "kwargs": kwargs},
        meta={"prompt": prompt},
    )


def _multichallenge(row: Record) -> EvalItem:
    """Multi-challenge questions: QUESTION_ID, AXIS, CONVERSATION, TARGET_QUESTION, PASS_CRITERIA."""
    msgs = _messages(_need(row, "CONVERSATION", (list, str)))
    if msgs[-1]["role"] != "user":
        raise BadRecord("conversation must end with a user turn")
    return EvalItem(
        id=str(_first(row, ("QUESTION_ID",))),
        messages=msgs,
        reference={
            "target_question": _need(row, "TARGET_QUESTION"),
            "pass_criteria": _need(row, "PASS_CRITERIA"),
        },
        meta={"axis": _need(row, "AXIS"), "question_id": row["QUESTION_ID"]},
    )


def _advancedif(row: Record) -> EvalItem:
    """AdvancedIF ``if_oss_full_data.csv``: benchmark_name, conversation_history, prompt_metadata{rubrics}."""
    msgs = _messages(_need(row, "conversation_history", (list, str)))
    meta_raw = _need(row, "prompt_metadata", (dict, str))
    try:
        meta = json.loads(meta_raw) if isinstance(meta_raw, str) else meta_raw
        rubrics = meta["rubrics"]
        rubrics = json.loads(rubrics) if isinstance(rubrics, str) else rubrics
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise BadRecord(f"prompt_metadata has no readable rubrics ({exc})") from exc
    if not isinstance(rubrics, list) or not rubrics:
        raise BadRecord("rubrics is not a non-empty list")
    digest = hashlib.sha256(json.dumps(msgs, sort_keys=True).encode()).hexdigest()[:16]
    return EvalItem(
        id=str(row.get("id") or digest),
        messages=msgs,
        reference={"rubrics": rubrics},
        meta={"benchmark_name": row.get("benchmark_name", ""), "raw": row},
    )


def _gpqa(row: Record, seed: int = 0) -> EvalItem:
    """GPQA CSV: Question, Correct Answer, Incorrect Answer 1–3 (choices shuffled deterministically)."""
    question = _need(row, "Question").strip()
    correct = _need(row, "Correct Answer").strip()
    wrong = [_need(row, f"Incorrect Answer {i}").strip() for i in (1, 2, 3)]
    rid = str(row.get("Record ID") or hashlib.sha256(question.encode()).hexdigest()[:16])
    # Position of the correct answer from a hash of the record id, so every run asks the same question.
    pos = int(hashlib.sha256(f"{seed}:{rid}".encode()).hexdigest(), 16) % 4
    choices = wrong[:pos] + [correct] + wrong[pos:]
    letters = "ABCD"
    body = "\n".join(f"({letters[i]}) {c}" for i, c in enumerate(choices))
    prompt = f"{question}\n\n{body}\n\nAnswer with the letter of the correct choice, as (X)."
    return EvalItem(
        id=rid,
        messages=[{"role": "user", "content": prompt}],
        reference={"answer": letters[pos], "choices": choices},
        meta={"domain": row.get("High-level domain", ""), "subdomain": row.get("Subdomain", "")},
    )


def _aime(row: Record) -> EvalItem:
    """AIME rows (math-ai/aime25, MathArena): problem|question, answer (an integer 0–999), id."""
    problem = str(_first(row, ("problem", "question", "Problem"))).strip()
    answer = str(_first(row, ("answer", "Answer"))).strip()
    if not answer.isdigit() or not 0 <= int(answer) <= 999:
        raise BadRecord(f"AIME answer must be an integer in 0..999, got {answer!r}")
    rid = row.get("id", row.get("problem_idx", row.get("ID")))
    if rid is None:
        rid = hashlib.sha256(problem.encode()).hexdigest()[:16]
    prompt = f"{problem}\n\nPut your final answer within \\boxed{{}}."
    messages = [{"role": "user", "content": prompt}]
    return EvalItem(id=str(rid), messages=messages, reference={"answer": str(int(answer))})


class _StrOnlyUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global: LCB private tests are a pickled JSON string, nothing more."""

    def find_class(self, module: str, name: str) -> Any:
        raise BadRecord(f"private_test_cases pickle references {module}.{name}; refused")


def decode_lcb_tests(raw: Any) -> list[dict[str, str]]:
    """Return LiveCodeBench test cases from a JSON string or the base64(zlib(pickle(json))) release form."""
    if isinstance(raw, list):
        tests = raw
    elif isinstance(raw, str) and raw.strip().startswith("["):
        tests = json.loads(raw)
    elif isinstance(raw, str) and raw.strip():
        try:
            blob = zlib.decompress(base64.b64decode(raw))
            tests = json.loads(_StrOnlyUnpickler(io.BytesIO(blob)).load())
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as exc:
            raise BadRecord(f"undecodable test cases ({exc})") from exc
    else:
        return []
    well_formed = isinstance(tests, list) and all(
        isinstance(t, dict) and {"input", "output"} <= t.keys() for t in tests
    )
    if not well_formed:
        raise BadRecord("test cases are not a list of {input, output}")
    return tests


def _livecodebench(row: Record) -> EvalItem:
    """LiveCodeBench code_generation_lite rows: question_content, starter_code, tests, metadata."""
    content = _need(row, "question_content")
    public = decode_lcb_tests(row.get("public_test_cases", "[]"))
    private = decode_lcb_tests(row.get("private_test_cases", ""))
    if not public and not private:
        raise BadRecord("no test cases")
    meta_raw = row.get("metadata") or "{}"
    meta = json.loads(meta_raw) if isinstance(meta_raw, str) else dict(meta_raw)
    starter = row.get("starter_code") or ""
    prompt = content
    if starter.strip():
        prompt += f"\n\nUse this starter code:\n```python\n{starter}\n```"
    else:
        prompt += "\n\nRead the input from stdin and write the answer to stdout."
    prompt += "\n\nAnswer with your complete solution in one fenced ```python block."
    return EvalItem(
        id=str(_need(row, "question_id", (str, int))),
        messages=[{"role": "user", "content": prompt}],
        reference={"public_tests": public, "private_tests": private, "func_name": meta.get("func_name")},
        meta={
            "platform": row.get("platform", ""),
            "contest_date": str(row.get("contest_date", "")),
            "difficulty": row.get("difficulty", ""),
            "starter_code": starter,
        },
    )


def _arena_hard_v2(row: Record) -> EvalItem:
    """Arena-Hard v2.0 ``question.jsonl`` rows: uid, category (hard_prompt | creative_writing), prompt.

    Both splits share one file; the benchmark's ``extra["category"]`` selects its rows downstream. The
    reference is empty: the judge compares the answer with the baseline model's answer to the same uid.
    """
    prompt = _need(row, "prompt")
    category = _need(row, "category")
    meta = {"category": category, "subcategory": str(row.get("subcategory") or "")}
    return EvalItem(id=str(_need(row, "uid")), messages=[{"role": "user", "content": prompt}], reference={},
                    meta=meta)  # fmt: skip


#: Row parser of each loader name used in ``eval.registry``.
LOADERS: dict[str, Callable[[Record], EvalItem]] = {
    "ifeval": _ifeval,
    "multichallenge": _multichallenge,
    "advancedif": _advancedif,
    "gpqa": _gpqa,
    "aime": _aime,
    "livecodebench": _livecodebench,
    "arena_hard_v2": _arena_hard_v2,
    **AGENT_LOADERS,  # the agent benchmarks (MCP-Atlas … Terminal-Bench, BrowseComp, Seal-0, HLE-Verified)
}


def load(benchmark: str, paths: Path | list[Path], *, date_from: str = "", date_to: str = "") -> LoadResult:
    """Return the items of a benchmark's local file(s); LiveCodeBench rows may be filtered by contest date."""
    bench = get_benchmark(benchmark)
    parse = LOADERS[bench.loader]
    files = [paths] if isinstance(paths, Path) else list(paths)
    result = LoadResult(benchmark=benchmark, items=[])
    seen: set[str] = set()
    for path in files:
        for no, row in read_records(Path(path)):
            try:
                if isinstance(row, BadRecord):
                    raise row
                item = parse(row)
                if item.id in seen:
                    raise BadRecord(f"duplicate id {item.id!r}")
            except BadRecord as exc:
                result.dropped += 1
                if len(result.reasons) < 10:
                    sep = " row " if Path(path).suffix.lower() == ".parquet" else ":"
                    result.reasons.append(f"{path}{sep}{no}: {exc}")
                continue
            date = item.meta.get("contest_date", "")
            if (date_from and date and date < date_from) or (date_to and date and date > date_to):
                continue
            seen.add(item.id)
            result.items.append(item)
    return result
