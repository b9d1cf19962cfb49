"""The local runtime's side of a Harbor task: what it can run, the task's ``/app``, the runtime cache.

:func:`local_problems` says why the bubblewrap runtime (:mod:`.runtime`) cannot run a task (it reproduces
files-only Dockerfiles that copy into ``/app``); :func:`build_workspace` writes that ``/app``;
:class:`RuntimeOptions` are how a runtime runs commands and its verifier; :class:`RuntimeCache` keeps one
:class:`~infra.agents.harbor.runtime.LocalRuntime` per task and process (its snapshot and spare sandboxes),
closing the least recently used idle ones; :func:`open_session` takes a fresh sandbox from it. The
``harbor`` environment (:mod:`.env`) and the local backend (:mod:`.backends`) use them.
"""

from __future__ import annotations

import atexit
import collections
import functools
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor.command_tool import OUTPUTS_MB, HarnessOptions
from infra.agents.harbor.runtime import LocalRuntime, Session
from infra.agents.harbor.task import HarborTask, structural_problems
from infra.sandbox import SandboxUnavailable

APP = "/app"  # the local runtime's working directory: the only place task files can go


def local_problems(task: HarborTask) -> list[str]:
    """Return why the local runtime cannot run ``task`` ([] when it can): the structural filter, plus a
    files-only Dockerfile whose copies land in ``/app``, ``/app`` as working directory, a reward file."""
    env = task.environment
    problems = structural_problems(task)
    if task.reward_source != "reward_file":
        problems.append("scored by the test script's exit code (Terminal-Bench layout), not a reward file")
    if env.defined and not env.files_only:
        problems.append("environment is not files-only (RUN steps, an image or several stages to build)")
    if env.workdir != APP:
        problems.append(f"working directory {env.workdir or '/'} is not {APP}")
    for copy in env.copies:
        if copy.dest.rstrip("/") != APP and not copy.dest.startswith(APP + "/"):
            problems.append(f"Dockerfile line {copy.line} copies to {copy.dest}, outside {APP}")
    return problems


def build_workspace(task: HarborTask, dest: Path) -> None:
    """Write the task's ``/app`` into ``dest``: its Dockerfile's COPY/ADD steps, with Docker's semantics."""
    dest.mkdir(parents=True, exist_ok=True)
    for copy in task.environment.copies:
        target = dest / copy.dest.rstrip("/")[len(APP) :].lstrip("/")
        into_dir = copy.dest.endswith("/") or len(copy.sources) > 1 or target.is_dir()
        for src in copy.sources:
            if src.is_dir():  # a directory source copies its contents
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            else:
                out = target / src.name if into_dir else target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, out)


@dataclass(frozen=True)
class RuntimeOptions:
    """How a task's runtime runs commands and its verifier (part of the runtime cache key)."""

    spares: int = 2  # sandboxes kept booted ahead per task
    command_timeout: float = 30.0  # seconds per execute_command
    verifier_timeout: float = 120.0  # cap on the task's own [verifier].timeout_sec
    output_tokens: int = 512  # each stream of a command's output, about 4 characters a token
    workspace_mb: int = 256  # size of the /app tmpfs
    harness: HarnessOptions = HarnessOptions()  # FireFlash tool behaviours (off: stage 05's tool)

    def runtime(self, task: HarborTask) -> LocalRuntime:
        """Return a new runtime of ``task`` (its ``/app`` built from the Dockerfile's copies)."""
        if task.tests_dir is None:
            raise FileNotFoundError(f"{task.task_dir}: no tests/ directory")
        with tempfile.TemporaryDirectory(prefix="rufus-harbor-ws-") as tmp:
            build_workspace(task, Path(tmp) / "app")
            return LocalRuntime(
                Path(tmp) / "app",
                task.tests_dir,
                workspace_mb=self.workspace_mb,
                command_timeout_s=self.command_timeout,
                verify_timeout_s=min(task.verifier_timeout_sec, self.verifier_timeout),
                # the sandbox keeps head and tail within the budget, marker included
                output_bytes=4 * self.output_tokens - 64,
                spares=self.spares,
                outputs_mb=OUTPUTS_MB if self.harness.enabled else 0,
            )


@dataclass
class _Entry:
    rt: LocalRuntime | None = None
    users: int = 0
    build: threading.Lock = field(default_factory=threading.Lock)


class RuntimeCache:
    """Per-process task runtimes, least recently used first; an idle one is closed past ``capacity``.

    A runtime in use is never closed (its sessions read its snapshot), so at most ``capacity`` idle
    runtimes, each with its spare sandboxes, stay open beside the ones episodes hold.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._entries: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, task: HarborTask, opts: RuntimeOptions) -> tuple[tuple, LocalRuntime]:
        """Return ``(key, runtime)`` of ``task``, built on first use; give it back with :meth:`release`."""
        key = (str(task.task_dir), opts)
        with self._lock:
            entry = self._entries.setdefault(key, _Entry())
            self._entries.move_to_end(key)
            entry.users += 1
        try:
            with entry.build:
                if entry.rt is None:
                    entry.rt = opts.runtime(task)
        except BaseException:
            self.release(key)
            raise
        self._evict()
        return key, entry.rt

    def release(self, key: tuple) -> None:
        """Say that one user of ``key``'s runtime is done with it."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.users -= 1
                if entry.rt is None and entry.users == 0:
                    del self._entries[key]
        self._evict()

    def open_runtimes(self) -> int:
        """Number of runtimes built and not closed."""
        with self._lock:
            return sum(e.rt is not None for e in self._entries.values())

    def _evict(self) -> None:
        with self._lock:
            victims = []
            while len(self._entries) > self.capacity:
                idle = next((k for k, e in self._entries.items() if e.users == 0), None)
                if idle is None:
                    break
                victims.append(self._entries.pop(idle))
        for entry in victims:
            if entry.rt is not None:
                entry.rt.close()

    def close(self) -> None:
        """Close every runtime (at exit)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), collections.OrderedDict()
        for entry in entries:
            if entry.rt is not None:
                entry.rt.close()


@functools.lru_cache(maxsize=4)
def runtime_cache(capacity: int = 8) -> RuntimeCache:
    """Return the process-wide runtime cache of ``capacity`` (closed at exit)."""
    cache = RuntimeCache(capacity)
    atexit.register(cache.close)
    return cache


def open_session(task: HarborTask, opts: RuntimeOptions, cache: RuntimeCache) -> tuple[tuple, Session]:
    """Return ``(cache key, session)``: a fresh sandbox of ``task``; raise ``EnvironmentFailure`` if none."""
    try:
        key, rt = cache.acquire(task, opts)
    except (EnvironmentFailure, SandboxUnavailable, OSError) as exc:
        raise EnvironmentFailure(f"harbor task {task.task_dir}: runtime did not start: {exc}") from None
    try:
        return key, rt.start()
    except (EnvironmentFailure, SandboxUnavailable, OSError) as exc:
        cache.release(key)
        raise EnvironmentFailure(f"harbor task {task.task_dir}: sandbox did not boot: {exc}") from None
    except BaseException:
        cache.release(key)
        raise
