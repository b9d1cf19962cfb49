"""A stored checkpoint that no longer matches its handoff is never re-signed (driver integrity).

A one-stage recipe (the letter-game stage folder of ``tests/letter_stage.py``) runs on the real embedded
backend from the micro base. Then a byte of a stored export is flipped: the driver must stop naming the
file and leave the handoff untouched, and rebuild only when ``--rebuild`` asks for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from infra.driver import Driver
from infra.handoff import TamperedHandoffError, verify_handoff
from infra.layering import ConfigError
from infra.recipe import REPO_ROOT, load_recipe

STAGE = "90_letter_game"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, letter_stage) -> Path:
    path = tmp_path_factory.mktemp("integrity") / "letter.yaml"
    doc = {"name": "letter", "base": {"model": "micro"}, "profile": "embedded", "stages": [str(letter_stage)]}
    doc["overrides"] = {"rl": {"rollout": {"num_rollouts": 1}}}
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(recipe: Path, run_dir: Path, rebuild: tuple[str, ...] = ()):  # noqa: ANN202
    driver = Driver(
        load_recipe(recipe), run_dir, console=Console(quiet=True), extra={"threads": 1}, rebuild=rebuild
    )
    return driver.run()


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_tampered_stage_output_is_refused_then_rebuilt_on_request(recipe, tmp_path):
    run = tmp_path / "run"
    first = _run(recipe, run)
    clean_hash = first.entry(STAGE).output_hash
    handoff = (run / STAGE / "handoff.json").read_bytes()
    _flip_byte(run / STAGE / "export" / "model.safetensors")
    with pytest.raises(TamperedHandoffError, match=rf"model\.safetensors.*--rebuild {STAGE}"):
        _run(recipe, run)
    assert (run / STAGE / "handoff.json").read_bytes() == handoff  # not re-signed
    again = _run(recipe, run, rebuild=(STAGE,))
    verify_handoff(run / STAGE)
    assert again.entry(STAGE).status == "done" and again.entry(STAGE).output_hash == clean_hash


def test_tampered_base_is_refused_and_the_cli_says_so_in_one_line(recipe, tmp_path):
    run = tmp_path / "run"
    _run(recipe, run)
    base_handoff = (run / "base" / "handoff.json").read_bytes()
    _flip_byte(run / "base" / "export" / "model.safetensors")
    proc = subprocess.run(
        [sys.executable, "-m", "infra.cli", "run", str(recipe), "--run-dir", str(run)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "model.safetensors" in out and "--rebuild base" in out
    assert (run / "base" / "handoff.json").read_bytes() == base_handoff
    after = _run(recipe, run, rebuild=("base",))  # the base is deterministic: the stage stays done
    verify_handoff(run / "base")
    manifest = json.loads((run / "manifest.json").read_text())
    assert after.entry(STAGE).status == "done" and manifest["stages"][0]["status"] == "done"


def test_rebuild_names_must_exist(recipe, tmp_path):
    with pytest.raises(ConfigError, match="--rebuild nope"):
        _run(recipe, tmp_path / "run", rebuild=("nope",))


def test_run_files_are_readable_by_the_team_and_reruns_say_what_they_do(recipe, tmp_path):
    import io
    import os
    import stat

    run = tmp_path / "run"
    old = os.umask(0o022)
    try:
        _run(recipe, run)
    finally:
        os.umask(old)
    for path in (run / "manifest.json", run / STAGE / "handoff.json", run / STAGE / "export"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o044 == 0o044, (path, oct(mode))  # group and others may read
    out = io.StringIO()
    other = recipe.with_name("renamed.yaml")
    doc = yaml.safe_load(recipe.read_text())
    doc["name"] = "renamed"
    doc["overrides"]["rl"]["rollout"]["max_response_tokens"] = 4
    other.write_text(yaml.safe_dump(doc))
    console = Console(file=out, width=400)
    Driver(load_recipe(other), run, console=console, extra={"threads": 1}).run()
    text = out.getvalue()
    assert "continuing a run of recipe 'letter'" in text
    assert f"{STAGE}: its config changed since the last run" in text
    assert json.loads((run / "manifest.json").read_text())["recipe"] == "renamed"
