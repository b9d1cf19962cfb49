"""SIGTERM stops ``rufus`` as Ctrl-C does: ``finally`` blocks and ``atexit`` handlers (which close the Harbor
runtimes' /tmp snapshots and the workspace servers) run, one line is printed, the exit status is 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

CHILD = """
import atexit, signal, sys, time
from pathlib import Path
import infra.cli as cli
out = Path(sys.argv[1])
signal.signal(signal.SIGTERM, cli._stop_on_sigterm)
atexit.register(lambda: (out / "atexit").write_text("ran"))
try:
    print("ready", flush=True)
    time.sleep(120)
finally:
    (out / "finally").write_text("ran")
"""


def test_sigterm_runs_cleanup_and_exits_143(tmp_path: Path):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert (tmp_path / "finally").read_text() == "ran"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert err.strip() == "rufus: stopped by SIGTERM"  # one line, no traceback


def test_main_installs_the_handler():
    src = Path(__file__).resolve().parents[1] / "infra" / "cli.py"
    code = "import infra.cli as c, signal, sys; sys.argv = ['rufus', '--help']\n"
    code += "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
    code += "print(signal.getsignal(signal.SIGTERM) is c._stop_on_sigterm)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=src.parents[1], check=True
    )
    assert out.stdout.strip().endswith("True")
