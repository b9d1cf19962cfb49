"""Agreement of the IF reward's checkers with the reference IFEval checkers (lm-eval 0.4.13), per id.

Scores the compliant, violating and borderline cases of ``tests/if_agreement_cases.py`` with our pool
(:mod:`rewards.if_constraints`) and with the reference's strict rule, and prints per instruction id the
agreement rate, the disagreements explained by a documented deliberate difference and any undocumented
ones (CI's ``tests/test_if_agreement.py`` requires none)::

    python benchmarks/bench_if_agreement.py [--seed 0] [--show 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from if_agreement_cases import agreement_cases, compare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Print the per-id agreement table; exit 1 when an undocumented disagreement exists."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    parser.add_argument("--show", type=int, default=3, help="undocumented disagreements to print per id")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    records = compare(agreement_cases(args.seed))
    by_id: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_id[rec["id"]].append(rec)
    print(f"{'instruction id':48s} {'cases':>5s} {'agree':>7s} {'documented':>10s} {'undocumented':>12s}")
    undocumented_total = 0
    for cid in sorted(by_id):
        recs = by_id[cid]
        agree = sum(r["ours"] == r["ref"] for r in recs)
        documented = sum(r["ours"] != r["ref"] and r["note"] is not None for r in recs)
        undocumented = [r for r in recs if r["ours"] != r["ref"] and r["note"] is None]
        undocumented_total += len(undocumented)
        rate = 100 * agree / len(recs)
        print(f"{cid:48s} {len(recs):5d} {rate:6.1f}% {documented:10d} {len(undocumented):12d}")
        for r in undocumented[: args.show]:
            print(f"    ours={r['ours']} ref={r['ref']} kwargs={r['kwargs']} response={r['response'][:80]!r}")
    agree_all = sum(r["ours"] == r["ref"] for r in records)
    print(
        f"\n{len(records)} cases, agreement {100 * agree_all / len(records):.1f}%, "
        f"{undocumented_total} undocumented disagreements, {time.perf_counter() - start:.1f} s"
    )
    return 1 if undocumented_total else 0


if __name__ == "__main__":
    raise SystemExit(main())
