"""Harbor local runtime benchmark: session start and command round-trip vs a cold sandbox per command.

Builds one task workspace (a small source tree plus a data file), then in one run measures:

* **start**: :meth:`LocalRuntime.start` to a session ready for its first command, with the runtime's spare
  sandbox already booted (what a trajectory waits for when trajectories follow each other with model time
  in between), and **boot**: the same with no spare ready (a sandbox booted and the snapshot copied);
* **command**: one ``execute`` round-trip (``cat``, ``ls -la``, ``grep -rc``) in a live session;
* **cold baseline** (no Docker engine here): per command, copy the workspace to a fresh folder and start
  a fresh bubblewrap sandbox (the project's mount plan, the copy bound at ``/app``) running ``bash -c``
  as root without rlimits; and **cold, same guarantees**: a fresh :class:`~infra.sandbox.Sandbox` (own uid,
  rlimits, kill sweep) per command, the workspace passed in as its files.

Prints medians in ms and the ratios (goal: start <= 50 ms, >= 20x the cold baseline)::

    python benchmarks/bench_harbor_runtime.py [--trajectories 10] [--files 200] [--file-kb 8]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.agents.harbor.runtime import LocalRuntime  # noqa: E402
from infra.sandbox import Limits, Sandbox, check_isolation  # noqa: E402
from infra.sandbox.isolation import bwrap_argv, find_bwrap  # noqa: E402

COMMANDS = ("cat README.md", "ls -la src/pkg0", "grep -rc def src | head -3")


def make_task(root: Path, files: int, file_kb: int) -> tuple[Path, Path]:
    """Write a workspace of ``files`` source files of ``file_kb`` KiB and a 1 MiB data file; return dirs."""
    ws, tests = root / "workspace", root / "tests"
    (ws / "data").mkdir(parents=True)
    (ws / "README.md").write_text("# bench task\nFix the code in src/.\n")
    (ws / "data" / "table.csv").write_bytes(b"a,b,c\n" * ((1 << 20) // 6))
    line = "def f(x):\n    return x + 1\n"
    for i in range(files):
        path = ws / "src" / f"pkg{i // 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(line * (file_kb * 1024 // len(line)))
    tests.mkdir()
    (tests / "test.sh").write_text("test -f /app/README.md && echo 1 > /logs/verifier/reward.txt\n")
    return ws, tests


def cold_command(ws: Path, command: str) -> float:
    """Seconds for one command with a fresh workspace copy and a fresh bubblewrap sandbox."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        copy = Path(tmp) / "app"
        shutil.copytree(ws, copy, symlinks=True)
        argv = bwrap_argv(find_bwrap() or "bwrap", 0, 8)
        argv = argv[: argv.index("--")] + ["--bind", str(copy), "/app", "--chdir", "/app"]
        proc = subprocess.run([*argv, "--", "/bin/bash", "-c", command], capture_output=True)
        if proc.returncode != 0:
            raise RuntimeError(f"cold baseline failed on {command!r}: {proc.stderr[-300:]!r}")
    return time.perf_counter() - start


def cold_isolated(ws: Path, command: str) -> float:
    """Seconds for one command in a fresh project sandbox holding a copy of the workspace."""
    start = time.perf_counter()
    files = {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    with Sandbox(Limits(wall_s=30, scratch_mb=64)) as sb:
        res = sb.run_command(["/bin/bash", "-c", command], files=files)
    if res.exit_code != 0:
        raise RuntimeError(f"cold sandbox failed on {command!r}: {res}")
    return time.perf_counter() - start


def ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=10)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--file-kb", type=int, default=8)
    args = ap.parse_args()
    check_isolation().require()
    with tempfile.TemporaryDirectory(prefix="bench-harbor-") as tmp:
        ws, tests = make_task(Path(tmp), args.files, args.file_kb)
        size = sum(p.stat().st_size for p in ws.rglob("*") if p.is_file())
        print(f"workspace: {args.files + 2} files, {size / 2**20:.1f} MiB; {args.trajectories} trajectories")
        starts, boots, commands, cold, cold_same, rewards = [], [], [], [], [], []
        with LocalRuntime(ws, tests, spares=1) as rt:
            for _ in range(args.trajectories):
                rt.wait_ready()  # the spare is booted (model time passes between trajectories)
                t = time.perf_counter()
                session = rt.start()
                first = session.execute(COMMANDS[0])  # ready: the first command answers
                starts.append(time.perf_counter() - t - first.duration_s)
                assert first.exit_code == 0 and "bench task" in first.stdout, first
                for command in COMMANDS * 3:
                    res = session.execute(command)
                    assert res.exit_code == 0, (command, res)
                    commands.append(res.duration_s)
                rewards.append(session.verify().score)
                session.close()
        with LocalRuntime(ws, tests, spares=0) as rt:  # no spare: every start boots and copies
            for _ in range(max(3, args.trajectories // 2)):
                t = time.perf_counter()
                with rt.start() as session:
                    session.execute("true")
                boots.append(time.perf_counter() - t)
        for i in range(args.trajectories):
            cold.append(cold_command(ws, COMMANDS[i % len(COMMANDS)]))
            cold_same.append(cold_isolated(ws, COMMANDS[i % len(COMMANDS)]))
    assert rewards == [1.0] * len(rewards), rewards
    start_ms, boot_ms, cmd_ms, cold_ms, same_ms = ms(starts), ms(boots), ms(commands), ms(cold), ms(cold_same)
    print(f"session start (spare booted, to ready): {start_ms:8.2f} ms   goal <= 50 ms")
    print(f"session boot (no spare: sandbox + copy): {boot_ms:8.2f} ms")
    print(f"command round-trip (live session):      {cmd_ms:8.2f} ms")
    print(f"cold baseline (copy + bwrap per command):{cold_ms:8.2f} ms")
    print(f"cold, same guarantees (Sandbox per cmd): {same_ms:8.2f} ms")
    print(f"ratio cold / start:   {cold_ms / start_ms:7.1f}x   goal >= 20x")
    print(f"ratio cold / command: {cold_ms / cmd_ms:7.1f}x   goal >= 20x")
    print(f"ratio cold / boot:    {cold_ms / boot_ms:7.1f}x   (a start with no spare ready)")
    print(f"ratio cold-same / command: {same_ms / cmd_ms:7.1f}x   (like-for-like isolation)")


if __name__ == "__main__":
    main()
