"""Ordered map over a process pool whose workers share one read-only object (a decontamination index).

Hand-written because ``multiprocessing.Pool.imap`` draws its whole task iterable without bound and would
pickle a shared argument with every task; here forked children inherit the shared object once (its pages
kept shared by freezing the collector), at most ``2 * workers`` tasks are in flight, and results come back
in task order. Moved out of ``data_prep.decontaminate``, which used it first.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

_S = TypeVar("_S")
_T = TypeVar("_T")
_R = TypeVar("_R")

_WORKER_SHARED: dict[str, object] = {}


def _init_worker(shared: _S) -> None:
    _WORKER_SHARED["shared"] = shared


def _apply(fn: Callable[[_S, _T], _R], task: _T) -> _R:
    return fn(_WORKER_SHARED["shared"], task)


def map_ordered(
    shared: _S, fn: Callable[[_S, _T], _R], tasks: Iterable[_T], workers: int = 1
) -> Iterator[_R]:
    """Yield ``fn(shared, task)`` for each task, in order; ``workers > 1`` runs them in a process pool.

    ``fn`` must be a module-level function (workers get it by name). Tasks are drawn lazily: at most
    ``2 * workers`` are in flight, so memory stays bounded on a corpus of any size.
    """
    if workers <= 1:
        for task in tasks:
            yield fn(shared, task)
        return
    if "fork" in mp.get_all_start_methods():  # children inherit the shared object: nothing to pickle
        _WORKER_SHARED["shared"] = shared
        gc.freeze()  # the children's collector then leaves its pages shared, not copied
        try:
            pool_cm = mp.get_context("fork").Pool(workers)
        finally:
            gc.unfreeze()
    else:
        pool_cm = mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(shared,))
    with pool_cm as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append(pool.apply_async(_apply, (fn, task)))
            if len(pending) > 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
