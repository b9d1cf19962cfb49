"""Host side of AWM serving: warm sandboxed server workers per scenario, and the sandboxed verifier.

An AWM scenario's server code and verifiers are generated third-party code, so they run only in the
project sandbox (:mod:`infra.sandbox`: own uid, PID and network namespaces, rlimits) and talk to the
trainer through data-only frames. A :class:`ServerLease` is one sandbox runner holding one scenario's
booted server (:mod:`infra.agents.awm.sandboxed`); an episode takes a lease, which is reset to a fresh
copy of the pristine database, and gives it back afterwards. Booting (importing FastAPI and the app)
happens once per lease, not per episode; a lease is retired after ``max_episodes`` episodes, on any
failure, and when its worker is needed for another scenario.

The reference launcher (and strands-env) instead starts one uvicorn process per episode and reaches it
over MCP on a port: ``benchmarks/bench_awm_env.py`` measures both. Any crash, timeout or protocol error
of the sandbox is an :class:`~infra.agents.contract.EnvironmentFailure` (the episode is ``aborted``);
a verifier that crashes, times out or answers outside ``complete``/``others`` is ``aborted`` too, never 0.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from infra.agents.awm.release import Scenario
from infra.agents.contract import EnvironmentFailure
from infra.sandbox import Limits, WorkerPool, wire
from infra.sandbox.runner import Channel, ChannelClosed, ChannelTimeout
from rewards.contract import RewardResult

SANDBOXED_SOURCE = Path(__file__).with_name("sandboxed.py").read_text(encoding="utf-8")
#: A server runner lives across many episodes: CPU is bounded per lease, memory per process, and the
#: database file by RLIMIT_FSIZE (``max_output_bytes``), which also caps a database snapshot's frame.
SERVER_LIMITS = Limits(
    wall_s=600, cpu_s=1800, memory_mb=2048, max_procs=8, max_open_files=256, max_output_bytes=64 << 20
)
VERIFIER_LIMITS = Limits(
    wall_s=30, memory_mb=1024, max_procs=4, max_open_files=64, max_output_bytes=16 << 20, scratch_mb=256
)


def remote_call(channel: Channel, fn: str, args: list[Any], timeout_s: float) -> Any:
    """Call ``fn(*args)`` of the loaded sandboxed module; raise ``EnvironmentFailure`` on any failure."""
    deadline = time.monotonic() + timeout_s
    try:
        reply = channel.request(
            {
                "op": "call",
                "ref": fn,
                "path": [],
                "args": [wire.encode(a) for a in args],
                "kwargs": {"d": []},
            },
            deadline,
        )
        if not reply.get("ok"):
            raise EnvironmentFailure(f"sandboxed {fn}: {reply.get('exc')}: {reply.get('msg')}")
        return wire.decode(reply.get("value"))
    except ChannelTimeout:
        raise EnvironmentFailure(f"sandboxed {fn}: no answer within {timeout_s:g}s") from None
    except (ChannelClosed, wire.ProtocolError) as exc:
        raise EnvironmentFailure(f"sandboxed {fn}: {exc}") from None


def load_module(channel: Channel, timeout_s: float) -> None:
    """Load :mod:`infra.agents.awm.sandboxed` into a fresh runner."""
    try:
        reply = channel.request({"op": "load", "code": SANDBOXED_SOURCE}, time.monotonic() + timeout_s)
    except (ChannelTimeout, ChannelClosed, wire.ProtocolError) as exc:
        raise EnvironmentFailure(f"sandbox runner did not load the AWM module: {exc}") from None
    if not reply.get("ok"):
        raise EnvironmentFailure(f"sandbox runner refused the AWM module: {reply.get('msg')}")


class ServerLease:
    """One sandbox runner with one scenario's server booted in it; used by one episode at a time."""

    def __init__(self, pool: AwmServerPool, scenario: Scenario) -> None:
        self.pool, self.scenario = pool, scenario
        self._session = pool.workers.session()
        self.channel = self._session.__enter__()
        self.episodes = 0
        self.broken = False
        try:
            load_module(self.channel, pool.boot_timeout_s)
            self.tool_specs: list[dict[str, Any]] = self.remote(
                "boot", scenario.full_code, scenario.database(), timeout_s=pool.boot_timeout_s
            )
        except BaseException:
            self.close()
            raise

    def remote(self, fn: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Call ``fn`` in the runner; a failure marks the lease broken and raises ``EnvironmentFailure``."""
        try:
            return remote_call(self.channel, fn, list(args), timeout_s or self.pool.call_timeout_s)
        except EnvironmentFailure:
            self.broken = True
            raise

    def reset(self) -> None:
        """Give the next episode a fresh copy of the scenario's pristine database."""
        self.remote("reset")
        self.episodes += 1

    def call_tool(self, name: str, arguments_json: str) -> dict[str, Any]:
        """Run one tool call; return ``{status, body}``."""
        return self.remote("call", name, arguments_json)

    def snapshot(self) -> bytes:
        """Return the episode database's bytes."""
        return self.remote("snapshot")

    def close(self) -> None:
        """Give the runner back to its worker (everything it started is killed and wiped)."""
        with contextlib.suppress(Exception):
            self._session.__exit__(None, None, None)


class AwmServerPool:
    """Warm sandboxed server workers: :meth:`acquire` a reset lease for a scenario, :meth:`release` it."""

    def __init__(
        self,
        workers: int = 2,
        *,
        limits: Limits = SERVER_LIMITS,
        unsafe_local: bool = False,
        call_timeout_s: float = 10.0,
        boot_timeout_s: float = 60.0,
        max_episodes: int = 256,
    ) -> None:
        self.size = workers
        self.workers = WorkerPool(workers, limits, unsafe_local=unsafe_local)
        self.call_timeout_s, self.boot_timeout_s, self.max_episodes = (
            call_timeout_s,
            boot_timeout_s,
            max_episodes,
        )
        self._idle: list[ServerLease] = []  # most recently used last
        self._leases: set[ServerLease] = set()  # every open lease, idle or in use
        self._open = 0
        self._cond = threading.Condition()

    def acquire(self, scenario: Scenario) -> ServerLease:
        """Return a lease of ``scenario``'s server holding a fresh database copy (boots one if needed)."""
        while True:
            with self._cond:
                lease = next((x for x in reversed(self._idle) if x.scenario.name == scenario.name), None)
                evict = None
                if lease is not None:
                    self._idle.remove(lease)
                elif self._open >= self.size and self._idle:
                    evict = self._idle.pop(0)  # least recently used
                elif self._open >= self.size:
                    self._cond.wait()
                    continue
                else:
                    self._open += 1
            if evict is not None:
                evict.close()  # its slot is reused by the lease booted next
                with self._cond:
                    self._leases.discard(evict)
            if lease is None:
                try:
                    lease = ServerLease(self, scenario)
                except BaseException:
                    self._forget()
                    raise
                with self._cond:
                    self._leases.add(lease)
            try:
                lease.reset()
            except EnvironmentFailure:
                self.release(lease)
                raise
            return lease

    def release(self, lease: ServerLease) -> None:
        """Take a lease back; a broken or worn-out one is closed, the others stay warm."""
        if lease.broken or lease.episodes >= self.max_episodes:
            lease.close()
            with self._cond:
                self._leases.discard(lease)
            self._forget()
            return
        with self._cond:
            self._idle.append(lease)
            self._cond.notify()

    def _forget(self) -> None:
        with self._cond:
            self._open -= 1
            self._cond.notify()

    def close(self) -> None:
        """Stop every worker."""
        with self._cond:
            leases, self._leases, self._idle = list(self._leases), set(), []
        for lease in leases:
            lease.close()
        self.workers.close()


class VerifierRunner:
    """Runs task verifiers in fresh sandbox runners on read-only database copies, with a timeout."""

    def __init__(self, workers: int = 1, *, unsafe_local: bool = False, timeout_s: float = 10.0) -> None:
        self.workers = WorkerPool(workers, VERIFIER_LIMITS, unsafe_local=unsafe_local)
        self.timeout_s = timeout_s

    def verify(self, code: str, initial: bytes, final: bytes, final_answer: str) -> RewardResult:
        """Return 1.0 for ``complete``, 0.0 for ``others``; ``aborted`` when the verifier itself fails."""
        try:
            with self.workers.session() as channel:
                load_module(channel, self.timeout_s)
                out = remote_call(channel, "verify", [code, initial, final, final_answer], self.timeout_s)
        except EnvironmentFailure as exc:
            return RewardResult(
                score=0.0, aborted=True, failure="verifier_error", details={"error": str(exc)}
            )
        result = out.get("result") if isinstance(out, dict) else None
        if result not in ("complete", "others"):
            return RewardResult(
                score=0.0, aborted=True, failure="verifier_result", details={"result": str(result)[:200]}
            )
        ok = result == "complete"
        return RewardResult(
            score=float(ok),
            parsed=result,
            failure=None if ok else "incomplete",
            details={"raw": out.get("raw")},
        )

    def close(self) -> None:
        """Stop the workers."""
        self.workers.close()
