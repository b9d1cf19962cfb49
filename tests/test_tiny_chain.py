"""End to end: the README's main command trains the whole tiny chain on CPU, and every stage learns.

`rufus run recipes/tiny.yaml` runs SFT → Reasoning RL → Coding RL → IF RL on the micro model with the
production data builders, rewards, filters and objectives at embedded sizes. Each stage must raise its
primary held-out target over the checkpoint it started from (eval.json), hand a verified checkpoint to the
next, and the report must render. The run is seeded and single-threaded, so it is deterministic on a given
machine; the README's measured table comes from this same command over three seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.handoff import verify_handoff
from infra.recipe import REPO_ROOT

pytestmark = pytest.mark.slow
STAGES = ["00_sft", "01_reasoning_rl", "02_coding_rl", "03_if_rl"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "infra.cli", "run", "recipes/tiny.yaml", "--run-dir", str(run_dir)]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=3000)
    (run_dir.parent / "log.txt").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return run_dir


def test_every_stage_is_done_and_hands_off_a_verified_checkpoint(tiny_run: Path):
    manifest = json.loads((tiny_run / "manifest.json").read_text())
    assert [s["id"] for s in manifest["stages"]] == STAGES
    assert all(s["status"] == "done" for s in manifest["stages"])
    template = manifest["chat_template_sha256"]
    for prev, stage in zip(["base", *STAGES], STAGES, strict=False):
        record = verify_handoff(tiny_run / stage, expected_template=template)
        assert record["lineage"]["chain"][-1] == stage
        entry = next(s for s in manifest["stages"] if s["id"] == stage)
        assert entry["input_checkpoint"] == f"{prev}/export"
        rows = (tiny_run / stage / "metrics.jsonl").read_text().splitlines()
        assert rows and all("step" in json.loads(r) for r in rows)


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_raises_its_primary_target(tiny_run: Path, stage: str):
    ev = json.loads((tiny_run / stage / "eval.json").read_text())
    target = ev["targets"][0]
    assert ev["output"][target] > ev["input"][target], f"{stage}: {target} {ev['input']} -> {ev['output']}"
    for guard in ev["guardrails"]:
        assert guard in ev["output"] and guard in ev["input"]


def test_report_renders_table_and_plots(tiny_run: Path):
    out = subprocess.run(
        [sys.executable, "-m", "infra.cli", "report", str(tiny_run)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = tiny_run / "report"
    table = (report / "stagewise.md").read_text()
    for stage in STAGES:
        assert stage in table
    assert len(list(report.rglob("*.png"))) >= len(STAGES)
    assert "stagewise" in (report / "index.html").read_text().lower()
