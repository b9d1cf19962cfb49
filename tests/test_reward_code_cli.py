"""``rufus reward code`` says no to wrong input: duplicate ids, dropped lines, bad bytes, bad output, help."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.cli import app
from infra.sandbox import check_isolation
from rewards import code_cli

RUNNER = CliRunner()
PROBLEM = {"tests": ["assert f(1) == 2", "assert f(0) == 1"], "fn_name": "f"}
RIGHT = "```python\ndef f(x):\n    return x + 1\n```"
WRONG = "```python\ndef f(x):\n    return x\n```"


@pytest.fixture
def sandbox():
    """Skip without root (the sandbox cannot be set up); as root, a missing sandbox is a failure."""
    if not check_isolation().ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root: " + "; ".join(check_isolation().problems))
        pytest.fail("sandbox isolation unavailable: " + "; ".join(check_isolation().problems))


@pytest.fixture
def no_scoring(monkeypatch):
    """Fail the test if the command gets as far as starting a scorer."""

    def refuse(*args, **kwargs):
        raise AssertionError("the command started scoring")

    monkeypatch.setattr(code_cli, "CodeScorer", refuse)


def _line(rec_id: str, response: str = RIGHT, problem: dict | None = None) -> bytes:
    return json.dumps({"id": rec_id, "problem": problem or PROBLEM, "response": response}).encode()


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _invoke(src: Path, out: Path, *extra: str):
    args = ["reward", "code", "--input", str(src), "--output", str(out), "--workers", "1"]
    return RUNNER.invoke(app, [*args, "--wall", "4", "--test-timeout", "1", *extra])


def _rows(out: Path) -> list[tuple[str, float]]:
    return [(r["id"], r["reward"]) for r in map(json.loads, out.read_text().splitlines())]


def _no_traceback(res) -> None:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output


def _only(folder: Path, *names: str) -> None:
    """FOLDER holds exactly NAMES: no temporary output file is left behind."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


def test_help_gives_the_line_format_and_the_fenced_block():
    res = RUNNER.invoke(app, ["reward", "code", "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    for needle in ('"id"', '"problem"', '"response"', '"tests"', '"fn_name"', '"inputs"', '"outputs"'):
        assert needle in flat, needle
    assert " ".join(code_cli.EXAMPLE_LINE.split()) in flat  # the one-line example, whole
    assert "fenced ```python block" in flat and "bare function" in flat and "no_code_block" in flat
    assert "--max-dropped" in flat


def test_help_example_is_a_valid_line_that_scores_1(sandbox, tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text(code_cli.EXAMPLE_LINE + "\n")
    res = _invoke(src, tmp_path / "s.jsonl")
    assert res.exit_code == 0, res.output
    assert _rows(tmp_path / "s.jsonl") == [("a1", 1.0)]


def test_later_duplicate_ids_are_dropped_and_named(sandbox, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [_line("a"), _line("b", WRONG), _line("a", WRONG), _line("c")])
    out = tmp_path / "s.jsonl"
    res = _invoke(src, out)
    assert res.exit_code == 0, res.output
    _no_traceback(res)
    assert _rows(out) == [("a", 1.0), ("b", 0.0), ("c", 1.0)]  # the first "a" is the one scored
    assert f"{src}:3: duplicate id 'a' (first on line 1)" in res.stderr
    assert "scored 3 pairs (2 passed), dropped 1 of 4 lines (duplicate_id 1)" in res.stderr
    _only(tmp_path, "pairs.jsonl", "s.jsonl")


def test_a_non_utf8_line_is_counted_with_its_line_number_and_the_rest_scored(sandbox, tmp_path):
    bad = b'{"id": "x", "problem": {"tests": ["assert f(1) == 2"]}, "response": "caf\xe9"}'
    src = _write(tmp_path / "pairs.jsonl", [_line("a"), bad, b"", _line("b", "def f(x):\n    return x + 1")])
    out = tmp_path / "s.jsonl"
    res = _invoke(src, out)
    assert res.exit_code == 0, res.output
    _no_traceback(res)
    assert _rows(out) == [("a", 1.0), ("b", 0.0)]
    assert f"{src}:2: not UTF-8 (byte 0xe9" in res.stderr
    assert "dropped 1 of 3 lines (not_utf8 1)" in res.stderr
    # a bare function, without a fenced block, is not run
    assert json.loads(out.read_text().splitlines()[1])["failure"] == "no_code_block"


def test_drop_counts_by_reason_in_the_summary(sandbox, tmp_path):
    lines = [
        _line("a"),
        b"{broken",
        b"[1, 2]",
        json.dumps({"id": 7, "problem": PROBLEM, "response": RIGHT}).encode(),
        _line("d", problem={"tests": []}),
        _line("a"),
        b"[" * 100_000,  # nested too deeply for the JSON parser: still one dropped line
    ]
    src = _write(tmp_path / "pairs.jsonl", lines)
    res = _invoke(src, tmp_path / "s.jsonl")
    assert res.exit_code == 0, res.output
    _no_traceback(res)
    assert "dropped 6 of 7 lines (bad_json 3, bad_key 1, bad_problem 1, duplicate_id 1)" in res.stderr
    for lineno in range(2, 8):
        assert f"{src}:{lineno}: " in res.stderr, lineno


def test_every_line_dropped_exits_1_without_scoring(no_scoring, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [b"{broken", b"\xff\xfe", _line("a", problem={"nope": 1})])
    out = tmp_path / "s.jsonl"
    res = _invoke(src, out)
    assert res.exit_code == 1, res.output
    _no_traceback(res)
    err = res.stderr.splitlines()
    assert err[-1] == (
        f"error: {src}: 3 of 3 lines (not_utf8 1, bad_json 1, bad_problem 1) dropped, every line:"
        f" nothing scored, {out} not written"
    )
    assert [e.split(": ")[0] for e in err[:-1]] == [f"dropped {src}:{n}" for n in (1, 2, 3)]
    _only(tmp_path, "pairs.jsonl")


def test_an_empty_input_exits_1(no_scoring, tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text("\n\n")
    res = _invoke(src, tmp_path / "s.jsonl")
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert f"{src} holds no lines" in res.output
    _only(tmp_path, "pairs.jsonl")


def test_max_dropped_exceeded_exits_1_before_scoring(no_scoring, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [_line("a"), b"{broken", _line("a"), _line("b")])
    out = tmp_path / "s.jsonl"
    res = _invoke(src, out, "--max-dropped", "1")
    assert res.exit_code == 1, res.output
    _no_traceback(res)
    assert res.stderr.splitlines()[-1] == (
        f"error: {src}: 2 of 4 lines (bad_json 1, duplicate_id 1) dropped, more than --max-dropped 1:"
        f" nothing scored, {out} not written"
    )
    assert not out.exists()


def test_max_dropped_within_the_limit_scores(sandbox, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [_line("a"), b"{broken", _line("a"), _line("b", WRONG)])
    out = tmp_path / "s.jsonl"
    res = _invoke(src, out, "--max-dropped", "2")
    assert res.exit_code == 0, res.output
    assert _rows(out) == [("a", 1.0), ("b", 0.0)]
    assert "dropped 2 of 4 lines (bad_json 1, duplicate_id 1)" in res.stderr


def test_max_dropped_must_not_be_negative(no_scoring, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [_line("a")])
    res = _invoke(src, tmp_path / "s.jsonl", "--max-dropped", "-1")
    assert res.exit_code == 2 and "--max-dropped" in res.output
    _no_traceback(res)


@pytest.mark.parametrize(
    "where, why",
    [
        ("dir", "is a directory"),
        ("file/s.jsonl", "is not a directory"),
        ("file/sub/s.jsonl", "Not a directory"),
        ("/proc/rufus-no-such-folder/s.jsonl", "cannot be written"),
    ],
)
def test_unwritable_output_fails_in_one_line_before_scoring(no_scoring, tmp_path, where, why):
    if where.startswith("/proc") and not sys.platform.startswith("linux"):
        pytest.skip("/proc is Linux's")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    src = _write(tmp_path / "pairs.jsonl", [_line("a"), b"{broken"])
    out = tmp_path / where
    res = _invoke(src, out)
    assert res.exit_code == 2, res.output
    _no_traceback(res)
    assert res.output.count("\n") == 1, res.output  # before reading the input: no "dropped" lines either
    assert res.output.startswith(f"error: output {out} ") and why in res.output, res.output
    _only(tmp_path, "dir", "file", "pairs.jsonl")
    assert list((tmp_path / "dir").iterdir()) == []


def test_output_is_replaced_whole_and_gets_a_new_files_mode(sandbox, tmp_path):
    src = _write(tmp_path / "pairs.jsonl", [_line("a")])
    out = tmp_path / "new" / "s.jsonl"
    out.parent.mkdir()
    out.write_text("stale\n" * 10)
    res = _invoke(src, out)
    assert res.exit_code == 0, res.output
    assert _rows(out) == [("a", 1.0)]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    _only(out.parent, "s.jsonl")
