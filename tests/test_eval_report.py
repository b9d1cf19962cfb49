"""The stagewise report on a synthetic run directory: rows, deltas, plots, HTML links, comparison mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from eval.report import load_run, print_stagewise, stagewise_rows, write_report

STAGES = {
    "00_sft": ({"sft_format": 0.10, "math_acc": 0.05}, {"sft_format": 0.90, "math_acc": 0.20},
               ["sft_format"], []),
    "01_reasoning_rl": ({"science_acc": 0.30, "math_acc": 0.20}, {"science_acc": 0.45, "math_acc": 0.18},
                        ["science_acc"], ["math_acc"]),
    "02_coding_rl": ({"code_pass1": 0.25}, {"code_pass1": 0.40}, ["code_pass1"], []),
}  # fmt: skip


def make_run(root: Path, name: str, stages: dict, seed: int = 0) -> Path:
    """Write a run directory in the driver's layout (test data, not results)."""
    run = root / name
    entries = []
    for sid, (before, after, targets, guards) in stages.items():
        d = run / sid
        d.mkdir(parents=True)
        evaluation = {"input": before, "output": after, "targets": targets, "guardrails": guards}
        (d / "eval.json").write_text(json.dumps(evaluation))
        lines = [
            json.dumps(
                {"step": s, "reward_mean": 0.1 * s + seed, "response_length_mean": 100 - s, "lr": 1e-6}
            )
            for s in range(8)
        ]
        (d / "metrics.jsonl").write_text("\n".join(lines + ["not json"]) + "\n")
        entries.append(
            {"id": sid, "folder": f"stages/{sid}", "status": "done", "metrics": {"selected_step": 5}}
        )
    entries.append({"id": "03_if_rl", "folder": "stages/03_if_rl", "status": "pending"})
    manifest = {
        "recipe": name,
        "profile": "embedded",
        "seed": seed,
        "base": {"model": "micro"},
        "stages": entries,
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_rows_and_deltas(tmp_path):
    columns, rows = stagewise_rows(load_run(make_run(tmp_path, "tiny", STAGES)))
    assert [r.label for r in rows] == [
        "base (micro)",
        "+ 00_sft",
        "+ 01_reasoning_rl",
        "+ 02_coding_rl",
        "+ 03_if_rl",
    ]
    assert columns[:2] == ["sft_format", "math_acc"] and "code_pass1" in columns
    base, sft, rl, coding, pending = rows
    assert base.cells["sft_format"].value == pytest.approx(0.10) and base.cells["sft_format"].delta is None
    assert sft.cells["sft_format"].delta == pytest.approx(0.80) and sft.cells["sft_format"].role == "target"
    # The row above carries the next stage's input values (Table 2 form).
    assert sft.cells["science_acc"].value == pytest.approx(0.30) and sft.cells["science_acc"].delta is None
    assert rl.cells["science_acc"].delta == pytest.approx(0.15)
    assert rl.cells["math_acc"].delta == pytest.approx(-0.02) and rl.cells["math_acc"].role == "guardrail"
    assert coding.cells["code_pass1"].delta == pytest.approx(0.15)
    assert pending.status == "pending" and not pending.cells


def test_report_files_plots_and_links(tmp_path):
    out = write_report(make_run(tmp_path, "tiny", STAGES))
    md = (out / "stagewise.md").read_text()
    assert "| + 01_reasoning_rl | done |" in md and "+0.150 ▲" in md and "-0.020 ▼" in md
    assert "science_acc (~GPQA)" in md
    pngs = sorted((out / "plots").glob("*.png"))
    assert [p.stem for p in pngs] == ["00_sft", "01_reasoning_rl", "02_coding_rl"]
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    html = (out / "index.html").read_text()
    linked = set(re.findall(r'src="([^"]+\.png)"', html))
    assert linked == {f"plots/{p.name}" for p in pngs}
    assert all((out / rel).is_file() for rel in linked)
    assert 'class="target"' in html and 'class="down"' in html


def test_comparison_mode(tmp_path):
    swapped = dict(STAGES)
    swapped["02_coding_rl"] = ({"code_pass1": 0.25}, {"code_pass1": 0.30}, ["code_pass1"], [])
    a = make_run(tmp_path, "tiny", STAGES)
    b = make_run(tmp_path, "tiny_swap", swapped, seed=1)
    out = write_report(a, compare=b)
    md = (out / "stagewise.md").read_text()
    assert "## Comparison with tiny_swap" in md
    assert "0.400 / 0.300 (-0.100 ▼)" in md
    html = (out / "index.html").read_text()
    assert "Comparison: tiny / tiny_swap" in html and "plots/compare/02_coding_rl.png" in html


def test_rich_printer_and_errors(tmp_path):
    console = Console(record=True, width=200)
    print_stagewise(make_run(tmp_path, "tiny", STAGES), console)
    text = console.export_text()
    assert "+ 01_reasoning_rl" in text and "+0.150" in text
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        load_run(tmp_path / "missing")
    bad = make_run(tmp_path, "bad", STAGES)
    (bad / "00_sft" / "eval.json").write_text("{oops")
    with pytest.raises(ValueError, match="00_sft/eval.json"):
        load_run(bad)


def test_dynamics_page_reads_first_what_matters_and_folds_flat_series(tmp_path):
    """Reward, pass rate, length... come first; a key with one value at every step gets no panel."""
    from eval.plots import plot_stage, split_constant

    rows = [
        {"step": s, "reward_mean": 0.1 * s, "lr": 2e-4, "phase": 0, "aborted_samples": 0,
         "grad_norm": 1.0 + s, "zz_extra": float(s % 2), "pass_rate": 0.5, "response_length_mean": 20 + s,
         "heldout_x": s}
        for s in range(1, 6)
    ]  # fmt: skip
    moved, constant = split_constant(rows)
    assert moved == ["reward_mean", "response_length_mean", "grad_norm", "heldout_x", "zz_extra"]
    assert constant == {"pass_rate": 0.5, "aborted_samples": 0.0, "lr": 2e-4, "phase": 0.0}
    assert split_constant([{"step": 1, "lr": 1.0}]) == (["lr"], {})  # one point is a reading, not flat
    assert plot_stage(rows, tmp_path / "p.png", "stage").is_file()
    assert plot_stage([{"step": 1, "lr": 1.0}, {"step": 2, "lr": 1.0}], tmp_path / "q.png", "flat").is_file()
