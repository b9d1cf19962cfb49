"""``rufus reward code``: score a JSONL of (problem, response) pairs with the sandboxed Coding-RL reward.

Input lines: ``{"id": str, "problem": {...}, "response": str}``; output lines: ``{"id", "reward", ...}``
in input order. The input is read line by line as UTF-8: a line that is not UTF-8, not a JSON object,
lacks a key, holds an invalid problem or repeats an earlier line's id is dropped, counted by reason and
named on stderr (file and line number); the other lines are scored. The output path is checked before
any scoring and written atomically (a temporary file in its folder, renamed at the end).

Exit status: 0 scored; 1 too many lines dropped (``--max-dropped``; by default: no line left to score),
nothing scored and OUTPUT not written; 2 an expected failure (unreadable input, unwritable output, no
sandbox), one line naming the path.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import typer

from infra.sandbox import Limits, SandboxUnavailable
from rewards.code_reward import MAX_TESTS, CodeScorer, parse_problem

code_app = typer.Typer(help="Score code responses against unit tests in the sandbox.", add_completion=False)

#: Drop reasons, in the order the summary lists them.
REASONS = ("not_utf8", "bad_json", "bad_key", "bad_problem", "duplicate_id")


class InputError(Exception):
    """An expected failure of the command: printed as one ``error:`` line, exit 2."""


@dataclass
class Pairs:
    """The valid records of a pairs JSONL and one (reason, message) per dropped line."""

    records: list[dict] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)

    def counts(self) -> Counter:
        """Dropped lines per reason."""
        return Counter(reason for reason, _ in self.dropped)


def _parse_line(raw: bytes) -> dict:
    """One input line as a record; raises ``_Drop(reason, message)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Drop(
            "not_utf8", f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
        ) from None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:  # its own "line 1" would read as the file's line number
        raise _Drop("bad_json", f"not JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:
        raise _Drop("bad_json", f"not JSON: {exc}") from None
    except RecursionError:
        raise _Drop("bad_json", "not JSON (nested too deeply)") from None
    if not isinstance(rec, dict):
        raise _Drop("bad_json", f"line is a JSON {type(rec).__name__}, not an object")
    for key, kind in (("id", str), ("response", str), ("problem", dict)):
        if not isinstance(rec.get(key), kind):
            raise _Drop("bad_key", f"key {key!r} missing or not a {kind.__name__}")
    try:
        parse_problem(rec["problem"])
    except ValueError as exc:
        raise _Drop("bad_problem", str(exc)) from None
    return rec


class _Drop(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_pairs(path: Path) -> Pairs:
    """Read a pairs JSONL line by line (bytes, then UTF-8 per line, so one bad byte costs one line).

    Blank lines are skipped. A later line repeating an earlier id is dropped (``duplicate_id``, naming
    the line of the first one): output lines are keyed by id, and two rows with one id could not be told
    apart downstream; the first occurrence is the one scored. Raises ``InputError`` if PATH cannot be read.
    """
    pairs, first_line = Pairs(), {}
    try:
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]  # a UTF-8 byte-order mark
                if not raw.strip():
                    continue
                try:
                    rec = _parse_line(raw)
                    if rec["id"] in first_line:
                        raise _Drop(
                            "duplicate_id",
                            f"duplicate id {rec['id']!r} (first on line {first_line[rec['id']]})",
                        )
                except _Drop as drop:
                    pairs.dropped.append((drop.reason, f"{path}:{lineno}: {drop}"))
                    continue
                first_line[rec["id"]] = lineno
                pairs.records.append(rec)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or exc}") from None
    return pairs


def prepare_output(path: Path) -> Path:
    """Check that PATH can be written, before any scoring: create its folder and a temporary file beside it.

    Returns the temporary file, which ``commit_output`` renames onto PATH. Raises ``InputError`` naming
    PATH when it is a directory or its folder cannot be created or written.
    """
    if path.is_dir():
        raise InputError(f"output {path} is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"output {path} cannot be written: {path.parent} is not a directory") from None
    except OSError as exc:
        raise InputError(f"output {path} cannot be written: {exc.strerror or exc}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"output {path} cannot be written: {exc.strerror or exc}") from None
    os.close(fd)
    return Path(tmp)


def commit_output(tmp: Path, path: Path, lines: list[dict]) -> None:
    """Write LINES into TMP and rename it onto PATH (mode as a new file would get under the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line, sort_keys=True) + "\n")
        tmp.chmod(0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"output {path} cannot be written: {exc.strerror or exc}") from None


def result_line(rec_id: str, result) -> dict:
    """The output record of one scored pair."""
    out = {"id": rec_id, "reward": result.score, "failure": result.failure, "aborted": result.aborted}
    out.update(result.details)
    return out


def _dropped_summary(pairs: Pairs) -> str:
    """``5 of 8 lines (not_utf8 1, bad_json 3, duplicate_id 1)``: the dropped lines, by reason."""
    counts, total = pairs.counts(), len(pairs.dropped) + len(pairs.records)
    by_reason = ", ".join(f"{r} {counts[r]}" for r in REASONS if counts[r])
    return f"{len(pairs.dropped)} of {total} line{'s' * (total != 1)}" + (
        f" ({by_reason})" if by_reason else ""
    )


def _fail(msg: str, code: int = 2) -> None:
    print(f"error: {msg}", file=sys.stderr)
    raise typer.Exit(code)


@code_app.command("code")
def score_pairs_cli(
    input: Path = typer.Option(..., "--input", exists=True, dir_okay=False, help="pairs.jsonl to score"),
    output: Path = typer.Option(..., "--output", help="scores.jsonl to write (checked before scoring)"),
    workers: int = typer.Option(0, help="sandbox workers (0: one per CPU)"),
    max_tests: int = typer.Option(MAX_TESTS, help="tests per problem (deterministic subsample)"),
    test_timeout: float = typer.Option(4.0, help="seconds per test"),
    wall: float = typer.Option(30.0, help="seconds per response, all tests together"),
    max_dropped: int | None = typer.Option(
        None,
        "--max-dropped",
        min=0,
        help="exit 1 without scoring when more than N lines are dropped (default: only when every line is)",
    ),
    unsafe_local: bool = typer.Option(
        False, "--unsafe-local", help="NO ISOLATION: your own trusted code only"
    ),
) -> None:
    # help text: score_pairs_cli.__doc__, set below (it holds a generated example line)
    try:
        tmp = prepare_output(output)
    except InputError as exc:
        _fail(str(exc))
    try:
        _score(input, output, tmp, workers, max_tests, test_timeout, wall, max_dropped, unsafe_local)
    finally:
        tmp.unlink(missing_ok=True)


#: One valid input line: the example of the help text (tests check that it parses and scores 1).
EXAMPLE_LINE = json.dumps(
    {
        "id": "a1",
        "problem": {"tests": ["assert f(1) == 2"], "fn_name": "f"},
        "response": "```python\ndef f(x):\n    return x + 1\n```",
    }
)

score_pairs_cli.__doc__ = "\n\n".join(  # one line per paragraph: the help reflows them to the terminal
    [
        "Score every (problem, response) pair of INPUT and write one result line per pair to OUTPUT.",
        'INPUT is JSONL: one UTF-8 JSON object per line with the keys "id" (string, unique in the file),'
        ' "problem" (object: "tests", a list of assert strings, and an optional "fn_name"; or "inputs" and'
        ' "outputs", lists of stdin and expected stdout strings) and "response" (string), e.g.:',
        EXAMPLE_LINE,
        "The response must hold its code in a fenced ```python block (the last one after any </think> is"
        ' run): a response without one, e.g. a bare function, scores 0 with failure "no_code_block".',
        'OUTPUT gets one {"id", "reward", "failure", ...} line per scored pair, in input order. Malformed'
        " lines (not UTF-8, not JSON, a missing key, an invalid problem, a repeated id) are dropped, named by"
        " line number on stderr and counted by reason in the summary.",
        "Exit 0: scored. 1: too many lines dropped (--max-dropped; by default: every line), nothing scored."
        " 2: input, output or sandbox unusable, said in one line.",
    ]
)


def _score(
    input: Path,
    output: Path,
    tmp: Path,
    workers: int,
    max_tests: int,
    test_timeout: float,
    wall: float,
    max_dropped: int | None,
    unsafe_local: bool,
) -> None:
    try:
        pairs = read_pairs(input)
    except InputError as exc:
        _fail(str(exc))
    for _, msg in pairs.dropped:
        print(f"dropped {msg}", file=sys.stderr)
    if not pairs.records and not pairs.dropped:
        _fail(f"{input} holds no lines: nothing scored, {output} not written", 1)
    if not pairs.records or (max_dropped is not None and len(pairs.dropped) > max_dropped):
        limit = "every line" if not pairs.records else f"more than --max-dropped {max_dropped}"
        _fail(f"{input}: {_dropped_summary(pairs)} dropped, {limit}: nothing scored, {output} not written", 1)
    limits = Limits(wall_s=wall, test_timeout_s=test_timeout)
    scorer = CodeScorer(
        workers=workers or None, limits=limits, max_tests=max_tests, unsafe_local=unsafe_local
    )
    try:
        scorer.pool  # noqa: B018 - start the sandbox now so a refusal is reported before any work
    except SandboxUnavailable as exc:
        _fail(str(exc))
    try:
        results = scorer.score_batch([(r["problem"], r["response"]) for r in pairs.records])
    finally:
        scorer.pool.close()
    lines = [result_line(rec["id"], result) for rec, result in zip(pairs.records, results, strict=True)]
    try:
        commit_output(tmp, output, lines)
    except InputError as exc:
        _fail(str(exc))
    passed, aborted = sum(r.score > 0 for r in results), sum(r.aborted for r in results)
    not_run = f", {aborted} aborted (sandbox failed, not judged)" if aborted else ""
    print(
        f"scored {len(results)} pairs ({passed} passed{not_run}), dropped {_dropped_summary(pairs)}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    code_app()
