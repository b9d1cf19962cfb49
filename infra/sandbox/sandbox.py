"""``Sandbox``: run an untrusted Python snippet or command, get its output (tools, checkers, agents)."""

from __future__ import annotations

import base64
import time

from infra.sandbox.judge import JudgeReport, judge_functional, judge_stdio
from infra.sandbox.limits import ExecResult, Limits
from infra.sandbox.runner import ChannelClosed, ChannelTimeout, WorkerPool
from infra.sandbox.wire import ProtocolError


class Sandbox:
    """A small pool of warm sandbox workers with a synchronous API; safe to share between threads.

    ``Sandbox()`` refuses to start (``SandboxUnavailable``) when isolation cannot be established;
    ``unsafe_local=True`` runs without isolation for trusted code and says so loudly.
    """

    def __init__(self, limits: Limits | None = None, workers: int = 1, unsafe_local: bool = False) -> None:
        self.limits = limits or Limits()
        self.pool = WorkerPool(workers, self.limits, unsafe_local=unsafe_local)

    def run_python(self, code: str, stdin: str = "", timeout_s: float | None = None) -> ExecResult:
        """Run ``code`` as ``__main__`` with ``stdin``; return its output, exit code and why it stopped."""
        return self._run({"op": "script", "code": code}, {"stdin": stdin}, timeout_s)

    def run_command(
        self,
        argv: list[str],
        files: dict[str, bytes] | None = None,
        stdin: str = "",
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run ``argv`` in a fresh scratch directory holding ``files`` (relative paths); return its output."""
        if not argv:
            raise ValueError("run_command needs a non-empty argv")
        for name in files or {}:
            if name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"file name {name!r} must be a relative path inside the scratch directory")
        enc = {k: base64.b64encode(v).decode() for k, v in (files or {}).items()}
        return self._run(None, {"stdin": stdin, "argv": list(argv), "files": enc}, timeout_s)

    def _run(self, prepare: dict | None, run: dict, timeout_s: float | None) -> ExecResult:
        timeout = min(timeout_s or self.limits.wall_s, self.limits.wall_s)
        start = time.monotonic()
        deadline = start + timeout + 2.0
        with self.pool.session() as channel:
            try:
                if prepare is not None:
                    reply = channel.request(prepare, deadline)
                    if not reply.get("ok"):
                        msg = f"{reply.get('exc')}: {reply.get('msg')}\n"
                        return ExecResult(stderr=msg, exit_code=1, duration_s=time.monotonic() - start)
                res = channel.request({"op": "run", "timeout": timeout, **run}, deadline)
            except ChannelTimeout:
                return ExecResult(
                    timed_out=True, killed_reason="wall_time", duration_s=time.monotonic() - start
                )
            except ChannelClosed as exc:
                return ExecResult(killed_reason=f"crashed: {exc}", duration_s=time.monotonic() - start)
            except ProtocolError as exc:
                return ExecResult(killed_reason=f"output_limit: {exc}", duration_s=time.monotonic() - start)
        if not res.get("ok"):
            reason = f"sandbox error: {res.get('exc')}: {res.get('msg')}"
            return ExecResult(killed_reason=reason, duration_s=time.monotonic() - start)
        exit_code = res.get("exit")
        reason = "wall_time" if res.get("timed_out") else None
        if reason is None and isinstance(exit_code, int) and exit_code < 0:
            reason = f"signal {-exit_code}"
        return ExecResult(
            stdout=res.get("stdout", ""),
            stderr=res.get("stderr", ""),
            exit_code=exit_code,
            timed_out=bool(res.get("timed_out")),
            killed_reason=reason,
            duration_s=time.monotonic() - start,
        )

    def judge_functional(self, code: str, tests: list, fn_name: str | None = None) -> JudgeReport:
        """Run compiled assert tests (see :func:`infra.sandbox.judge.compile_tests`) against ``code``."""
        with self.pool.session() as channel:
            deadline = time.monotonic() + self.limits.wall_s
            return judge_functional(channel, code, tests, fn_name, self.limits.test_timeout_s, deadline)

    def judge_stdio(self, code: str, inputs: list[str], outputs: list[str]) -> JudgeReport:
        """Run ``code`` once per input and compare with the expected outputs."""
        with self.pool.session() as channel:
            deadline = time.monotonic() + self.limits.wall_s
            return judge_stdio(channel, code, inputs, outputs, self.limits.test_timeout_s, deadline)

    def close(self) -> None:
        """Stop the workers."""
        self.pool.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
