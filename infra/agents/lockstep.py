"""Lockstep batching for the local ``/generate`` server: one model batch per round of agent requests.

Agent episodes call the model one turn at a time over HTTP, so a server that answers requests one by
one runs the micro model at batch size 1 (prefill of the whole tool-schema prompt, then one token per
forward), which made an embedded General Agent step take minutes. SGLang batches continuously; that is
fast but order-dependent. This batcher is deterministic instead: the rollout runs a fixed number of
*workers* (each plays a fixed list of episodes in turn), and the server runs a batch only when every live
worker is waiting on a request. Which requests meet in a batch then depends only on the episodes' logical
progress, never on thread timing, so a seed still gives the same trajectories
(:func:`infra.embedded.generation.generate_rows` samples each row with its own seeded generator).

Hand-written: it is a few dozen lines around a condition variable, and no library batches this way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infra.embedded.generation import Generation, RowRequest

#: ``run(rows, temperature=, top_p=, stop_token_ids=) -> generations`` (one per row, in order)
BatchBackend = Callable[..., list[Generation]]


@dataclass
class _Pending:
    row: RowRequest
    sampling: tuple[float, float, tuple[int, ...]]
    done: threading.Event = field(default_factory=threading.Event)
    result: Generation | None = None
    error: BaseException | None = None


class LockstepBatcher:
    """Collects one request per live worker, runs them as one batch, hands each its generation."""

    def __init__(self, run: BatchBackend, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"LockstepBatcher needs at least one worker, got {workers}")
        self.run = run
        self.live = workers
        self.batches: list[int] = []  # size of every batch run (for tests and metrics)
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="lockstep-batcher", daemon=True)
        self._thread.start()

    def submit(self, ids: list[int], *, max_new_tokens: int, temperature: float, top_p: float,
               stop_token_ids: list[int], seed: int | None) -> Generation:  # fmt: skip
        """Queue one request and block until its batch ran; re-raise the batch's error."""
        sampling = (temperature, top_p, tuple(stop_token_ids))
        item = _Pending(RowRequest(list(ids), max_new_tokens, seed), sampling)
        with self._cond:
            if self._closed:
                raise RuntimeError("lockstep batcher is closed")
            self._pending.append(item)
            self._cond.notify_all()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result

    def worker_done(self) -> None:
        """A worker has played all its episodes: later batches no longer wait for it."""
        with self._cond:
            self.live -= 1
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the batcher thread (pending requests still run)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._pending and len(self._pending) >= self.live) and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            self._run(batch)

    def _run(self, batch: list[_Pending]) -> None:
        batch.sort(key=lambda p: (p.sampling, p.row.seed if p.row.seed is not None else -1, p.row.ids))
        self.batches.append(len(batch))
        groups: dict[Any, list[_Pending]] = {}
        for item in batch:
            groups.setdefault(item.sampling, []).append(item)
        for (temperature, top_p, stops), items in groups.items():
            try:
                gens = self.run(
                    [p.row for p in items], temperature=temperature, top_p=top_p, stop_token_ids=list(stops)
                )
                for p, g in zip(items, gens, strict=True):
                    p.result = g
            except Exception as exc:  # noqa: BLE001 - handed to every waiting request, which re-raises it
                for p in items:
                    p.error = exc
            for p in items:
                p.done.set()
