"""End-to-end decontamination: MB per CPU-second of the ``rufus decontam`` CLI, beside the engine alone.

Writes the registered benchmarks in their public release formats (the ten chained ones with 700 items of
120 words, the seven exhaustive math/knowledge ones with 300 items of 90 words between them: the index
sizes of ``benchmarks/bench_decontam.py``, whose Zipf text generator this reuses) and a JSONL corpus of
``id`` + ``messages`` rows (``--mb`` MB, planted copies every 500th row). Then, in one run:

* **CLI**: ``rufus decontam --benchmark NAME=FILE ... --corpus corpus.jsonl --out DIR --workers W`` runs
  as a child process, once per ``--workers`` value; its user+sys CPU time (``os.wait4``, which includes
  the scanning processes it reaps) gives MB of corpus file per CPU-second, its wall time MB/s. This is
  everything a user pays: interpreter start-up and imports, loading the benchmark files, building the
  index, JSON parsing, the scan, writing ``kept``/``removed`` JSONL with their sha256, report, manifest.
* **fixed cost**: the same CLI over a one-row corpus (start-up + index build), so the per-MB marginal
  rate of the big run can be printed too.
* **engine only**: ``scan_texts(index, texts, "hash")`` (what ``bench_decontam.py`` times) in this
  process over the same rows' texts in 1 MB batches, on an index built from the same files; its CPU time
  is compared with the CLI's (the engine's share of the end-to-end cost).

MB = 10^6 bytes of the corpus JSONL file for the CLI; the engine's MB/s counts the scanned text bytes
(``row_text`` of each row, as ``bench_decontam.py`` does), printed with the text/file byte ratio.

Run: ``python benchmarks/bench_decontam_cli.py [--mb 50] [--workers 1,2]`` (``--quick``: 3 MB).
Goal (from the issue): >= 50 MB per CPU-second end to end on one core, and linear in workers (here:
wall MB/s past the fixed cost with W workers >= 90% of W x the 1-worker figure). Scaling needs idle
cores: on a busy machine the wall-clock figures say little; the per-CPU-second figures hold up better.
With ``--quick`` the fixed cost dominates and the "past the fixed cost" figures are noise.

Last measured (2026-12-02 at ~16:15 UTC, `--mb 144 --workers 1,2`, nothing else running, AVX-512 machine):
with the scan hashing per-word fingerprints (length and five bytes) instead of every byte, the engine
alone 165-173 MB/CPU-s against 98 for the byte hash in the same hour; the CLI with one worker 54-61 MB/CPU-s
end to end (2.36-2.67 CPU-s) against 46.2 (3.11) before: the goal is met at 144 MB. Fixed cost ~0.8
CPU-s, of which the index build ~0.4; past it 78-92 MB/CPU-s. The engine is now about a third of the
CPU; ``json.loads`` (~0.4 CPU-s at 144 MB), row text, hashing and writing the outputs, and start-up the
rest. Two workers on this 2-core machine: 78-84% of linear past the fixed cost (63% before the workers
read their own byte ranges and spill their kept lines to files instead of passing both through the
pool's pipes: the main process's CPU past the fixed cost fell 0.72 -> 0.27 s at 144 MB). NOT met here:
the main process (hashing and writing ``kept.jsonl``, ~1.9 ms per MB) shares the two cores with the
workers; with a core of its own it keeps up with ~6 workers at this rate, and one sha256 stream
(~1.3 GB/s) bounds a single output file at ~16.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decontam import _text, _vocab  # noqa: E402

from data_prep.benchmarks import CHAINED, EXHAUSTIVE, BenchmarkItem  # noqa: E402
from data_prep.decontam_pipeline import load_benchmarks, row_text  # noqa: E402
from data_prep.decontaminate import build_index, scan_texts  # noqa: E402
from data_prep.io import MalformedCounter  # noqa: E402

CHAINED_ITEMS, CHAINED_WORDS = 700, 120
EXHAUSTIVE_ITEMS = {"gpqa-diamond": 120, **{n: 30 for n in EXHAUSTIVE if n != "gpqa-diamond"}}  # 300
EXHAUSTIVE_WORDS = 90
PLANT_EVERY = 500


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_public(name: str, items: list[BenchmarkItem], root: Path) -> Path:
    """Write ``items`` as benchmark ``name``'s public release format; return the file (or folder)."""
    if name == "terminal-bench-2.0":  # a folder of task folders with instruction.md
        folder = root / "terminal-bench"
        for it in items:
            (folder / it.id).mkdir(parents=True)
            (folder / it.id / "instruction.md").write_text(it.text, encoding="utf-8")
        return folder
    if name == "tau2-bench":  # tasks.json: user_scenario.instructions
        path = root / "tau2_tasks.json"
        tasks = [
            {"id": it.id, "user_scenario": {"instructions": {"reason_for_call": it.text}}} for it in items
        ]
        path.write_text(json.dumps(tasks), encoding="utf-8")
        return path
    if name == "gpqa-diamond":  # gpqa_diamond.csv
        path = root / "gpqa_diamond.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["Record ID", "Question", "Correct Answer"])
            writer.writerows([it.id, it.text, "A"] for it in items)
        return path
    records = {
        "hle": lambda it: {"id": it.id, "question": it.text, "answer": "x"},
        "hle-verified": lambda it: {"id": it.id, "question": it.text, "answer": "x"},
        "sealqa": lambda it: {"id": it.id, "question": it.text, "answer": "x"},
        "swe-bench-verified": lambda it: {"instance_id": it.id, "problem_statement": it.text},
        "multi-challenge": lambda it: {
            "QUESTION_ID": it.id,
            "CONVERSATION": [{"role": "user", "content": it.text}],
        },
        "ifeval": lambda it: {"key": it.id, "prompt": it.text, "instruction_id_list": []},
        "ifbench": lambda it: {"key": it.id, "prompt": it.text, "instruction_id_list": []},
        "mcp-atlas": lambda it: {"TASK_ID": it.id, "PROMPT": it.text},
    }
    to_record = records.get(name, lambda it: {"id": it.id, "problem": it.text, "answer": "0"})
    return _jsonl(root / f"{name}.jsonl", [to_record(it) for it in items])


def make_benchmarks(rng: random.Random, vocab, root: Path) -> tuple[dict[str, Path], list[str]]:
    """Write every registered benchmark; return ``name -> path`` and the chained items' texts."""
    specs, chained_texts = {}, []
    for name in CHAINED:
        items = [BenchmarkItem(f"{name}-{i}", _text(rng, vocab, CHAINED_WORDS)) for i in range(CHAINED_ITEMS)]
        chained_texts += [it.text for it in items]
        specs[name] = write_public(name, items, root)
    for name, n in EXHAUSTIVE_ITEMS.items():
        items = [BenchmarkItem(f"{name}-{i}", _text(rng, vocab, EXHAUSTIVE_WORDS)) for i in range(n)]
        specs[name] = write_public(name, items, root)
    return specs, chained_texts


def make_corpus(rng: random.Random, vocab, path: Path, mb: float, planted: list[str]) -> tuple[int, int]:
    """Write a JSONL corpus of about ``mb`` MB; return (rows, planted copies)."""
    size = rows = plants = 0
    with path.open("w", encoding="utf-8") as fh:
        while size < mb * 1e6:
            answer = _text(rng, vocab, rng.randint(100, 1500))
            if rows % PLANT_EVERY == 0:
                answer += "\n" + planted[(rows // PLANT_EVERY * 7919) % len(planted)]
                plants += 1
            row = {
                "id": f"row-{rows}",
                "messages": [
                    {"role": "user", "content": _text(rng, vocab, rng.randint(10, 60))},
                    {"role": "assistant", "content": answer},
                ],
            }
            line = json.dumps(row) + "\n"
            fh.write(line)
            size += len(line.encode())
            rows += 1
    return rows, plants


def cli_command() -> list[str]:
    """The ``rufus`` console script of this interpreter's environment (else ``python -m infra.cli``)."""
    script = Path(sys.executable).with_name("rufus")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "infra.cli"]


def run_cli(specs: dict[str, Path], corpus: Path, out: Path, workers: int) -> dict:
    """Run ``rufus decontam`` as a child; return its CPU seconds (user+sys), wall seconds and report."""
    cmd = [*cli_command(), "decontam"]
    for name, path in specs.items():
        cmd += ["--benchmark", f"{name}={path}"]
    cmd += ["--corpus", str(corpus), "--out", str(out), "--workers", str(workers)]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = child.stdout.read()  # drain before reaping (the child prints one line)
    _, status, usage = os.wait4(child.pid, 0)  # rusage of the child and the workers it reaped
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()
    if child.returncode != 0:
        raise SystemExit(f"rufus decontam failed ({child.returncode}):\n{output.decode(errors='replace')}")
    report = json.loads((out / "report.json").read_text())
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall, "report": report}


def engine_only(specs: dict[str, Path], corpus: Path) -> dict[str, float]:
    """Build the index from the files and scan the corpus rows' texts with the hash engine, in process.

    Returns text MB, the index build's CPU seconds, the scan's CPU and wall seconds and the rows removed;
    JSON parsing is done before the scan is timed.
    """
    cpu0 = time.process_time()
    index = build_index(load_benchmarks(specs, MalformedCounter()))
    index_cpu = time.process_time() - cpu0
    texts = [row_text(json.loads(line)) for line in corpus.open(encoding="utf-8")]
    batches, batch, size = [], [], 0
    for text in texts:  # 1 MB batches, as the CLI's streaming scanner uses
        batch.append(text)
        size += len(text)
        if size >= 1 << 20:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    scan_texts(index, ["warm-up"], "hash")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    found = sum(m is not None for b in batches for m in scan_texts(index, b, "hash"))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    text_mb = sum(len(t.encode()) for t in texts) / 1e6
    return {"mb": text_mb, "index_cpu": index_cpu, "cpu": cpu, "wall": wall, "found": found}


def report(mb: float, fixed: dict, eng: dict[str, float], runs: dict[int, dict]) -> None:
    """Print the fixed cost, the engine-only rate, each CLI run, the ratios and the goals."""
    print(
        f"fixed cost (1-row corpus: start-up, imports, benchmark loading, index build): "
        f"{fixed['cpu']:.2f} CPU-s, {fixed['wall']:.2f} s wall; of which index build "
        f"{eng['index_cpu']:.2f} CPU-s (measured in this process)"
    )
    print(
        f"engine only (hash scan_texts, 1 core): {eng['mb'] / eng['cpu']:6.1f} MB/CPU-s "
        f"({eng['mb'] / eng['wall']:.1f} MB/s wall) over {eng['mb']:.1f} MB of text "
        f"(= {eng['mb'] / mb:.0%} of the file bytes), removed {eng['found']}"
    )

    def rate(seconds: float) -> str:
        return f"{mb / seconds:.1f}" if seconds > 0 else "n/a"

    for w, r in runs.items():
        r["marginal_cpu"] = r["cpu"] - fixed["cpu"]
        r["marginal_wall"] = r["wall"] - fixed["wall"]
        print(
            f"CLI --workers {w}: {mb / r['cpu']:6.1f} MB/CPU-s end to end, {mb / r['wall']:6.1f} MB/s wall "
            f"({r['cpu']:.2f} CPU-s, {r['wall']:.2f} s); past the fixed cost: "
            f"{rate(r['marginal_cpu'])} MB/CPU-s, {rate(r['marginal_wall'])} MB/s wall; "
            f"removed {r['report']['removed']}"
        )
    one = runs.get(1)
    if one is None:
        return
    print(
        f"engine CPU / CLI CPU (1 worker): {eng['cpu'] / one['cpu']:.0%} (the rest: start-up, index build, "
        f"JSON in/out, row_text, hashing the outputs)"
    )
    per_core = mb / one["cpu"]
    print(
        f"ratio CLI end to end / engine only (MB per CPU-s, 1 worker): "
        f"{per_core / (eng['mb'] / eng['cpu']):.2f}x"
    )
    print(f"goal >=50 MB per CPU-second end to end (1 worker): {'met' if per_core >= 50 else 'NOT met'}")
    if one["marginal_cpu"] > 0:
        marginal = mb / one["marginal_cpu"]
        # End to end = size / (fixed + size / marginal): it passes 50 from this corpus size on.
        reach = (
            f"from ~{50 * fixed['cpu'] / (1 - 50 / marginal):.0f} MB of corpus" if marginal > 50 else "never"
        )
        print(
            f"past the fixed cost (1 worker): {marginal:.1f} MB/CPU-s, goal >=50 "
            f"{'met' if marginal >= 50 else 'NOT met'}; end to end reaches 50 MB/CPU-s {reach}"
        )
    # Below this, the corpus's share of the 1-worker run is within the fixed cost's run-to-run noise.
    judged = one["marginal_wall"] >= fixed["wall"]
    for w, r in runs.items():
        if w > 1:
            speedup = one["wall"] / r["wall"]
            marginal = one["marginal_wall"] / r["marginal_wall"] if r["marginal_wall"] > 0 else math.inf
            verdict = ("met" if marginal / w >= 0.9 else "NOT met") if judged else "not judged"
            print(
                f"scaling 1 -> {w} workers: wall speedup {speedup:.2f}x end to end, {marginal:.2f}x past the "
                f"fixed cost (= {marginal / w:.0%} of linear); MB/CPU-s {mb / r['cpu'] / per_core:.2f}x of "
                f"1 worker; goal >=90% of linear (past the fixed cost): {verdict} (on {os.cpu_count()} "
                f"cores, load average {os.getloadavg()[0]:.1f})"
            )
    if not judged:
        print(
            "scaling not judged: the 1-worker corpus run took less than the fixed cost again "
            "(run a bigger --mb)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="corpus size in MB (JSONL file bytes)")
    parser.add_argument("--workers", default="1,2", help="comma-separated --workers values for the CLI")
    parser.add_argument("--quick", action="store_true", help="a 3 MB corpus (a smoke run)")
    args = parser.parse_args()
    mb_target = 3.0 if args.quick else args.mb
    workers = [int(w) for w in args.workers.split(",")]
    rng = random.Random(0)
    vocab = _vocab(rng)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bench").mkdir()
        specs, chained_texts = make_benchmarks(rng, vocab, root / "bench")
        corpus = root / "corpus.jsonl"
        rows, plants = make_corpus(rng, vocab, corpus, mb_target, chained_texts)
        mb = corpus.stat().st_size / 1e6
        tiny = root / "one_row.jsonl"
        tiny.write_text(corpus.open(encoding="utf-8").readline(), encoding="utf-8")
        print(
            f"benchmarks: {len(specs)} registered, public formats; corpus: {rows} rows, {mb:.1f} MB JSONL, "
            f"{plants} planted copies; CLI: {' '.join(cli_command())} decontam"
        )

        fixed = run_cli(specs, tiny, root / "out-fixed", 1)
        eng = engine_only(specs, corpus)
        runs = {w: run_cli(specs, corpus, root / f"out-w{w}", w) for w in workers}

    report(mb, fixed, eng, runs)


if __name__ == "__main__":
    main()
