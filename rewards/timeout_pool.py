"""A small pool of worker processes where every call has a hard deadline.

Why hand-written: math-verify enforces its own timeouts with ``signal.alarm``, which only works in the
main thread, and rewards run in trainer threads. ``concurrent.futures`` cannot stop a call that has
started, and ``multiprocessing.Pool`` leaves an overrunning worker occupying its slot; here a worker that
misses its deadline is killed and replaced, so one pathological answer costs one timeout, not a stuck
reward loop. Calls name their function as ``"module:function"`` so workers import only what they run.

Usage::

    pool = TimeoutPool(workers=2, preload=("rewards.math_answers",))
    value = pool.call("rewards.math_answers:verify_answer", ("1/2", "0.5"), timeout=5.0)
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import queue
import threading
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any


class CallTimeout(TimeoutError):
    """The call did not finish before its deadline; the worker running it was killed."""


class WorkerCrashed(RuntimeError):
    """The worker process died (or failed to start) before answering."""


def _resolve(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _worker_main(conn: Connection, preload: Sequence[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        target, args = job
        try:
            conn.send(("ok", _resolve(target)(*args)))
        except Exception as exc:  # noqa: BLE001 - the error is sent back and re-raised on the host
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))


class _Worker:
    def __init__(self, ctx: Any, preload: Sequence[str]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, tuple(preload)), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class TimeoutPool:
    """Run ``module:function`` calls in worker processes with a per-call deadline (thread-safe)."""

    def __init__(self, workers: int = 2, preload: Sequence[str] = (), start_timeout: float = 60.0) -> None:
        if workers < 1:
            raise ValueError(f"TimeoutPool needs at least one worker, got {workers}")
        self._ctx = mp.get_context("spawn")  # fork would copy trainer threads and torch state
        self._preload = tuple(preload)
        self._start_timeout = start_timeout
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._all: list[_Worker] = []
        self._closed = False
        for _ in range(workers):
            self._idle.put(self._spawn())

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self._preload)
        with self._lock:
            self._all.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def call(self, target: str, args: tuple = (), timeout: float = 10.0) -> Any:
        """Return ``target(*args)`` computed in a worker; raise :class:`CallTimeout` past ``timeout`` s.

        An exception inside the call is re-raised here as ``RuntimeError`` carrying the worker's
        traceback; a dead worker raises :class:`WorkerCrashed`. Either way the pool stays usable.
        """
        if self._closed:
            raise RuntimeError("TimeoutPool is closed")
        worker = self._idle.get()
        try:
            if not worker.ready:
                if not worker.conn.poll(self._start_timeout):
                    raise WorkerCrashed(f"worker did not start within {self._start_timeout:.0f} s")
                worker.conn.recv()
                worker.ready = True
            worker.conn.send((target, args))
            if not worker.conn.poll(timeout):
                raise CallTimeout(f"{target} exceeded {timeout:g} s")
            status, value = worker.conn.recv()
        except (CallTimeout, WorkerCrashed):
            self._retire(worker)
            self._idle.put(self._spawn())
            raise
        except (EOFError, OSError) as exc:
            self._retire(worker)
            self._idle.put(self._spawn())
            raise WorkerCrashed(f"worker died while running {target}: {exc}") from None
        self._idle.put(worker)
        if status == "error":
            raise RuntimeError(f"{target} failed in worker: {value}")
        return value

    def close(self) -> None:
        """Stop every worker."""
        self._closed = True
        with self._lock:
            workers, self._all = list(self._all), []
        for worker in workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
            worker.kill()

    def __enter__(self) -> TimeoutPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
