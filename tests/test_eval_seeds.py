"""The seed-spread report on synthetic run directories: statistics, verdicts, errors and the CLI command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eval.seeds import SeedRow, fmt_stat, load_runs, seed_markdown, seed_rows, write_seed_report
from infra.cli import app

#: Per seed, the change of each target of 01_reasoning_rl (percentage points) from a fixed input.
CHANGES = {"puzzle_acc": (10, 12, 11), "science_acc": (1, 20, 2), "code_pass1": (-1, -2, 0.5)}
INPUT = 0.30


def make_run(root: Path, name: str, seed: int, recipe: str = "tiny", skip_eval: str | None = None) -> Path:
    """Write a run directory in the driver's layout (manifest.json + per-stage eval.json; test data)."""
    run = root / name
    stages = {
        "00_sft": ({"sft_format": 0.0}, {"sft_format": 0.8 + 0.01 * seed}, ["sft_format"], []),
        "01_reasoning_rl": (
            {**{m: INPUT for m in CHANGES}, "math_acc": 0.05},
            {**{m: INPUT + CHANGES[m][seed] / 100 for m in CHANGES}, "math_acc": 0.04 - 0.01 * seed},
            list(CHANGES),
            ["math_acc"],
        ),
    }
    for sid, (before, after, targets, guards) in stages.items():
        (run / sid).mkdir(parents=True)
        if sid != skip_eval:
            ev = {"input": before, "output": after, "targets": targets, "guardrails": guards}
            (run / sid / "eval.json").write_text(json.dumps(ev))
    manifest = {
        "recipe": recipe,
        "seed": seed,
        "base": {"model": "micro"},
        "stages": [{"id": sid, "folder": f"stages/{sid}", "status": "done"} for sid in stages],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    return [make_run(tmp_path, f"tiny-s{s}", s) for s in range(3)]


def _row(rows, stage, metric):
    return next(r for r in rows if r.stage == stage and r.metric == metric)


def test_statistics_and_order(runs):
    rows = seed_rows(runs)
    assert [(r.stage, r.metric) for r in rows] == [
        ("00_sft", "sft_format"),
        ("01_reasoning_rl", "puzzle_acc"),
        ("01_reasoning_rl", "science_acc"),
        ("01_reasoning_rl", "code_pass1"),
        ("01_reasoning_rl", "math_acc"),
    ]
    puzzle = _row(rows, "01_reasoning_rl", "puzzle_acc")
    assert puzzle.changes == pytest.approx([0.10, 0.12, 0.11])
    assert fmt_stat(puzzle.inputs) == "30.0 (30.0 – 30.0)"
    assert fmt_stat(puzzle.outputs) == "41.0 (40.0 – 42.0)"
    assert fmt_stat(puzzle.changes, signed=True) == "+11.0 (+10.0 – +12.0)"
    guard = _row(rows, "01_reasoning_rl", "math_acc")
    assert fmt_stat(guard.outputs) == "3.0 (2.0 – 4.0)"
    assert fmt_stat(guard.changes, signed=True) == "-2.0 (-3.0 – -1.0)"


def test_verdicts_and_guardrails(runs):
    rows = seed_rows(runs)
    assert _row(rows, "01_reasoning_rl", "puzzle_acc").verdict == "rise"
    assert _row(rows, "01_reasoning_rl", "science_acc").verdict == "within spread"
    assert _row(rows, "01_reasoning_rl", "code_pass1").verdict == "no rise"
    guard = _row(rows, "01_reasoning_rl", "math_acc")
    assert (guard.role, guard.verdict) == ("guardrail", "guardrail")
    md = seed_markdown(rows, runs)
    assert "| 01_reasoning_rl | puzzle_acc | target | 30.0 (30.0 – 30.0) | 41.0 (40.0 – 42.0) |" in md
    assert md.splitlines()[0].startswith("| stage | metric | role | input (mean, min–max) |")
    assert "3 seeds (run dirs: " in md and str(runs[2]) in md


def _target(changes: list[float]) -> SeedRow:
    return SeedRow("02_coding_rl", "code_pass1", "target", [0.4] * len(changes), [0.4 + c for c in changes])


def test_verdict_is_a_one_sided_t_test():
    # Measured Coding RL changes over 3 seeds: t = 2.84 < t(0.05, 2) = 2.92, so not yet beyond the spread.
    three = _target([0.099, 0.201, 0.368])
    assert 0.05 < three.p_value < 0.06 and three.verdict == "within spread"
    # Two more seeds in line with the first three: the same kind of spread now supports the rise.
    five = _target([0.099, 0.201, 0.368, 0.15, 0.25])
    assert five.p_value < 0.01 and five.verdict == "rise"
    # One seed falling does not veto a rise that the others carry clearly ...
    assert _target([0.10, 0.12, 0.11, 0.13, -0.01]).verdict == "rise"
    # ... but a mean below zero is "no rise", and no spread at all is decided by the sign.
    assert _target([-0.02, 0.01, -0.03]).verdict == "no rise"
    assert _target([0.05, 0.05]).p_value == 0.0 and _target([0.0, 0.0]).verdict == "no rise"
    same = SeedRow("04_general_agent", "agent_task_success", "target", [79 / 96, 84 / 96], [83 / 96, 88 / 96])
    assert same.changes[0] != same.changes[1] and same.p_value == 0.0  # equal but for float rounding
    assert _target([0.05]).verdict == "too few seeds"
    md = seed_markdown([three], [Path("a"), Path("b"), Path("c")])
    assert f"| {three.p_value:.3f} | within spread |" in md and "t-test" in md


def test_missing_eval_is_left_out_and_counted(tmp_path):
    dirs = [make_run(tmp_path, f"r{s}", s, skip_eval="01_reasoning_rl" if s == 1 else None) for s in range(3)]
    rows = seed_rows(dirs)
    puzzle = _row(rows, "01_reasoning_rl", "puzzle_acc")
    assert puzzle.seeds == 2 and puzzle.changes[1] is None
    assert fmt_stat(puzzle.changes, signed=True) == "+10.5 (+10.0 – +11.0)"
    md = seed_markdown(rows, dirs)
    assert "rise (2/3 seeds)" in md
    assert "01_reasoning_rl/puzzle_acc: r1" in md
    assert _row(rows, "00_sft", "sft_format").seeds == 3


def test_errors_name_the_directory(tmp_path, runs):
    other = make_run(tmp_path, "other", 0, recipe="rufus-air")
    with pytest.raises(ValueError, match="other.*rufus-air"):
        seed_rows([runs[0], other])
    with pytest.raises(ValueError, match="at least 2"):
        seed_rows(runs[:1])
    with pytest.raises(FileNotFoundError, match="nowhere"):
        seed_rows([runs[0], tmp_path / "nowhere"])
    twin = make_run(tmp_path, "twin", 0)  # seed 0 again, as runs[0]
    with pytest.raises(ValueError, match="twin: seed 0 again"):
        seed_rows([runs[0], twin])
    for run, digest in ((runs[0], "one"), (runs[1], "other")):
        path = run / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["stages"][1]["config_hash"] = digest
        path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="01_reasoning_rl ran with another config"):
        seed_rows(runs[:2])


def test_write_report_files(tmp_path, runs):
    out = write_seed_report(runs, tmp_path / "rep" / "seeds.md")
    assert out.read_text(encoding="utf-8").startswith("# Seed spread: tiny")
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_report_and_fails_cleanly(tmp_path, runs):
    runner = CliRunner()
    result = runner.invoke(app, ["seeds", *map(str, runs)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "seeds.md").is_file() and (tmp_path / "seeds.png").is_file()
    assert "Seed spread: tiny" in result.output
    assert "| puzzle_acc | target |" in (tmp_path / "seeds.md").read_text(encoding="utf-8")
    result = runner.invoke(app, ["seeds", str(runs[0]), str(tmp_path / "gone-s9")])
    assert result.exit_code == 2
    assert "gone-s9" in result.output.replace("\n", "")
    assert not (tmp_path / "gone-s9").exists()


def make_stage_run(root: Path, name: str, seed: int, changes: dict[str, float]) -> Path:
    """Write a `rufus stage --run-dir` folder: per stage its stage_run.json record, handoff and eval."""
    from eval.stagewise import STAGE_RUN

    run = root / name
    for sid, change in changes.items():
        (run / sid).mkdir(parents=True)
        record = {"seed": seed, "init_from": "ckpt", "input_hash": "h", "config_hash": f"cfg-{sid}"}
        (run / sid / STAGE_RUN).write_text(json.dumps(record))
        (run / sid / "handoff.json").write_text("{}")
        ev = {"input": {"t": 0.2}, "output": {"t": 0.2 + change}, "targets": ["t"], "guardrails": []}
        (run / sid / "eval.json").write_text(json.dumps(ev))
    return run


def test_stage_alone_run_dirs_make_a_seed_report(tmp_path: Path):
    """`rufus seeds` reads `rufus stage` --run-dir folders (no manifest) from their stage_run.json records."""
    rises = [(0.01, 0.0), (0.02, -0.01), (0.03, 0.01)]
    runs = [make_stage_run(tmp_path, f"s{s}", s, {"05_a": a, "05_b": b}) for s, (a, b) in enumerate(rises)]
    out = tmp_path / "seeds.md"
    result = CliRunner().invoke(app, ["seeds", *map(str, runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = {(r.stage, r.metric): r for r in seed_rows(runs)}
    assert set(rows) == {("05_a", "t"), ("05_b", "t")}
    assert rows[("05_a", "t")].verdict == "rise" and rows[("05_b", "t")].verdict != "rise"
    assert "rufus stage" in out.read_text()


def test_stage_alone_run_dir_with_two_seeds_is_refused(tmp_path: Path):
    run = make_stage_run(tmp_path, "mixed", 0, {"05_a": 0.01})
    make_stage_run(tmp_path / "other", "mixed", 1, {"05_b": 0.01})
    (tmp_path / "other" / "mixed" / "05_b").rename(run / "05_b")
    other = make_stage_run(tmp_path, "s1", 1, {"05_a": 0.01, "05_b": 0.01})
    result = CliRunner().invoke(app, ["seeds", str(run), str(other), "--out", str(tmp_path / "x.md")])
    assert result.exit_code == 2 and "several seeds" in result.output and "Traceback" not in result.output


def test_a_folder_without_manifest_or_records_names_both(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result = CliRunner().invoke(app, ["seeds", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 2 and "manifest.json" in result.output and "rufus stage" in result.output


def make_chain_run(root: Path, name: str, seed: int, change: float, config_hash: str = "cfg-06_x") -> Path:
    """Write a `rufus run` folder of 00_sft then 06_x, whose 06_x moved target t by ``change``."""
    run = root / name
    entries = []
    for sid, before, after in (("00_sft", 0.0, 0.8), ("06_x", 0.2, 0.2 + change)):
        (run / sid).mkdir(parents=True)
        ev = {"input": {"t": before}, "output": {"t": after}, "targets": ["t"], "guardrails": []}
        (run / sid / "eval.json").write_text(json.dumps(ev))
        entries.append({"id": sid, "status": "done", "config_hash": f"cfg-{sid}", "input_hash": "h"})
    entries[1]["config_hash"] = config_hash
    manifest = {"recipe": "tiny-x", "seed": seed, "base": {"model": "micro"}, "stages": entries}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_one_stage_compared_across_a_chain_and_stage_alone_runs(tmp_path: Path):
    """`--stage` puts a `rufus run` chain beside `rufus stage` folders; without it their recipes differ."""
    chain = make_chain_run(tmp_path, "chain-s0", 0, 0.02)
    alone = [make_stage_run(tmp_path, f"rl-s{s}", s, {"06_x": c}) for s, c in ((1, 0.03), (2, 0.025))]
    runs = [chain, *alone]
    runner = CliRunner()
    result = runner.invoke(app, ["seeds", *map(str, runs), "--out", str(tmp_path / "no.md")])
    assert result.exit_code == 2 and "rufus stage" in result.output and not (tmp_path / "no.md").exists()
    out = tmp_path / "one.md"
    result = runner.invoke(app, ["seeds", *map(str, runs), "--stage", "06_x", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Seed spread: stage 06_x") and "00_sft" not in text
    assert "| 06_x | t | target |" in text and "| rise |" in text
    assert "Distinct input checkpoints per stage over the seeds: 06_x 1 (3 of 3 recorded)." in text


def test_one_stage_refuses_a_run_without_it_or_with_another_config(tmp_path: Path):
    alone = make_stage_run(tmp_path, "rl-s1", 1, {"06_x": 0.03})
    chain = make_chain_run(tmp_path, "chain-s0", 0, 0.02)
    result = CliRunner().invoke(app, ["seeds", str(chain), str(alone), "--stage", "07_y"])
    assert result.exit_code == 2 and "chain-s0: no stage '07_y'" in result.output.replace("\n", "")
    other = make_chain_run(tmp_path, "chain-s2", 2, 0.01, config_hash="cfg-else")
    with pytest.raises(ValueError, match="chain-s2: stage 06_x ran with another config"):
        load_runs([chain, alone, other], stage="06_x")


def test_report_pools_the_tool_usage_of_agent_targets(tmp_path, runs):
    """Table 19's columns: each seed's means weighted by its episodes (hand-computed below)."""
    blocks = [  # seed 0: 10 episodes, 4 correct; seed 1: 30 episodes, 6 correct; seed 2 counted no tools
        {"trajectories": 10, "correct": 4, "iters": 2.0, "calls": {"web_search": 1.0},
         "iters_correct": 1.0, "iters_wrong": 8 / 3},
        {"trajectories": 30, "correct": 6, "iters": 4.0, "calls": {"web_search": 2.0, "web_scrape": 2.0},
         "iters_correct": 3.0, "iters_wrong": 4.25},
    ]  # fmt: skip
    for run, block in zip(runs, blocks, strict=False):
        logs = run / "01_reasoning_rl" / "logs"
        logs.mkdir()
        details = {"puzzle_acc": {"prompts": 5.0, "tool_usage": block}, "math_acc": {"prompts": 5.0}}
        (logs / "eval_details_output.json").write_text(json.dumps({"details": details}))
    text = write_seed_report(runs, tmp_path / "seeds.md").read_text(encoding="utf-8")
    usage = text.split("## Tool usage per trajectory (RA Table 19's columns)", 1)[1]
    assert "01_reasoning_rl · `puzzle_acc`" in usage and "science_acc" not in usage and "input" not in usage
    # iters (10*2 + 30*4)/40 = 3.5; search (10*1 + 30*2)/40 = 1.75; scrape (0 + 30*2)/40 = 1.5;
    # correct (4*1 + 6*3)/10 = 2.2; wrong (6*8/3 + 24*4.25)/30 = 118/30
    assert "| output | 2 of 3 | 40 | 3.50 | 1.50 | 1.75 | 2.20 / 3.93 |" in usage
    assert "| checkpoint | seeds | trajectories | iters | web_scrape | web_search |" in usage


def test_unreadable_eval_details_is_named(tmp_path, runs):
    logs = runs[1] / "01_reasoning_rl" / "logs"
    logs.mkdir()
    (logs / "eval_details_input.json").write_text('{"details": ')
    result = CliRunner().invoke(app, ["seeds", *map(str, runs), "--out", str(tmp_path / "seeds.md")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "eval_details_input.json: invalid JSON" in result.output


def test_report_splits_a_target_by_environment_type(tmp_path, runs):
    """Per type: mean and min–max over the seeds that split both checkpoints (hand-computed below)."""
    split = {  # seed: (input split, output split); seed 2 split only its input
        0: ({"a": (0.5, 2), "b": (0.2, 0)}, {"a": (0.7, 1), "b": (0.1, 0)}),
        1: ({"a": (0.4, 3), "b": (0.3, 1)}, {"a": (0.5, 0), "b": (0.3, 0)}),
        2: ({"a": (0.6, 0)}, None),
    }
    for seed, run in enumerate(runs):
        logs = run / "01_reasoning_rl" / "logs"
        logs.mkdir()
        for role, side in zip(("input", "output"), split[seed], strict=True):
            if side is None:
                continue
            by_type = {k: {"score": s, "prompts": 4, "truncated": t} for k, (s, t) in side.items()}
            details = {"puzzle_acc": {"prompts": 8.0, "by_env_type": by_type}, "math_acc": {"prompts": 8.0}}
            (logs / f"eval_details_{role}.json").write_text(json.dumps({"details": details}))
    text = write_seed_report(runs, tmp_path / "seeds.md").read_text(encoding="utf-8")
    part = text.split("## By environment type", 1)[1]
    assert "01_reasoning_rl · `puzzle_acc` by environment type" in part and "science_acc" not in part
    # a: changes +20, +10 -> mean 15; t = 15 / (7.07 / sqrt 2) = 3 with 1 df: p = 0.5 - atan(3) / pi = 0.102
    a_stats = "45.0 (40.0 – 50.0) | 60.0 (50.0 – 70.0) | +15.0 (+10.0 – +20.0)"
    assert f"| `a` | 2 of 3 | 4 | {a_stats} | 0.102 | 5 → 1 |" in part
    assert "| `b` | 2 of 3 | 4 | 25.0 (20.0 – 30.0) | 20.0 (10.0 – 30.0) | -5.0 (-10.0 – +0.0) |" in part
    assert "| tiny-s0 | 0 | 30.0 → 40.0 | 50.0 → 70.0 | 20.0 → 10.0 |" in part
    assert "| tiny-s2 | 2 | 30.0 → 41.0 | 60.0 → – | – → – |" in part
