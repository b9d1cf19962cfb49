"""The host side of the sandbox: a pool of warm workers, each handing out one fresh runner per job.

A worker is one long-lived sandbox (see :mod:`infra.sandbox.isolation`) whose zygote has already
imported the usual modules; a job costs one ``fork`` inside it, not an interpreter start. Each worker
runs its jobs under its own uid, so two workers can never see or signal each other's processes. After
every job the worker is swept (all processes of that uid killed, scratch wiped) and the next runner is
forked ahead of time, while the host is busy elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from infra.sandbox import wire
from infra.sandbox.isolation import (
    SCRATCH_IN_SANDBOX,
    SandboxUnavailable,
    bwrap_argv,
    check_isolation,
    find_bwrap,
    unsafe_argv,
)
from infra.sandbox.limits import SANDBOX_ENV, Limits

T = TypeVar("T")
R = TypeVar("R")
UNSAFE_WARNING = (
    "UNSAFE LOCAL MODE: code runs WITHOUT namespaces, without a separate uid and with your files and "
    "network reachable. Use it only for code you wrote yourself, never for model output."
)


class ChannelClosed(Exception):
    """The runner went away (crashed, exited or was killed) before answering."""


class ChannelTimeout(Exception):
    """The runner did not answer before the deadline."""


class Channel:
    """The host end of one runner's socket: request/response frames with a hard deadline."""

    def __init__(self, sock: socket.socket, pid: int, max_bytes: int) -> None:
        self.sock, self.pid, self.max_bytes = sock, pid, max_bytes

    def request(self, obj: dict, deadline: float) -> dict:
        """Send ``obj`` and return the reply; raise ChannelTimeout/ChannelClosed/ProtocolError otherwise."""
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            wire.send_frame(self.sock, obj)
        except TimeoutError:
            raise ChannelTimeout("runner did not read its request in time") from None
        except OSError as exc:
            raise ChannelClosed(f"runner channel closed: {exc}") from None
        data = self._recv_frame(deadline)
        try:
            reply = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise wire.ProtocolError(f"undecodable reply: {exc}") from None
        if not isinstance(reply, dict):
            raise wire.ProtocolError("reply is not an object")
        return reply

    def _recv_frame(self, deadline: float) -> bytes:
        """Read one length-prefixed frame (usually a single recv) before ``deadline``."""
        head = wire.HEADER.size
        buf = bytearray()
        need = head
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise ChannelTimeout("runner did not answer in time")
            try:
                chunk = self.sock.recv(max(need - len(buf), 1 << 16))
            except OSError as exc:
                raise ChannelClosed(f"runner channel failed: {exc}") from None
            if not chunk:
                raise ChannelClosed("runner exited before answering")
            buf += chunk
            if need == head and len(buf) >= head:
                (size,) = wire.HEADER.unpack_from(buf)
                if size > self.max_bytes:
                    raise wire.ProtocolError(
                        f"reply of {size} bytes exceeds the output limit of {self.max_bytes}"
                    )
                need = head + size
        if len(buf) > need:
            raise wire.ProtocolError("runner sent more than one frame")
        return bytes(buf[head:])

    def close(self) -> None:
        """Close the host end."""
        self.sock.close()


class Worker:
    """One sandbox (bwrap + zygote) serving jobs one at a time under its own unprivileged uid."""

    def __init__(self, index: int, limits: Limits, uid: int, unsafe_local: bool) -> None:
        self.index, self.limits, self.uid, self.unsafe_local = index, limits, uid, unsafe_local
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self.spare: Channel | None = None
        self._host_scratch: str | None = None

    def start(self) -> None:
        """Start the sandbox and wait for its zygote's hello; raise SandboxUnavailable on failure."""
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if self.unsafe_local:
            self._host_scratch = tempfile.mkdtemp(prefix="rufus-unsafe-")
            argv, env, scratch = unsafe_argv(child.fileno()), dict(SANDBOX_ENV), self._host_scratch
        else:
            argv = bwrap_argv(find_bwrap() or "bwrap", child.fileno(), self.limits.scratch_mb)
            env, scratch = {"PATH": SANDBOX_ENV["PATH"]}, SCRATCH_IN_SANDBOX
        err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                argv, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env
            )
        except OSError as exc:
            raise SandboxUnavailable(f"sandbox worker {self.index} could not start: {exc}") from exc
        finally:
            child.close()
        self.ctl = host
        try:
            self._control({"op": "hello"}, timeout=60, send=False)
            cfg = self.limits.runner_config(self.uid, not self.unsafe_local, scratch)
            self._control({"op": "config", "cfg": cfg})
        except SandboxUnavailable as exc:
            err.seek(0)
            tail = err.read()[-600:].decode(errors="replace")
            self.close()
            raise SandboxUnavailable(f"{exc}; worker output: {tail.strip() or '(none)'}") from None

    def _control(
        self, req: dict, fds: list[int] | None = None, timeout: float = 30, send: bool = True
    ) -> dict:
        assert self.ctl is not None
        try:
            if send:
                socket.send_fds(self.ctl, [json.dumps(req).encode()], fds or [])
            if not select.select([self.ctl], [], [], timeout)[0]:
                raise SandboxUnavailable(f"sandbox worker {self.index} did not answer {req['op']!r}")
            msg = self.ctl.recv(1 << 20)
        except OSError as exc:
            raise SandboxUnavailable(f"sandbox worker {self.index} control channel failed: {exc}") from None
        if not msg:
            raise SandboxUnavailable(
                f"sandbox worker {self.index} exited (rc={self.proc and self.proc.poll()})"
            )
        reply = json.loads(msg)
        if not reply.get("ok"):
            raise SandboxUnavailable(f"sandbox worker {self.index} refused {req['op']!r}: {reply}")
        return reply

    def spawn(self) -> Channel:
        """Fork a fresh runner in the sandbox and return the channel to it."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            reply = self._control({"op": "spawn"}, fds=[theirs.fileno()])
        finally:
            theirs.close()
        return Channel(mine, int(reply["pid"]), self.limits.max_output_bytes + 4096)

    def take(self) -> Channel:
        """The pre-forked runner if there is one, else a new one."""
        channel, self.spare = self.spare, None
        return channel or self.spawn()

    def recycle(self, channel: Channel) -> None:
        """Kill everything the job left, wipe scratch, pre-fork the next runner."""
        channel.close()
        self._control({"op": "sweep", "pid": channel.pid})
        self.spare = self.spawn()

    def alive(self) -> bool:
        """Whether the worker process still runs."""
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Stop the worker and everything in it."""
        if self.spare is not None:
            self.spare.close()
            self.spare = None
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        if self._host_scratch:
            import shutil

            shutil.rmtree(self._host_scratch, ignore_errors=True)


class WorkerPool:
    """A fixed set of warm workers: :meth:`session` lends one runner per job, :meth:`map` runs many.

    Refuses to start (``SandboxUnavailable``) when :func:`check_isolation` fails, unless
    ``unsafe_local=True``, which warns loudly every time a pool is created.
    """

    def __init__(self, workers: int | None = None, limits: Limits | None = None, unsafe_local: bool = False):
        self.limits = limits or Limits()
        self.unsafe_local = unsafe_local
        self.size = max(1, workers or os.cpu_count() or 1)
        if unsafe_local:
            warnings.warn(UNSAFE_WARNING, RuntimeWarning, stacklevel=2)
            print(f"WARNING: {UNSAFE_WARNING}", file=sys.stderr)
        else:
            check_isolation().require()
        base = 100_000 + secrets.randbelow(1 << 30)  # a uid range no host account uses
        self._workers = [Worker(i, self.limits, base + i, unsafe_local) for i in range(self.size)]
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        try:
            for worker in self._workers:
                worker.start()
                worker.spare = worker.spawn()
                self._idle.put(worker)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def session(self) -> Iterator[Channel]:
        """Lend a fresh runner for one job; afterwards everything it started is killed and wiped."""
        if self._closed:
            raise SandboxUnavailable("the worker pool is closed")
        worker = self._idle.get()
        try:
            if not worker.alive():
                worker.close()
                worker.start()
            channel = worker.take()
        except SandboxUnavailable:
            self._idle.put(worker)
            raise
        try:
            yield channel
        finally:
            try:
                worker.recycle(channel)
            except SandboxUnavailable:
                worker.close()  # restarted on its next use
            self._idle.put(worker)

    def map(self, fn: Callable[[Channel, T], R], items: Iterable[T]) -> list[R]:
        """Run ``fn(channel, item)`` for every item on the pool's workers; results in input order."""

        def one(item: T) -> R:
            with self.session() as channel:
                return fn(channel, item)

        with ThreadPoolExecutor(self.size) as ex:
            return list(ex.map(one, items))

    def close(self) -> None:
        """Stop every worker."""
        self._closed = True
        for worker in self._workers:
            worker.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
