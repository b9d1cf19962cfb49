"""Expected failures of the ``rufus`` CLI print one line naming the file or key and exit 2 (no traceback)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from infra.cli import app

RUNNER = CliRunner()


def _fails_in_one_line(args: list[str], *needles: str) -> str:
    result = RUNNER.invoke(app, args)
    out = result.output
    assert result.exit_code == 2, out
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out
    for needle in needles:
        assert needle in out, (needle, out)
    return out


def test_truncated_manifest_is_named(tmp_path: Path):
    (tmp_path / "manifest.json").write_text('{"recipe": "x", ')
    out = _fails_in_one_line(["status", str(tmp_path)], "manifest.json", "not a readable run manifest")
    assert out.count("\n") == 1  # one line, not wrapped


def test_report_on_a_folder_that_is_no_run(tmp_path: Path):
    _fails_in_one_line(["report", str(tmp_path / "nowhere")], "nowhere/manifest.json not found")


def test_unknown_profile_is_a_usage_error(tmp_path: Path):
    result = RUNNER.invoke(
        app, ["stage", "stages/01_reasoning_rl", "prep", "--init-from", str(tmp_path), "--profile", "bogus"]
    )
    assert result.exit_code == 2 and "bogus" in result.output and "Traceback" not in result.output


def test_error_text_is_printed_without_markup(tmp_path: Path):
    recipe = tmp_path / "bad [draft].yaml"
    recipe.write_text("name: [unclosed\n")
    out = _fails_in_one_line(["run", str(recipe)])
    assert "bad [draft].yaml" in out  # rich markup would have eaten "[draft]"


def test_status_is_not_cut_at_80_columns_when_piped(tmp_path: Path):
    from infra.manifest import RunManifest, StageEntry

    m = RunManifest(recipe="r", recipe_file="r.yaml", profile="embedded", seed=0, base={"model": "micro"})
    long = "01_reasoning_rl/export/with/a/rather/long/path/that/no/eighty/column/table/keeps"
    m.stages = [StageEntry(id="01_reasoning_rl", folder="stages/01_reasoning_rl", kind="rl", status="done")]
    m.stages[0].output_checkpoint = long
    m.save(tmp_path)
    result = RUNNER.invoke(app, ["status", str(tmp_path)])
    assert result.exit_code == 0 and long in result.output


def test_init_from_a_folder_that_is_no_checkpoint(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("not a model")
    args = [
        "stage",
        "stages/01_reasoning_rl",
        "prep",
        "--init-from",
        str(tmp_path),
        "--run-dir",
        str(tmp_path / "r"),
    ]
    _fails_in_one_line(args, f"--init-from {tmp_path}", "config.json missing")
