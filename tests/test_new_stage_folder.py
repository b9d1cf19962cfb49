"""A new stage is one folder: written in a temporary directory, listed in a recipe, run by the driver.

The folder brings its own tiny task family and held-out metric, reward and environment (``env.py``,
``reward.py``, ``data_prep.py``, ``launch.yaml``, ``README.md``) and runs in the embedded chain from the
micro base without any file of this repository being edited. Everything is real (driver, data prep,
trainer, evaluation, handoff); the model is the randomly initialised micro model.
"""

from __future__ import annotations

import json
import subprocess

import yaml
from rich.console import Console

from infra.driver import Driver
from infra.recipe import REPO_ROOT, import_stage_file, load_recipe


def _tracked_changes() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    ).stdout


def test_a_stage_folder_outside_the_repo_runs_in_the_embedded_chain(tmp_path, letter_stage):
    before = _tracked_changes()
    folder = letter_stage
    recipe = tmp_path / "recipes" / "letter.yaml"
    recipe.parent.mkdir()
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "letter",
                "base": {"model": "micro"},
                "profile": "embedded",
                "stages": [str(folder)],
            }
        )
    )
    env_module = import_stage_file(folder / "env.py")  # the very module the driver will use
    rolled_before = sum(env_module.ROLLOUTS)
    loaded = load_recipe(recipe)
    manifest = Driver(loaded, tmp_path / "run", console=Console(quiet=True), extra={"threads": 1}).run()
    assert [s.status for s in manifest.stages] == ["done"]
    stage_dir = tmp_path / "run" / "90_letter_game"
    evals = json.loads((stage_dir / "eval.json").read_text())
    assert set(evals["input"]) == set(evals["output"]) == {"letter_acc"}
    rows = [json.loads(line) for line in (stage_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the stage's own environment class ran every step (4 prompts x 4 samples) and both evaluations
    assert sum(env_module.ROLLOUTS) - rolled_before >= 3 * 16
    assert (stage_dir / "handoff.json").is_file()
    assert _tracked_changes() == before  # nothing of the repository was edited
