"""The driver on the real embedded backend: SIGKILL at any moment, re-run, same final manifest.

A shrunken two-stage recipe (the real 00_sft and 01_reasoning_rl folders, resized through recipe
overrides) runs once uninterrupted and once killed with SIGKILL at several points — during data prep,
during SFT training, between stages and during RL — and re-run after each kill. The final manifests must be
equal apart from timestamps (output hashes cover the exported weights), and so must the per-step metrics
apart from wall-clock fields. Also: a failed stage hands nothing forward, and --from refuses to start
after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from infra.embedded.metrics import TIMING_KEYS
from infra.manifest import without_timestamps
from infra.recipe import REPO_ROOT

pytestmark = pytest.mark.slow

RECIPE = {
    "name": "resume",
    "base": {"model": "micro"},
    "profile": "embedded",
    "seed": 0,
    "stages": [
        {
            "stage": "stages/00_sft",
            "overrides": {
                "embedded": {
                    "data": {
                        "heldout_per_metric": 6,
                        "families": {
                            "math": 24,
                            "puzzle": 12,
                            "science": 12,
                            "code": 12,
                            "if_multi_constraint": 12,
                            "if_multiturn": 6,
                        },
                    },
                    "sft": {"epochs": 1, "eval_interval": 2, "global_batch": 8},
                }
            },
        },
        {
            "stage": "stages/01_reasoning_rl",
            "overrides": {
                "embedded": {
                    # a one-epoch SFT model rarely answers: keep zero-pass prompts so RL has rows to train on
                    "data": {
                        "families": {"math": 16, "science": 8, "puzzle": 8},
                        "heldout_per_metric": 6,
                        "learnability": {"samples": 2, "drop_zero": False},
                    },
                    "rollout": {"prompts_per_step": 2, "samples_per_prompt": 4, "num_rollouts": 3},
                }
            },
        },
    ],
}


def _cmd(recipe: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "infra.cli", "run", str(recipe), "--run-dir", str(run_dir)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(recipe: Path, run_dir: Path, log: Path) -> int:
    with open(log, "a") as out:
        return subprocess.run(
            _cmd(recipe, run_dir),
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            timeout=900,
        ).returncode


def _run_and_kill(
    recipe: Path, run_dir: Path, log: Path, when: Callable[[], bool], limit: float = 900
) -> bool:
    """Start a run, SIGKILL its whole process group once ``when()`` holds; False if it finished first.

    ``limit`` only catches a hung run: alone the whole test takes ~2 minutes, but beside CI's end-to-end
    chain and another job on two cores one kill point took over 300 s (2026-12-02 rehearsal).
    """
    with open(log, "a") as out:
        proc = subprocess.Popen(
            _cmd(recipe, run_dir),
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
        )
        deadline = time.monotonic() + limit
        while proc.poll() is None and time.monotonic() < deadline:
            if when():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"run did not reach the kill point in {limit}s; see {log}")
        return False


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _metrics(run_dir: Path, stage: str) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / stage / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


@pytest.fixture(scope="module")
def recipe_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("recipe") / "resume.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    return path


@pytest.fixture(scope="module")
def reference_run(recipe_file: Path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    assert _run(recipe_file, run_dir, run_dir.parent / "log.txt") == 0, (
        run_dir.parent / "log.txt"
    ).read_text()[-3000:]
    return run_dir


def test_sigkill_anywhere_then_rerun_gives_the_same_manifest(
    recipe_file: Path, reference_run: Path, tmp_path: Path
):
    run_dir = tmp_path / "run"
    log = tmp_path / "log.txt"
    sft, rl = run_dir / "00_sft", run_dir / "01_reasoning_rl"
    kill_points = [
        lambda: (sft / "data.tmp").exists(),  # during SFT data prep
        lambda: _lines(sft / "metrics.jsonl") >= 3,  # during SFT training
        lambda: (sft / "handoff.json").exists(),  # right after the SFT handoff
        lambda: _lines(rl / "metrics.jsonl") >= 1,  # during RL
        lambda: _lines(rl / "metrics.jsonl") >= 2 and (rl / "checkpoints").exists(),
    ]
    killed = sum(_run_and_kill(recipe_file, run_dir, log, when) for when in kill_points)
    assert killed >= 3, f"only {killed} kills landed; see {log}"
    assert _run(recipe_file, run_dir, log) == 0, log.read_text()[-3000:]

    ref = json.loads((reference_run / "manifest.json").read_text())
    got = json.loads((run_dir / "manifest.json").read_text())
    assert [s["status"] for s in got["stages"]] == ["done", "done"]
    ref_cmp, got_cmp = without_timestamps(ref), without_timestamps(got)
    ref_cmp.pop("recipe_file"), got_cmp.pop("recipe_file")
    assert got_cmp == ref_cmp
    for stage in ("00_sft", "01_reasoning_rl"):
        assert _metrics(run_dir, stage) == _metrics(reference_run, stage)


def test_rerun_of_a_finished_run_skips_everything(recipe_file: Path, reference_run: Path):
    before = json.loads((reference_run / "manifest.json").read_text())
    out = subprocess.run(
        _cmd(recipe_file, reference_run),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.count("hashes match — skipped") == 2
    after = json.loads((reference_run / "manifest.json").read_text())
    assert [s["ended_at"] for s in after["stages"]] == [s["ended_at"] for s in before["stages"]]


def test_failed_stage_hands_nothing_forward(recipe_file: Path, reference_run: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    # Reuse the finished SFT stage, then break Reasoning RL at run time: no held-out set has this name.
    subprocess.run(["cp", "-r", str(reference_run), str(run_dir)], check=True)
    cmd = _cmd(recipe_file, run_dir) + ["--set", "01_reasoning_rl.eval.targets=[no_such_metric]"]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert out.returncode != 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    entry = manifest["stages"][1]
    assert entry["status"] == "failed" and "no_such_metric" in entry["error"]
    assert entry["output_checkpoint"] is None
    assert not (run_dir / "01_reasoning_rl" / "handoff.json").exists()
    assert manifest["stages"][0]["status"] == "done"
