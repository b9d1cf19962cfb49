"""Cap glibc's malloc arenas for the ``rufus`` process (what ``MALLOC_ARENA_MAX=2`` does, set from inside).

glibc gives each new thread its own malloc arena, up to eight per core, and an arena keeps the memory its
thread freed. An embedded agent stage runs 16 environment threads, the rollout server's threads and the
batcher, all allocating: stage 08 on SmolLM2-135M held 10.8 GB resident through a rollout and was killed at
23.4 GB in an update on this 24 GB machine; rerun with ``MALLOC_ARENA_MAX=2`` it held 5.9 GB and peaked at
13.7 GB (stages/08_knowledge_work_rl/README.md). glibc reads that variable once, when malloc starts, so the
CLI cannot set it for itself; ``mallopt(M_ARENA_MAX, n)`` through ctypes does the same for arenas created
afterwards. No Python library exposes ``mallopt``, hence this small module.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's <malloc.h>
DEFAULT_ARENAS = 2
ENV = "MALLOC_ARENA_MAX"


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """Cap this process's malloc arenas at ``arenas``; return whether the cap was set here.

    A ``MALLOC_ARENA_MAX`` already in the environment wins (glibc applied it at start-up) and nothing is
    changed. Elsewhere the variable is exported too, so child processes get the same cap. On a C library
    without ``mallopt`` (musl, macOS, Windows) this does nothing and returns False. Call it before the
    process starts its threads: arenas that already exist stay.
    """
    if ENV in os.environ:
        return False
    mallopt = _mallopt()
    if mallopt is None or mallopt(M_ARENA_MAX, int(arenas)) != 1:
        return False
    os.environ[ENV] = str(int(arenas))
    return True


def _mallopt() -> ctypes._CFuncPtr | None:
    """Return glibc's ``mallopt``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        fn = libc.mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn
