"""Container sessions of Harbor tasks: Docker (the ``docker`` CLI) and E2B (templates baked ahead of time).

The local runtime (:mod:`infra.agents.harbor.runtime`) reproduces only files-only tasks; SETA-Env and
Scale-SWE training tasks, Terminal-Bench 2.x and SWE-bench Verified need their images (``RUN`` steps,
``FROM swebench/sweb.eval...``). These two sessions give the ``harbor`` environment in training
(``runtime=docker|e2b``, :mod:`.backends`) and :mod:`eval.harnesses.terminal_bench` the same interface as a
local session, on one container per episode:
``execute(command, timeout_s)`` → :class:`~infra.agents.harbor.runtime.CommandResult` (what
``execute_command`` renders), ``verify()`` → :class:`~rewards.contract.RewardResult` and ``close()``.

Verification follows Harbor's verifier: stale reward files are removed, the task's ``tests/`` (and a
Terminal-Bench ``run-tests.sh``) are uploaded to ``/tests`` only now, the test command runs from the working
directory with ``[verifier].env`` within the verifier timeout, and ``/logs/verifier/reward.json`` (first) or
``reward.txt`` is read by :func:`~infra.agents.harbor.runtime.reward_from_files` (Terminal-Bench's layout:
exit code 0 passes). A container that does not start, a daemon or API that fails, a verifier past its
timeout or without a reward file are ``aborted`` / ``EnvironmentFailure``, never a 0.

* :class:`DockerSession`: ``docker run -d`` of the task's image (its ``[environment].docker_image``, else
  ``docker build`` of ``environment/``, once per task and process), ``docker exec`` per command wrapped in
  coreutils ``timeout``, ``docker cp`` for the tests, ``docker rm -f`` at the end. The CLI rather than the
  ``docker`` SDK: the image already ships the CLI and no Python dependency is added.
* :class:`E2BSession`: ``e2b.Sandbox.create(template=alias)`` of the template baked per task by
  ``python -m data_prep.harbor_sources build-templates`` (the alias of
  :func:`data_prep.harbor_sources.template_specs`); the ``e2b`` SDK is imported only here.

Neither runs on this machine (no Docker daemon, no E2B cluster): their preflights say why, and the harness
reports the cell missing. Commands run as the task's ``[agent].user`` (root when unset, as in Docker).
"""

from __future__ import annotations

import abc
import functools
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor.runtime import CommandResult, reward_from_files
from infra.agents.harbor.task import TESTS_MOUNT, VERIFIER_LOGS, HarborTask
from rewards.contract import RewardResult

DOCKER_GRACE_S = 30.0  # past a command's own timeout, the host stops waiting for ``docker exec``
_TAG = re.compile(r"[^a-z0-9-]+")


@dataclass
class ExecOutput:
    """One command in a container: its streams (already cut to the byte budget) and how it ended."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    stdout_bytes: int
    stderr_bytes: int


def clip(data: bytes, limit: int) -> str:
    """Return ``data`` decoded, or its head and tail within ``limit`` bytes around a visible marker."""
    if len(data) <= limit:
        return data.decode(errors="replace")
    marker = f"\n[... {len(data)} bytes, middle cut ...]\n"
    keep = max(limit - len(marker), 0)
    head = data[: keep // 2].decode(errors="replace")
    return head + marker + data[len(data) - (keep - keep // 2) :].decode(errors="replace")


def _read_bounded(fh: IO[bytes], limit: int) -> tuple[str, int]:
    """Return ``(text cut to limit, total bytes)`` of a spooled stream without reading more than ~2x limit."""
    size = fh.seek(0, os.SEEK_END)
    if size <= limit:
        fh.seek(0)
        return fh.read().decode(errors="replace"), size
    fh.seek(0)
    head = fh.read(limit)
    fh.seek(size - limit)
    return clip(head + fh.read(limit), limit), size


class RemoteSession(abc.ABC):
    """One attempt's container: run commands in the working directory, then verify once, then close."""

    def __init__(
        self, task: HarborTask, command_timeout_s: float, verify_timeout_s: float, output_bytes: int
    ):
        self.task = task
        self.rt = self  # execute_command_tool reads ``session.rt.command_timeout_s``
        self.command_timeout_s, self.verify_timeout_s = command_timeout_s, verify_timeout_s
        self.output_bytes = max(output_bytes, 256)
        self.workdir = task.environment.workdir or "/app"
        self.user = str(task.agent_user) if task.agent_user is not None else "root"
        self.verified = self.closed = False
        self._lock = threading.Lock()

    # the container primitives each backend implements
    @abc.abstractmethod
    def _exec(self, command: str, timeout_s: float, env: dict[str, str], user: str) -> ExecOutput:
        """Run ``command`` in the container; its output, exit code and whether it timed out."""

    @abc.abstractmethod
    def _upload(self, files: list[tuple[Path, str]]) -> None:
        """Copy each local file to its path in the container."""

    @abc.abstractmethod
    def _read(self, path: str) -> str | None:
        """Return a container file's text, or None when it does not exist."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop and remove the container."""

    def execute(
        self, command: str, timeout_s: float | None = None, *, save_over: int | None = None, background=False
    ) -> CommandResult:
        """Run ``command`` with bash in the workdir; ``EnvironmentFailure`` when the container fails."""
        if save_over is not None or background:
            raise ValueError("saved outputs and background commands need the local runtime")
        timeout = timeout_s or self.command_timeout_s
        with self._lock:
            if self.closed or self.verified:
                raise EnvironmentFailure("execute on a closed or already verified container session")
            start = time.monotonic()
            out = self._exec(command, timeout, {}, self.user)
        cut = max(out.stdout_bytes, out.stderr_bytes) > self.output_bytes
        return CommandResult(
            out.stdout,
            out.stderr,
            out.exit_code,
            out.timed_out,
            cut,
            time.monotonic() - start,
            out.stdout_bytes,
            out.stderr_bytes,
        )

    def verify(self, timeout_s: float | None = None, partial_credit: bool = False) -> RewardResult:
        """Upload the tests, run them on the final state and read the reward; ``aborted`` on infra failure."""
        task, timeout = self.task, timeout_s or self.verify_timeout_s
        user = str(task.verifier_user) if task.verifier_user is not None else "root"
        with self._lock:
            if self.closed or self.verified:
                return _aborted("sandbox", "the session is closed or was already verified")
            self.verified = True
            try:
                fresh = self._exec(
                    f"rm -rf {VERIFIER_LOGS} && mkdir -p {VERIFIER_LOGS} {TESTS_MOUNT}", 60, {}, "root"
                )
                if fresh.exit_code != 0:
                    raise EnvironmentFailure(f"preparing {VERIFIER_LOGS} failed: {fresh.stderr[-300:]}")
                self._upload(verifier_uploads(task))
                out = self._exec(task.test_command, timeout, dict(task.verifier_env), user)
                files = (
                    {}
                    if task.reward_source == "exit_code"
                    else {
                        name: self._read(f"{VERIFIER_LOGS}/{name}") for name in ("reward.json", "reward.txt")
                    }
                )
            except EnvironmentFailure as exc:
                return _aborted("sandbox", str(exc))
        details = {
            "test_exit_code": out.exit_code,
            "test_stdout": out.stdout[-2000:],
            "test_stderr": out.stderr[-2000:],
        }
        if out.timed_out:
            return _aborted("verifier_timeout", f"test script ran past {timeout:g}s", details)
        if task.reward_source == "exit_code":  # Terminal-Bench's layout: Harbor's mapper writes this reward
            files = {"reward.txt": "1" if out.exit_code == 0 else "0"}
        return reward_from_files(files, details, partial_credit)

    def close(self) -> None:
        """Destroy the container and everything in it."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._stop()


def _aborted(kind: str, why: str, details: dict | None = None) -> RewardResult:
    return RewardResult(score=0.0, failure=f"{kind}: {why}", aborted=True, details=details or {})


def verifier_uploads(task: HarborTask) -> list[tuple[Path, str]]:
    """The verifier's uploads: each file of ``tests/`` under ``/tests``, and Terminal-Bench's run-tests.sh."""
    files: list[tuple[Path, str]] = []
    if task.tests_dir is not None:
        for path in sorted(p for p in task.tests_dir.rglob("*") if p.is_file()):
            files.append((path, f"{TESTS_MOUNT}/{path.relative_to(task.tests_dir).as_posix()}"))
    if task.layout == "terminal-bench" and task.test_script is not None:
        files.append((task.test_script, f"{TESTS_MOUNT}/{task.test_script.name}"))
    return files


def literal_env(task: HarborTask) -> dict[str, str]:
    """The task's ``[environment].env`` values that need no host variable (``${...}`` ones are left out)."""
    return {k: v for k, v in task.environment.task_env.items() if "${" not in v}


# ---- Docker ------------------------------------------------------------------------------------------------
def _docker(args: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentFailure(f"docker {what}: {exc}") from None
    if done.returncode != 0:
        raise EnvironmentFailure(f"docker {what} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return done


def docker_problem(timeout_s: float = 30.0) -> str | None:
    """Return why the Docker backend cannot run here (no CLI or daemon), None when ``docker info`` answers."""
    if shutil.which("docker") is None:
        return "docker backend: the docker CLI is not on PATH"
    try:
        _docker(["info", "--format", "{{.ServerVersion}}"], timeout_s, "info")
    except EnvironmentFailure as exc:
        return f"docker backend: the daemon is not reachable ({exc})"
    return None


def _context_digest(context: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def _build_lock(task_dir: Path) -> threading.Lock:
    return threading.Lock()


_BUILT: dict[Path, str] = {}


def docker_image(task: HarborTask) -> str:
    """Return the task's image: its prebuilt ``docker_image``, else ``environment/`` built once a process."""
    env = task.environment
    if env.docker_image:
        return env.docker_image  # docker run pulls it
    if env.dockerfile is None or env.context_dir is None:
        raise EnvironmentFailure(f"{task.task_dir}: no Dockerfile or docker_image to run")
    with _build_lock(task.task_dir):
        if task.task_dir not in _BUILT:
            tag = f"rufus-eval/{_TAG.sub('-', task.name.lower())}:{_context_digest(env.context_dir)}"
            argv = ["build", "-t", tag, "-f", str(env.dockerfile), str(env.context_dir)]
            _docker(argv, env.build_timeout_sec, f"build of {task.task_dir}")
            _BUILT[task.task_dir] = tag
        return _BUILT[task.task_dir]


class DockerSession(RemoteSession):
    """A fresh container of the task's image, kept alive with ``sleep infinity`` until :meth:`close`."""

    def __init__(self, task: HarborTask, image: str, **kw: Any) -> None:
        super().__init__(task, **kw)
        env = task.environment
        self.name = f"rufus-eval-{secrets.token_hex(8)}"
        argv = ["run", "-d", "--name", self.name, "-w", self.workdir, "--entrypoint", "sh"]
        if env.network_mode == "no-network":
            argv += ["--network", "none"]
        if env.cpus:
            argv += ["--cpus", f"{env.cpus:g}"]
        if env.memory_mb:
            argv += ["--memory", f"{env.memory_mb}m"]
        for key, value in {**env.image_env, **literal_env(task)}.items():
            argv += ["-e", f"{key}={value}"]
        _docker([*argv, image, "-c", "sleep infinity"], env.build_timeout_sec, f"run of {image}")

    def argv(self, command: str, timeout_s: float, env: dict[str, str], user: str) -> list[str]:
        """The ``docker exec`` of one command: bash under coreutils ``timeout`` in the working directory."""
        argv = ["docker", "exec", "-w", self.workdir, "-u", user]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        return [*argv, self.name, "timeout", "-k", "5", f"{timeout_s:g}", "bash", "-c", command]

    def _exec(self, command: str, timeout_s: float, env: dict[str, str], user: str) -> ExecOutput:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    self.argv(command, timeout_s, env, user), stdin=subprocess.DEVNULL, stdout=out, stderr=err
                )
            except OSError as exc:
                raise EnvironmentFailure(f"docker exec: {exc}") from None
            try:
                code: int | None = proc.wait(timeout_s + DOCKER_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
            stdout, n_out = _read_bounded(out, self.output_bytes)
            stderr, n_err = _read_bounded(err, self.output_bytes)
        if code is not None and code != 0 and stderr.startswith("Error response from daemon"):
            raise EnvironmentFailure(f"docker exec in {self.name}: {stderr.strip()[:300]}")
        return ExecOutput(stdout, stderr, code, code is None or code == 124, n_out, n_err)

    def _upload(self, files: list[tuple[Path, str]]) -> None:
        parents = sorted({str(Path(dest).parent) for _, dest in files})
        if parents:
            _docker(["exec", self.name, "mkdir", "-p", *parents], 60, "exec mkdir")
        for src, dest in files:
            _docker(["cp", str(src), f"{self.name}:{dest}"], 120, f"cp of {src.name}")

    def _read(self, path: str) -> str | None:
        try:
            done = subprocess.run(["docker", "exec", self.name, "cat", path], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentFailure(f"docker exec cat {path}: {exc}") from None
        return done.stdout.decode(errors="replace") if done.returncode == 0 else None

    def _stop(self) -> None:
        try:
            subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass  # the daemon is gone: so is the container's process


# ---- E2B ---------------------------------------------------------------------------------------------------
def e2b_problem() -> str | None:
    """Return why the E2B backend cannot run here (no SDK, no API key), None when both are there."""
    try:
        import e2b  # noqa: F401
    except ImportError:
        return "e2b backend: the e2b package is not installed (pip install e2b)"
    if not os.environ.get("E2B_API_KEY"):
        return "e2b backend: E2B_API_KEY is not set (and E2B_DOMAIN for a self-hosted cluster)"
    return None


class E2BSession(RemoteSession):
    """A sandbox booted from the task's baked template (no build at run time)."""

    def __init__(self, task: HarborTask, template: str, lifetime_s: int, **kw: Any) -> None:
        super().__init__(task, **kw)
        from e2b import Sandbox, SandboxException

        internet = task.environment.network_mode != "no-network"
        try:
            self.sandbox = Sandbox.create(
                template=template, timeout=lifetime_s, envs=literal_env(task), allow_internet_access=internet
            )
        except SandboxException as exc:
            raise EnvironmentFailure(f"e2b template {template!r} did not boot: {exc}") from None

    def _exec(self, command: str, timeout_s: float, env: dict[str, str], user: str) -> ExecOutput:
        from e2b import CommandExitException, SandboxException, TimeoutException

        try:
            res = self.sandbox.commands.run(
                command, cwd=self.workdir, user=user, envs=env or None, timeout=timeout_s
            )
        except CommandExitException as exc:
            res = exc
        except TimeoutException:
            return ExecOutput("", "", None, True, 0, 0)
        except SandboxException as exc:
            raise EnvironmentFailure(f"e2b sandbox: {exc}") from None
        out, err = (res.stdout or "").encode(), (res.stderr or "").encode()
        return ExecOutput(
            clip(out, self.output_bytes),
            clip(err, self.output_bytes),
            res.exit_code,
            False,
            len(out),
            len(err),
        )

    def _upload(self, files: list[tuple[Path, str]]) -> None:
        from e2b import SandboxException

        try:
            for src, dest in files:
                self.sandbox.files.write(dest, src.read_bytes(), user="root")
        except SandboxException as exc:
            raise EnvironmentFailure(f"e2b upload: {exc}") from None

    def _read(self, path: str) -> str | None:
        from e2b import NotFoundException, SandboxException

        try:
            return self.sandbox.files.read(path, user="root")
        except NotFoundException:
            return None
        except SandboxException as exc:
            raise EnvironmentFailure(f"e2b read of {path}: {exc}") from None

    def _stop(self) -> None:
        from e2b import SandboxException

        try:
            self.sandbox.kill()
        except SandboxException:
            pass  # a sandbox that is already gone is closed either way
