"""Coding-RL-shaped sandbox benchmark: warm pool vs one sandboxed process per test vs unisolated exec.

Builds a batch of responses (mixed functional/stdin-stdout problems, up to 50 tests each, with a share of
wrong and timing-out answers), scores it three ways in one run and prints wall times, tests/s per core
and the two ratios the issue asks for (goal: >= 10x the per-test baseline, >= 50% of the ceiling)::

    python benchmarks/bench_sandbox.py [--quick] [--responses N] [--workers W]

Every way stops a response at its first failing test (the reward is all-pass), so all three run the
same tests; the rewards of "ours" and the ceiling are checked to agree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.sandbox import Limits, check_isolation  # noqa: E402
from infra.sandbox.isolation import bwrap_argv, find_bwrap  # noqa: E402
from infra.sandbox.judge import normalize_output  # noqa: E402
from rewards.code_reward import CodeScorer, extract_code, parse_problem, select_tests  # noqa: E402

TEST_TIMEOUT = 1.0


def make_batch(n: int, seed: int = 0) -> list[tuple[dict, str]]:
    """``n`` (problem, response) pairs: 80% correct, 14% wrong at a random test, 6% never finishing."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        k = rng.randint(10, 50)
        c = rng.randint(1, 100)
        roll = rng.random()
        if i % 2 == 0:
            tests = [f"assert solve({x}, {x + 1}) == {x * (x + 1) + c}" for x in range(k)]
            bad = rng.randint(0, k - 1)
            body = f"def solve(a, b):\n    return a * b + {c}"
            if roll < 0.06:
                body = "def solve(a, b):\n    while True:\n        pass"
            elif roll < 0.20:
                body = f"def solve(a, b):\n    return a * b + ({c} if a != {bad} else 0)"
            items.append(({"tests": tests, "fn_name": "solve"}, f"```python\n{body}\n```"))
        else:
            inputs = [f"{x} {x + 2}\n" for x in range(k)]
            outputs = [f"{x * (x + 2) + c}\n" for x in range(k)]
            bad = rng.randint(0, k - 1)
            body = f"a, b = map(int, input().split())\nprint(a * b + {c})"
            if roll < 0.06:
                body = "while True:\n    pass"
            elif roll < 0.20:
                body = f"a, b = map(int, input().split())\nprint(a * b + ({c} if a != {bad} else 1))"
            items.append(({"inputs": inputs, "outputs": outputs}, f"```python\n{body}\n```"))
    return items


# ------------------------------------------------------------------------------------------ ceiling
class _Alarm(BaseException):
    pass


def _on_alarm(*_):
    raise _Alarm()


def _inprocess(item: tuple[dict, str]) -> tuple[float, int]:
    """Unisolated: exec the solution and tests in this process with a per-test SIGALRM timeout."""
    signal.signal(signal.SIGALRM, _on_alarm)
    label, response = item
    problem, code = parse_problem(label), extract_code(response)
    ran = 0
    try:
        compiled = compile(code, "<solution>", "exec")
        if problem.mode == "functional":
            ns: dict = {"__name__": "solution"}
            signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
            exec(compiled, ns)
            signal.setitimer(signal.ITIMER_REAL, 0)
            for i in select_tests(problem):
                ran += 1
                signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
                exec(compile(problem.tests[i], "<test>", "exec"), dict(ns))
                signal.setitimer(signal.ITIMER_REAL, 0)
        else:
            for i in select_tests(problem):
                ran += 1
                out = io.StringIO()
                sys.stdin = io.StringIO(problem.inputs[i])
                signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT)
                with contextlib.redirect_stdout(out):
                    exec(compiled, {"__name__": "__main__"})
                signal.setitimer(signal.ITIMER_REAL, 0)
                if normalize_output(out.getvalue()) != normalize_output(problem.outputs[i]):
                    return 0.0, ran
    except BaseException:  # noqa: BLE001 - any failure is a 0, as in the reward
        signal.setitimer(signal.ITIMER_REAL, 0)
        return 0.0, ran
    finally:
        sys.stdin = sys.__stdin__
    return 1.0, ran


def run_ceiling(items, workers):
    with mp.get_context("fork").Pool(workers) as pool:
        return pool.map(_inprocess, items, chunksize=4)


# ----------------------------------------------------------------------------------------- baseline
def _one_test_argv(tmp: str) -> list[str]:
    argv = bwrap_argv(find_bwrap(), 0, 16)
    cut = argv.index("--")
    return argv[:cut] + ["--ro-bind", tmp, "/job", "--chdir", "/job", "--", sys.executable, "-s", "-B"]


def _baseline_item(item: tuple[dict, str]) -> tuple[float, int]:
    """One fresh bwrap + cold interpreter per test (the common approach): pass = exit 0 / right stdout."""
    label, response = item
    problem, code = parse_problem(label), extract_code(response)
    ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "sol.py").write_text(code)
        base = _one_test_argv(tmp)
        for i in select_tests(problem):
            ran += 1
            if problem.mode == "functional":
                Path(tmp, "t.py").write_text(code + "\n" + problem.tests[i] + "\n")
                argv, stdin = base + ["/job/t.py"], ""
            else:
                argv, stdin = base + ["/job/sol.py"], problem.inputs[i]
            try:
                proc = subprocess.run(
                    argv, input=stdin, capture_output=True, text=True, timeout=TEST_TIMEOUT + 0.5
                )
            except subprocess.TimeoutExpired:
                return 0.0, ran
            if proc.returncode != 0:
                return 0.0, ran
            if problem.mode == "stdio" and normalize_output(proc.stdout) != normalize_output(
                problem.outputs[i]
            ):
                return 0.0, ran
    return 1.0, ran


def run_baseline(items, workers):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(_baseline_item, items))


# --------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batch (about a minute)")
    ap.add_argument("--responses", type=int, default=None)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    check_isolation().require()
    n = args.responses or (60 if args.quick else 300)
    items = make_batch(n)
    cores = os.cpu_count() or 1
    print(f"batch: {n} responses, {cores} cores, {args.workers} workers, per-test timeout {TEST_TIMEOUT}s")

    scorer = CodeScorer(workers=args.workers, limits=Limits(wall_s=60, test_timeout_s=TEST_TIMEOUT))
    scorer.pool  # noqa: B018 - start the warm pool outside the timed region, as in training
    t = time.perf_counter()
    ours = scorer.score_batch(items)
    t_ours = time.perf_counter() - t
    scorer.pool.close()
    tests_ours = sum(r.details.get("tests_run", 0) for r in ours)

    t = time.perf_counter()
    ceiling = run_ceiling(items, args.workers)
    t_ceiling = time.perf_counter() - t

    t = time.perf_counter()
    baseline = run_baseline(items, args.workers)
    t_base = time.perf_counter() - t

    agree = sum(r.score == c[0] for r, c in zip(ours, ceiling, strict=True))
    rows = [
        ("ours (warm pool)", t_ours, tests_ours),
        ("baseline (fresh sandbox per test)", t_base, sum(b[1] for b in baseline)),
        ("ceiling (unisolated in-process)", t_ceiling, sum(c[1] for c in ceiling)),
    ]
    for name, secs, tests in rows:
        print(f"{name:36s} {secs:8.2f} s  {tests:6d} tests  {tests / secs / cores:9.1f} tests/s/core")
    result = {
        "responses": n,
        "pass_rate": sum(r.score for r in ours) / n,
        "reward_agreement_with_ceiling": agree / n,
        "speedup_vs_baseline": round(t_base / t_ours, 2),
        "fraction_of_ceiling": round(t_ceiling / t_ours, 3),
    }
    print(json.dumps(result))
    print(
        f"goal >= 10x baseline: {'MET' if t_base / t_ours >= 10 else 'NOT MET'}; "
        f"goal >= 50% of ceiling: {'MET' if t_ceiling / t_ours >= 0.5 else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
