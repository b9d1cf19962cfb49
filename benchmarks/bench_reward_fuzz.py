"""Reward fuzzing at scale: 10^5 hostile responses per registered reward, throughput and slowest call.

Responses come from ``random_response`` in ``tests/reward_fuzz_inputs.py`` (markup fragments, lone surrogates,
overflowing numbers, and one time in four a run of up to 100K characters of a pathological pattern).
Every result is checked as in ``tests/test_reward_fuzz.py`` (a RewardResult with a finite score in
[0, 1], nothing raised); any violation is printed with the response that caused it and the run exits 1.
The code reward runs on one sandbox worker (aborted results, never raised, when the sandbox is not
available); math-verify calls are bounded by ``RUFUS_MATH_TIMEOUT``.

Run: ``python benchmarks/bench_reward_fuzz.py [--n 100000] [--seed 0] [--rewards math,science]``.
Goal: no violation; the slowest call of every linear-time reward under a second.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from reward_fuzz_inputs import FUZZED_REWARDS, check_result, fuzz_request, random_response  # noqa: E402

import infra.agents.envs.calculator  # noqa: E402,F401 - registers agent_calculator
from infra.sandbox import Limits  # noqa: E402
from rewards import code_reward, get_reward  # noqa: E402


def run_one(name: str, n: int, seed: int) -> tuple[float, float, str, list[str]]:
    """Score ``n`` random responses; return (calls/s, worst seconds, worst response head, violations)."""
    rng = random.Random(f"{seed}:{name}")
    fn = get_reward(name)
    fn(fuzz_request(name, "<think>warm-up</think>\\boxed{28}"))  # imports, worker pools: not timed
    worst, worst_head, problems = 0.0, "", []
    start = time.perf_counter()
    for _ in range(n):
        response = random_response(rng)
        t0 = time.perf_counter()
        try:
            check_result(fn(fuzz_request(name, response)))
        except BaseException as exc:  # noqa: BLE001 - a benchmark reports every way a reward breaks
            if isinstance(exc, KeyboardInterrupt):
                raise
            problems.append(f"{type(exc).__name__}: {str(exc)[:120]} on {response[:80]!r}")
        took = time.perf_counter() - t0
        if took > worst:
            worst, worst_head = took, f"{len(response)} chars, {response[:40]!r}"
    elapsed = time.perf_counter() - start
    return n / elapsed, worst, worst_head, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="responses per reward")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rewards", default=",".join(FUZZED_REWARDS), help="comma-separated reward names")
    args = parser.parse_args()
    code_reward._DEFAULT = code_reward.CodeScorer(workers=1, limits=Limits(wall_s=3, test_timeout_s=1))
    failed = False
    print(f"{'reward':18s} {'calls/s':>10s} {'worst s':>9s}  worst input")
    for name in args.rewards.split(","):
        rate, worst, head, problems = run_one(name, args.n, args.seed)
        print(f"{name:18s} {rate:10.0f} {worst:9.3f}  {head}", flush=True)
        for line in problems[:5]:
            print(f"  VIOLATION {line}")
        if problems:
            print(f"  {len(problems)} violation(s) in {args.n} calls")
            failed = True
    if code_reward._DEFAULT._pool is not None:
        code_reward._DEFAULT._pool.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
