"""The local runtime of Harbor terminal tasks: one fresh sandbox per trajectory, ``execute_command``, test.sh.

Use::

    rt = LocalRuntime(workspace_src=task_dir / "environment" / "files", tests_dir=task_dir / "tests")
    session = rt.start()                       # a fresh copy of the task's files in /app, ready
    session.execute("ls -la")                  # CommandResult(stdout, stderr, exit_code, timed_out, …)
    tool = execute_command_tool(session, budget_tokens=512)   # the one Strands tool (.command_tool)
    reward = session.verify()                  # rewards.contract.RewardResult: 1.0 iff reward >= 1
    session.close(); rt.close()

Built on the project sandbox (:mod:`infra.sandbox`), not a second one: each trajectory is one bubblewrap
sandbox with :func:`~infra.sandbox.isolation.bwrap_argv`'s mount plan and namespaces (no network, no
host home, working tree or ``/tmp``), the harness's rlimits and privilege drop (address space, CPU,
process count under a fresh unprivileged uid, open files, file size, ``no_new_privs``), plus:

* ``/app`` (the task's files, cwd), ``/tmp`` (``HOME`` is ``/tmp/home``) and ``/dev/shm``: size-capped
  tmpfs, the only places the agent can write; ``/usr`` and the rest of the root are read-only to it;
* ``/logs``: root-owned until verification, which makes ``/logs/verifier`` writable;
* the tests at a root-only ``/.rufus-private/tests``, copied to ``/tests`` only by :meth:`Session.verify`;
* with ``outputs_mb`` > 0 (the FireFlash harness options of :mod:`.command_tool`, off by default):
  ``/tmp/rufus_outputs``, a root-owned tmpfs the agent can read but not write, where long outputs are
  saved and background commands write (:meth:`Session.execute`'s ``save_over`` and ``background``).

The program inside is :mod:`infra.agents.harbor.sandboxed_shell`. The task's files are copied once per
task into a snapshot folder (:class:`LocalRuntime`); every sandbox copies that snapshot into its own
``/app`` when it boots, and the runtime keeps ``spares`` sandboxes booted ahead, so :meth:`start` hands
out a ready one (booting a sandbox costs an interpreter start; handing one out costs nothing).

Reward (Harbor's verifier): ``reward.json`` first (a number or ``{"reward": x}``), else ``reward.txt``;
binary, 1.0 iff the reward is >= 1, or with ``partial_credit`` the reward clamped to [0, 1] (FireFlash:
1.0 if solved, else the fraction of checks passed). A sandbox that fails, a verifier that times out and a
missing, empty or unparsable reward file are ``aborted`` results, never a 0. Not guaranteed: see
:mod:`infra.sandbox` (no memory cgroup, no seccomp); the agent can leave files in ``/app`` that the test
script then runs, as it could in Harbor's own containers.
"""

from __future__ import annotations

import collections
import json
import math
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor import sandboxed_shell as inside
from infra.agents.harbor.command_tool import execute_command_tool as execute_command_tool  # re-exported
from infra.sandbox import Limits, check_isolation
from infra.sandbox.isolation import bwrap_argv, find_bwrap
from infra.sandbox.limits import SANDBOX_ENV
from infra.sandbox.runner import Channel, ChannelClosed, ChannelTimeout
from infra.sandbox.wire import ProtocolError
from rewards.contract import RewardResult

#: Per-process bounds of a terminal task: ``max_output_bytes`` is the largest file a command may write.
HARBOR_LIMITS = Limits(
    wall_s=600, memory_mb=4096, max_procs=128, max_open_files=1024, max_output_bytes=256 << 20, scratch_mb=8
)
PROGRAM_IN_SANDBOX = "/opt/rufus-harbor/sandboxed_shell.py"


@dataclass
class CommandResult:
    """What one command printed (each stream cut to the session's byte budget) and how it ended.

    ``saved``: sandbox paths of the full ``stdout``/``stderr`` (and a background command's ``exit`` file);
    ``background_pid``: set when the command timed out and was left running.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    truncated: bool = False
    duration_s: float = 0.0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    saved: dict[str, str] = field(default_factory=dict)
    background_pid: int | None = None


def _snapshot(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` (links kept as links), readable by any uid (the job uid copies it)."""
    shutil.copytree(src, dest, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))


class _Box:
    """One booted sandbox holding a fresh ``/app``; the host end of its server's socket."""

    def __init__(self, rt: LocalRuntime) -> None:
        self.rt = rt
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.errlog = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen(
                rt.argv(child.fileno()), pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                stdout=self.errlog, stderr=self.errlog, env={"PATH": SANDBOX_ENV["PATH"]},
            )  # fmt: skip
        except OSError as exc:
            self.close()
            raise EnvironmentFailure(f"harbor sandbox could not start: {exc}") from None
        finally:
            child.close()
        self.channel = Channel(host, self.proc.pid, 8 * rt.output_bytes + (1 << 16))
        try:
            self.request({"op": "hello"}, rt.boot_timeout_s)
            done = self.request({"op": "prepare", "max_bytes": 4096}, rt.boot_timeout_s)
            if done["exit"] != 0:
                raise EnvironmentFailure(
                    f"copying the task's files into /app failed: {done['stderr'][-300:]}"
                )
        except BaseException:
            self.close()
            raise

    def request(self, req: dict, timeout_s: float) -> dict:
        """Send ``req``; return the server's reply or raise ``EnvironmentFailure`` (dead, late, refused)."""
        try:
            reply = self.channel.request(req, time.monotonic() + timeout_s)
        except ChannelTimeout:
            raise EnvironmentFailure(
                f"harbor sandbox did not answer {req['op']!r} within {timeout_s:g}s"
            ) from None
        except (ChannelClosed, ProtocolError, OSError) as exc:
            raise EnvironmentFailure(f"harbor sandbox failed on {req['op']!r}: {exc}{self._tail()}") from None
        if not reply.get("ok"):
            raise EnvironmentFailure(f"harbor sandbox refused {req['op']!r}: {reply.get('msg')}")
        return reply

    def _tail(self) -> str:
        try:
            self.errlog.seek(0)
            tail = self.errlog.read()[-500:].decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return f"; sandbox stderr: {tail}" if tail else ""

    def close(self) -> None:
        """Kill the sandbox (its init, so its whole PID namespace) and release the socket."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        if hasattr(self, "channel"):
            self.channel.close()
        self.errlog.close()


class Session:
    """One trajectory's sandbox: run commands in ``/app``, then verify once; safe to call from threads."""

    def __init__(self, rt: LocalRuntime, box: _Box) -> None:
        self.rt, self._box = rt, box
        self._lock = threading.Lock()
        self.verified = False
        self.saved_commands = 0  # commands run with save_over or background: they name cmd_N files

    def execute(
        self,
        command: str,
        timeout_s: float | None = None,
        *,
        save_over: int | None = None,
        background: bool = False,
    ) -> CommandResult:
        """Run ``command`` with ``bash -c`` in ``/app``; raise ``EnvironmentFailure`` if the sandbox fails.

        ``save_over``: a stream longer than that many bytes (or than the byte budget) is also saved whole
        to ``/tmp/rufus_outputs/cmd_N.out`` / ``.err``; ``background``: on timeout the command is left
        running (``background_pid``), writing there. Both need a runtime with ``outputs_mb`` > 0.
        """
        timeout = min(timeout_s or self.rt.command_timeout_s, self.rt.limits.wall_s)
        req: dict[str, Any] = {"op": "exec", "cmd": command, "timeout": timeout}
        req["max_bytes"] = self.rt.output_bytes
        harness = save_over is not None or background
        if harness and self.rt.outputs_mb <= 0:
            raise ValueError("save_over/background need a runtime with an outputs folder (outputs_mb > 0)")
        start = time.monotonic()
        with self._lock:
            if self._box is None or self.verified:
                raise EnvironmentFailure("execute on a closed or already verified harbor session")
            if harness:
                self.saved_commands += 1
                over = None if save_over is None else max(min(int(save_over), self.rt.output_bytes), 0)
                req.update(save_over=over, background=background, name=f"cmd_{self.saved_commands}")
            res = self._box.request(req, timeout + 10)
        cut = max(res["stdout_bytes"], res["stderr_bytes"]) > self.rt.output_bytes
        return CommandResult(
            res["stdout"], res["stderr"], res["exit"], bool(res["timed_out"]), cut, time.monotonic() - start,
            res["stdout_bytes"], res["stderr_bytes"], dict(res.get("saved") or {}), res.get("background_pid"),
        )  # fmt: skip

    def verify(self, timeout_s: float | None = None, partial_credit: bool = False) -> RewardResult:
        """Run the task's tests against the final state; 1.0 iff reward >= 1 (``partial_credit``: the
        reward clamped to [0, 1]), ``aborted`` on infra failure."""
        timeout = min(timeout_s or self.rt.verify_timeout_s, self.rt.limits.wall_s)
        req = {"op": "verify", "script": self.rt.test_script, "timeout": timeout, "max_bytes": 4096}
        with self._lock:
            if self._box is None or self.verified:
                return _aborted("sandbox", "the session is closed or was already verified")
            self.verified = True
            try:
                res = self._box.request(req, timeout + 30)
            except EnvironmentFailure as exc:
                return _aborted("sandbox", str(exc))
        details = {
            "test_exit_code": res["exit"],
            "test_stdout": res["stdout"][-2000:],
            "test_stderr": res["stderr"][-2000:],
        }
        if res["timed_out"]:
            return _aborted("verifier_timeout", f"test script ran past {timeout:g}s", details)
        return reward_from_files(res["rewards"], details, partial_credit)

    def close(self) -> None:
        """Destroy the sandbox and everything in it."""
        with self._lock:
            box, self._box = self._box, None
        if box is not None:
            box.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _aborted(kind: str, why: str, details: dict | None = None) -> RewardResult:
    return RewardResult(score=0.0, failure=f"{kind}: {why}", aborted=True, details=details or {})


def reward_from_files(
    files: dict[str, str | None], details: dict | None = None, partial_credit: bool = False
) -> RewardResult:
    """Harbor's rule: ``reward.json`` (number or ``{"reward": x}``) first, else ``reward.txt``; binarised,
    or with ``partial_credit`` clamped to [0, 1] (solved, ``tests_passed``, still means >= 1)."""
    details = dict(details or {})
    value: float | None = None
    text_json, text_txt = files.get("reward.json"), files.get("reward.txt")
    if text_json is not None and text_json.strip():
        try:
            parsed = json.loads(text_json)
        except ValueError:
            return _aborted("reward_file", f"reward.json is not JSON: {text_json[:100]!r}", details)
        if isinstance(parsed, dict):
            details["reward_json"] = {k: v for k, v in parsed.items() if isinstance(v, (int, float))}
            parsed = parsed.get("reward")
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            value = float(parsed)
    if value is None:
        if text_txt is None or not text_txt.strip():
            what = "missing" if text_json is None and text_txt is None else "empty or without a reward"
            return _aborted("reward_file", f"/logs/verifier/reward.json and reward.txt {what}", details)
        try:
            value = float(text_txt.strip())
        except ValueError:
            return _aborted("reward_file", f"reward.txt is not a number: {text_txt[:100]!r}", details)
    if not math.isfinite(value):
        return _aborted("reward_file", f"reward is not finite: {value}", details)
    details["raw_reward"] = value
    passed = value >= 1.0
    score = min(max(value, 0.0), 1.0) if partial_credit else float(passed)
    return RewardResult(score=score, components={"tests_passed": float(passed)},
                        failure=None if passed else "tests_failed", details=details)  # fmt: skip


class LocalRuntime:
    """One task's files snapshotted once; :meth:`start` hands each trajectory a fresh sandbox of them.

    Refuses to start (``SandboxUnavailable``) without sandbox isolation; a sandbox that cannot boot raises
    ``EnvironmentFailure`` from :meth:`start` (the trajectory is aborted).
    """

    def __init__(
        self,
        workspace_src: Path,
        tests_dir: Path,
        test_script: str = "test.sh",
        *,
        limits: Limits = HARBOR_LIMITS,
        workspace_mb: int = 256,
        tmp_mb: int = 64,
        command_timeout_s: float = 60.0,
        verify_timeout_s: float = 600.0,
        boot_timeout_s: float = 60.0,
        output_bytes: int = 16384,
        spares: int = 1,
        outputs_mb: int = 0,
    ) -> None:
        workspace_src, tests_dir = Path(workspace_src), Path(tests_dir)
        if not workspace_src.is_dir():
            raise FileNotFoundError(f"task workspace {workspace_src} is not a directory")
        if not (tests_dir / test_script).is_file():
            raise FileNotFoundError(f"task test script {tests_dir / test_script} does not exist")
        check_isolation().require()
        self.limits, self.test_script, self.workspace_mb, self.tmp_mb = (
            limits,
            test_script,
            workspace_mb,
            tmp_mb,
        )
        self.command_timeout_s, self.verify_timeout_s = command_timeout_s, verify_timeout_s
        self.boot_timeout_s, self.output_bytes, self.spares = boot_timeout_s, max(output_bytes, 256), spares
        self.outputs_mb = outputs_mb
        self.cache = Path(tempfile.mkdtemp(prefix="rufus-harbor-"))
        self._spare: collections.deque[Future[_Box]] = collections.deque()
        self._pool = ThreadPoolExecutor(max(spares, 1), thread_name_prefix="harbor-boot")
        self._lock = threading.Lock()
        try:
            _snapshot(workspace_src, self.cache / "snapshot")
            (self.cache / "private").mkdir(mode=0o700)
            shutil.copytree(tests_dir, self.cache / "private" / "tests", symlinks=True)
            self._refill()
        except BaseException:
            self.close()
            raise

    def argv(self, fd: int) -> list[str]:
        """The bubblewrap command of one trajectory's sandbox, serving on socket ``fd``."""
        argv = bwrap_argv(find_bwrap() or "bwrap", fd, self.limits.scratch_mb)
        argv = argv[: argv.index("--")]
        # a saved output passes through IO whole: with an outputs folder, IO is as large as it
        io_mb = max(4 * self.output_bytes // 2**20 + 4, self.outputs_mb)
        mounts = [("/app", "0777", self.workspace_mb), ("/tmp", "1777", self.tmp_mb), ("/logs", "0755", 16),
                  ("/dev/shm", "1777", self.tmp_mb), (inside.IO, "0700", io_mb)]  # fmt: skip
        if self.outputs_mb > 0:  # after /tmp: a mount point the agent can neither remove nor write
            mounts.append((inside.OUT, "0755", self.outputs_mb))
        for path, perms, mb in mounts:
            argv += ["--perms", perms, "--size", str(mb << 20), "--tmpfs", path]
        # an interpreter or venv living under /tmp (a clone there) was bound above and is now hidden by the
        # fresh /tmp: bind it again, read-only, below parents the dropped user may traverse (bwrap would
        # create them 0700, and a tool that runs the interpreter as that user, Feather's, could not)
        for root in sorted({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)}):
            if root == "/tmp" or root.startswith("/tmp/"):
                for parent in reversed(Path(root).parents[:-2]):  # below /tmp, above root
                    argv += ["--perms", "0755", "--dir", str(parent)]
                argv += ["--ro-bind", root, root]
        argv += [
            "--perms",
            "0755",
            "--dir",
            "/opt/rufus-harbor",
            "--perms",
            "0700",
            "--dir",
            "/.rufus-private",
        ]
        argv += ["--ro-bind", inside.__file__, PROGRAM_IN_SANDBOX]
        argv += ["--ro-bind", str(self.cache / "snapshot"), inside.SNAPSHOT]
        argv += ["--ro-bind", str(self.cache / "private" / "tests"), inside.PRIVATE_TESTS]
        uid = 100_000 + secrets.randbelow(1 << 30)  # a uid no host account or other sandbox uses
        cfg = self.limits.runner_config(uid, True, "/tmp")
        cfg["env"] = dict(SANDBOX_ENV, HOME=inside.HOME, TMPDIR="/tmp", PWD=inside.APP, TERM="dumb")
        argv += ["--", sys.executable, "-s", "-B", PROGRAM_IN_SANDBOX, "--fd", str(fd)]
        return argv + ["--config", json.dumps(cfg)]

    def _refill(self) -> None:
        with self._lock:
            while len(self._spare) < self.spares:
                self._spare.append(self._pool.submit(_Box, self))

    def start(self) -> Session:
        """Return a ready session holding a fresh copy of the task's files (a spare if one is booted)."""
        with self._lock:
            future = self._spare.popleft() if self._spare else None
        self._refill()
        try:
            box = future.result(timeout=self.boot_timeout_s + 30) if future is not None else _Box(self)
        except FutureTimeout:
            raise EnvironmentFailure(f"harbor sandbox did not boot within {self.boot_timeout_s:g}s") from None
        if box.proc is None or box.proc.poll() is not None:
            box.close()
            raise EnvironmentFailure("harbor sandbox exited before its session started")
        return Session(self, box)

    def wait_ready(self) -> None:
        """Block until the spare sandboxes have booted (or failed: the next :meth:`start` raises)."""
        with self._lock:
            pending = list(self._spare)
        for future in pending:
            future.exception()

    def close(self) -> None:
        """Stop the spare sandboxes and delete the snapshot."""
        with self._lock:
            spares, self._spare = list(self._spare), collections.deque()
        self._pool.shutdown(wait=True)
        for future in spares:
            if future.exception() is None:
                future.result().close()
        shutil.rmtree(self.cache, ignore_errors=True)

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
