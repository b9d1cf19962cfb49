"""The ``rufus`` CLI caps glibc's malloc arenas, as ``MALLOC_ARENA_MAX=2`` would (infra/malloc_arenas.py).

Each probe runs in a fresh interpreter, starts eight threads that each call ``malloc`` while all are alive,
then counts the arenas glibc reports in ``malloc_stats``: one per thread up to glibc's own limit without the
cap, two with it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")

_PROBE = textwrap.dedent(
    """
    import ctypes, os, sys, threading
    mode = sys.argv[1]
    if mode == "cli":
        from infra.cli import main
        sys.argv = ["rufus", "--help"]
        try:
            main()
        except SystemExit:
            pass
    elif mode == "direct":
        from infra.malloc_arenas import limit_malloc_arenas
        print("set=%s" % limit_malloc_arenas(), file=sys.stderr)
    print("env=%s" % os.environ.get("MALLOC_ARENA_MAX"), file=sys.stderr)
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    together = threading.Barrier(8)
    def work():
        libc.malloc(4096)
        together.wait()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc.malloc_stats()
    """
)


def _probe(mode: str, env_value: str | None = None) -> tuple[int, str]:
    """Run the probe; return (arenas glibc reports, the probe's stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if env_value is not None:
        env["MALLOC_ARENA_MAX"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    arenas = sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))
    return arenas, done.stderr


def test_without_the_cap_each_thread_gets_its_own_arena() -> None:
    arenas, _ = _probe("none")
    assert arenas > 2  # the baseline the cap is measured against


def test_cli_entry_point_caps_arenas_and_exports_the_variable() -> None:
    arenas, err = _probe("cli")
    assert arenas == 2
    assert "env=2" in err  # child processes inherit the cap


def test_an_explicit_malloc_arena_max_wins() -> None:
    arenas, err = _probe("direct", env_value="3")
    assert "set=False" in err and "env=3" in err
    assert arenas == 3
