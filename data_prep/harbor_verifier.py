"""The verifier script of a generated Harbor task: guards, graded checks and partial credit.

:mod:`data_prep.harbor_generate` (and the tiny terminal family built on it) writes each task's
``tests/test.sh`` with :func:`test_sh`. A check that already passes on the starting files is a guard (SWE's
pass-to-pass: a protected test file, data that must survive); the others are graded (fail-to-pass).
:func:`initial_passes` tells them apart by running the checks on a copy of the starting files.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path


def initial_passes(files: dict[str, str], checks: list[str]) -> list[bool]:
    """Which ``checks`` already pass on the untouched workspace ``files`` (run in a temporary copy).

    These are OUR OWN generated checks (trusted, written by this module), run as plain subprocesses outside
    the project sandbox, like the generator self-check in ``tests/test_harbor_task.py``.
    """
    with tempfile.TemporaryDirectory(prefix="harbor-initial-") as tmp:
        app = Path(tmp)
        for rel, text in files.items():
            (app / rel).parent.mkdir(parents=True, exist_ok=True)
            (app / rel).write_text(text)
        return [
            subprocess.run(["bash", "-c", c], cwd=app, capture_output=True, timeout=30).returncode == 0
            for c in checks
        ]


def test_sh(name: str, checks: list[str], guards: list[bool]) -> str:
    """The verifier: SWE-style scoring of the checks, each a function run in its own subshell.

    A check that already passes on the starting workspace is a guard (pass-to-pass: a protected file, data
    that must survive): if any guard fails the reward is 0. The other checks (fail-to-pass) are graded:
    1 when all pass, else the fraction that pass — FireFlash's partial credit, which binary rewards read as
    a fail. Doing nothing therefore scores exactly 0.
    """
    graded = [i for i, g in enumerate(guards) if not g]
    if not graded:
        raise ValueError(f"{name}: every check passes on the starting workspace; nothing to solve")
    funcs = "".join(f"check_{i}() {{\n{c}\n}}\n" for i, c in enumerate(checks))
    guard_calls = " ".join(f"check_{i}" for i, g in enumerate(guards) if g)
    graded_calls = " ".join(f"check_{i}" for i in graded)
    return f"""#!/bin/bash
# Verifier for {name} (data_prep.harbor_generate): checks the final state of the working directory
# (/app) with coreutils and python3, offline. Guards (checks that pass on the starting files) must all
# still pass, else 0; then 1 when every graded check passes, else the fraction of graded checks that
# pass, written to /logs/verifier/reward.txt (binary rewards read anything below 1 as a fail).
{funcs}mkdir -p /logs/verifier
for c in {guard_calls}; do
  if ! ( "$c" ) >/dev/null 2>&1; then echo 0 > /logs/verifier/reward.txt; exit 0; fi
done
passed=0
for c in {graded_calls}; do
  if ( "$c" ) >/dev/null 2>&1; then passed=$((passed + 1)); fi
done
if [ "$passed" -eq {len(graded)} ]; then
  echo 1 > /logs/verifier/reward.txt
elif [ "$passed" -eq 0 ]; then
  echo 0 > /logs/verifier/reward.txt
else
  awk -v p="$passed" 'BEGIN {{ printf "%.4f\\n", p / {len(graded)} }}' > /logs/verifier/reward.txt
fi
"""
