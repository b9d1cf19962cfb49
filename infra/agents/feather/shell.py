"""Feather's sandbox side: the runtime, the one-archive workspace upload, and bash with background tasks.

Everything runs in stage 05's local runtime (:mod:`infra.agents.harbor.runtime`: one bubblewrap sandbox per
episode, the workspace a tmpfs at ``/app``); :class:`FeatherRuntime` only adds three read-only binds:

* ``/opt/rufus-feather/files.py``: :mod:`.files`, which each file tool call runs once (one round trip,
  :func:`helper_call`), as the job uid, so model-given paths are only ever opened inside the sandbox;
* ``/opt/rufus-feather/drop``: a host folder (mode 0711, files 0644 under unguessable names) through which
  the host hands over what does not fit a command line: the workspace archive and large write requests;
* ``/opt/rufus-feather/bin``, first on the sandbox's ``PATH``: ``python3`` and ``python``, two-line
  scripts that run the harness's own interpreter, which carries the office libraries the grader reads
  deliverables with (openpyxl, python-docx, ...). The system ``python3`` has none of them, and a command
  naming the host interpreter's path would tie the model's actions (and SFT demonstrations) to one
  machine; with this, ``python3 -c 'import openpyxl ...'`` works the same everywhere. Only Feather's
  sandboxes get it: the harbor runtime's ``PATH`` is unchanged.

:func:`upload` packs a task's files into one tar archive and extracts it with one call (the paper measured
file-by-file upload at 52 s against 2.2 s for one archive of about 50 files).

:class:`Shell`: ``bash`` runs each command in a fresh ``bash -c`` in ``/app``, so ``cd`` and exported
variables do not carry over. ``run_in_background`` starts the command with the runtime's background option
(output in root-owned files under ``/tmp/rufus_outputs``, exit status written when the runtime reaps it) and
returns a task id at once; ``task_output`` returns output not yet shown plus the status, ``task_stop`` kills
the task's process group, ``task_list`` lists the tasks. A broken sandbox raises ``EnvironmentFailure``
(the episode is aborted); a mistake of the model raises :class:`.files.PolicyError`.
"""

from __future__ import annotations

import base64
import io
import json
import os
import secrets
import shlex
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from infra.agents.contract import EnvironmentFailure
from infra.agents.feather import files
from infra.agents.feather.files import PolicyError
from infra.agents.harbor.command_tool import OUTPUTS_MB, render
from infra.agents.harbor.runtime import LocalRuntime, Session

FEATHER_DIR = "/opt/rufus-feather"
HELPER_IN_SANDBOX = f"{FEATHER_DIR}/files.py"
DROP_IN_SANDBOX = f"{FEATHER_DIR}/drop"
BIN_IN_SANDBOX = f"{FEATHER_DIR}/bin"
PYTHON_NAMES = ("python3", "python")
INLINE_BYTES = 64 << 10  # a larger request goes through the drop folder (a command line holds 128 KiB)
START_GRACE_S = 0.2  # a background command that ends this fast is reported as already finished


class FeatherRuntime(LocalRuntime):
    """The harbor local runtime plus Feather's file helper and drop folder (see the module docstring).

    ``workspace_src``: files every sandbox starts with (default none; a task's own files come with
    :func:`upload`); ``tests_dir``: a private test folder for :meth:`Session.verify` (default: a script
    that exits 1, since Feather tasks are graded on their deliverables by ``kw_rubric``, not by a test).
    """

    def __init__(
        self,
        workspace_src: Path | None = None,
        tests_dir: Path | None = None,
        test_script: str = "test.sh",
        *,
        output_bytes: int = 64 << 10,
        outputs_mb: int = OUTPUTS_MB,
        **kwargs: Any,
    ) -> None:
        if outputs_mb <= 0:
            raise ValueError("FeatherRuntime needs an outputs folder (outputs_mb > 0) for background tasks")
        with tempfile.TemporaryDirectory(prefix="rufus-feather-") as tmp:
            if workspace_src is None:
                workspace_src = Path(tmp, "workspace")
                workspace_src.mkdir()
            if tests_dir is None:
                tests_dir = Path(tmp, "tests")
                tests_dir.mkdir()
                (tests_dir / test_script).write_text("# no test script: graded on the deliverables\nexit 0\n")
            kwargs.update(output_bytes=output_bytes, outputs_mb=outputs_mb)
            super().__init__(workspace_src, tests_dir, test_script, **kwargs)

    @property
    def drop_dir(self) -> Path:
        """The host side of ``/opt/rufus-feather/drop``."""
        return self.cache / "drop"

    @property
    def bin_dir(self) -> Path:
        """The host side of ``/opt/rufus-feather/bin``."""
        return self.cache / "bin"

    def _write_bin(self) -> None:
        """Write the ``python3``/``python`` scripts once (spares boot on several threads: atomic rename)."""
        if self.bin_dir.is_dir():
            return
        tmp = Path(tempfile.mkdtemp(dir=self.cache))
        for name in PYTHON_NAMES:
            (tmp / name).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
            (tmp / name).chmod(0o755)
        tmp.chmod(0o755)
        try:
            tmp.rename(self.bin_dir)
        except OSError:  # another boot thread wrote it first
            shutil.rmtree(tmp, ignore_errors=True)

    def argv(self, fd: int) -> list[str]:
        """The harbor sandbox's command with the helper, the drop folder and the interpreter scripts bound
        read-only, and the scripts' folder first on the sandbox's ``PATH``."""
        argv = super().argv(fd)
        self.drop_dir.mkdir(exist_ok=True)
        self.drop_dir.chmod(0o711)  # the job uid may open a file it is told of, not list the folder
        self._write_bin()
        if argv[-2] != "--config":
            raise RuntimeError("the harbor sandbox's command no longer ends with --config <json>")
        cfg = json.loads(argv[-1])
        cfg["env"] = {**cfg["env"], "PATH": f"{BIN_IN_SANDBOX}:{cfg['env']['PATH']}"}
        cut = argv.index("--")
        extra = ["--perms", "0755", "--dir", FEATHER_DIR]
        for src, dest in ((files.__file__, HELPER_IN_SANDBOX), (self.drop_dir, DROP_IN_SANDBOX),
                          (self.bin_dir, BIN_IN_SANDBOX)):  # fmt: skip
            extra += ["--ro-bind", str(src), dest]
        return [*argv[:cut], *extra, *argv[cut:-1], json.dumps(cfg)]

    def stage(self, data: bytes, suffix: str) -> tuple[Path, str]:
        """Write ``data`` to a new drop file; return its host path (delete it after use) and sandbox path."""
        name = secrets.token_hex(16) + suffix
        host = self.drop_dir / name
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
        return host, f"{DROP_IN_SANDBOX}/{name}"


def _runtime(session: Session) -> FeatherRuntime:
    if not isinstance(session.rt, FeatherRuntime):
        raise TypeError(f"a Feather session needs a FeatherRuntime, not {type(session.rt).__name__}")
    return session.rt


def helper_call(session: Session, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run one :mod:`.files` request in the sandbox; return its header with ``text`` (and ``parts`` split).

    A request that ran past ``timeout_s`` is an ``ok: false`` reply (the model's pattern or tree);
    a helper that printed no header raises ``EnvironmentFailure``.
    """
    rt = _runtime(session)
    payload = json.dumps(request, ensure_ascii=False).encode()
    staged = None
    try:
        if len(payload) * 4 // 3 < INLINE_BYTES:
            arg = base64.b64encode(payload).decode()
        else:
            staged, inside = rt.stage(payload, ".json")
            arg = "@" + inside
        python = shlex.quote(sys.executable)
        res = session.execute(f"exec {python} -I -S -B {HELPER_IN_SANDBOX} {shlex.quote(arg)}", timeout_s)
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)
    op = request.get("op")
    if res.timed_out:
        return {"ok": False, "error": f"the {op} call ran past {timeout_s:g}s and was stopped", "text": ""}
    head, _, text = res.stdout.partition("\n")
    try:
        header = json.loads(head)
        if not isinstance(header, dict):
            raise ValueError(head[:100])
    except ValueError:
        why = (res.stderr.strip() or res.stdout.strip())[-400:]
        raise EnvironmentFailure(f"feather helper failed on {op!r} (exit {res.exit_code}): {why}") from None
    header["text"] = text
    return header


def pack(workspace: Mapping[str, bytes | str] | Path) -> bytes:
    """Return one tar archive of ``workspace``: a folder, or relative path -> content (ValueError naming a
    path that is absolute or climbs out)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if isinstance(workspace, Path):
            for child in sorted(workspace.iterdir()):
                tar.add(child, arcname=child.name)
        else:
            now = time.time()
            for name, content in sorted(workspace.items()):
                rel = PurePosixPath(name)
                if rel.is_absolute() or ".." in rel.parts or not rel.parts or str(rel) == ".":
                    raise ValueError(f"workspace file {name!r}: expected a relative path inside /app")
                data = content.encode() if isinstance(content, str) else bytes(content)
                info = tarfile.TarInfo(str(rel))
                info.size, info.mode, info.mtime = len(data), 0o644, now
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def upload(session: Session, workspace: Mapping[str, bytes | str] | Path, timeout_s: float = 120.0) -> int:
    """Put ``workspace`` into ``/app`` as one archive extracted by one sandbox call; return the file count.

    A failure is the environment's, not the model's: ``EnvironmentFailure`` (the episode is aborted).
    """
    host, inside = _runtime(session).stage(pack(workspace), ".tar")
    try:
        reply = helper_call(session, {"op": "unpack", "args": {"archive": inside}}, timeout_s)
    finally:
        host.unlink(missing_ok=True)
    if not reply.get("ok"):
        raise EnvironmentFailure(f"feather workspace upload failed: {reply.get('error')}")
    return int(reply["files"])


@dataclass
class BackgroundTask:
    """One ``run_in_background`` command; ``pid`` is None when it ended within the start grace."""

    id: str
    command: str
    pid: int | None
    saved: dict[str, str] = field(default_factory=dict)
    status: str = "running"  # running | exited | stopped
    exit_code: int | None = None
    offsets: dict[str, int] = field(default_factory=lambda: {"out": 0, "err": 0})
    held: tuple[str, str] = ("", "")  # output of a task that ended within the grace, until shown

    def describe(self) -> str:
        if self.status == "exited":
            return f"exited with code {self.exit_code}"
        return self.status


class Shell:
    """``bash`` (a fresh shell per call) and the background-task tools of one episode's sandbox."""

    def __init__(self, session: Session, *, timeout_s: float, max_timeout_s: float, result_bytes: int,
                 op_timeout_s: float) -> None:  # fmt: skip
        self.session, self.timeout_s, self.max_timeout_s = session, timeout_s, max_timeout_s
        self.result_bytes, self.op_timeout_s = result_bytes, op_timeout_s
        self.tasks: dict[str, BackgroundTask] = {}

    def _clip(self, text: str) -> str:
        half = self.result_bytes // 2
        if len(text) <= self.result_bytes:
            return text
        return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"

    def bash(self, command: str, timeout: float | None = None, run_in_background: bool = False) -> str:
        """Run ``command`` in a fresh ``bash -c`` in ``/app``; or start it as a background task."""
        if not command.strip():
            raise PolicyError("command is empty")
        if run_in_background:
            return self._start(command)
        if timeout is not None and not 0 < timeout:
            raise PolicyError(f"timeout must be a positive number of seconds, got {timeout}")
        limit = min(timeout or self.timeout_s, self.max_timeout_s)
        return render(self.session.execute(command, limit), self._clip, limit)

    def _start(self, command: str) -> str:
        res = self.session.execute(command, START_GRACE_S, background=True)
        task = BackgroundTask(f"task_{len(self.tasks) + 1}", command, res.background_pid, dict(res.saved))
        self.tasks[task.id] = task
        if task.pid is None:  # ended within the grace (or was killed as it started)
            task.status, task.exit_code, task.held = "exited", res.exit_code, (res.stdout, res.stderr)
            return f"Started {task.id} in the background; it has already {task.describe()}."
        return f"Started {task.id} in the background (pid {task.pid})."

    def _task(self, task_id: str) -> BackgroundTask:
        if task_id not in self.tasks:
            known = ", ".join(self.tasks) or "none started"
            raise PolicyError(f"no background task {task_id!r} (tasks: {known})")
        return self.tasks[task_id]

    def _peek(self, tasks: list[BackgroundTask], max_bytes: int) -> list[tuple[str, str, bool]]:
        """Read new output of ``tasks`` (one sandbox call); update offsets and statuses."""
        specs = [{"out": t.saved["stdout"], "err": t.saved["stderr"], "exit": t.saved["exit"],
                  "out_off": t.offsets["out"], "err_off": t.offsets["err"]} for t in tasks]  # fmt: skip
        req = {"op": "peek", "max_bytes": max_bytes, "args": {"tasks": specs}}
        reply = helper_call(self.session, req, self.op_timeout_s)
        if not reply.get("ok"):
            raise EnvironmentFailure(f"feather could not read background output: {reply.get('error')}")
        text, pieces, pos = reply["text"], [], 0
        for length in reply["parts"]:
            pieces.append(text[pos : pos + length])
            pos += length
        out = []
        for i, (task, info) in enumerate(zip(tasks, reply["tasks"], strict=True)):
            task.offsets = {"out": info["out_off"], "err": info["err_off"]}
            if info["exit"] is not None and task.status == "running":
                task.status, task.exit_code = "exited", info["exit"]
            more = info["out_off"] < info["out_size"] or info["err_off"] < info["err_size"]
            out.append((pieces[2 * i], pieces[2 * i + 1], more))
        return out

    def task_output(self, task_id: str) -> str:
        """Output of ``task_id`` not shown before, and its status."""
        task = self._task(task_id)
        if task.pid is None:
            (stdout, stderr), task.held, more = task.held, ("", ""), False
        else:
            stdout, stderr, more = self._peek([task], self.result_bytes)[0]
        body = stdout + (f"\n[stderr]: {stderr}" if stderr else "")
        if more:
            body += "\n[more output is waiting: call task_output again]"
        return f"[{task.id}: {task.describe()}]\n{body.strip() or '(no new output)'}"

    def task_stop(self, task_id: str) -> str:
        """Kill ``task_id``'s process group (unless it has already ended)."""
        task = self._task(task_id)
        if task.status != "running":
            return f"{task.id} is not running ({task.describe()})."
        exit_file, pid = shlex.quote(task.saved["exit"]), int(task.pid or 0)
        script = f"if [ -e {exit_file} ]; then cat {exit_file}; else kill -KILL -- -{pid} 2>/dev/null || " \
                 f"kill -KILL {pid} 2>/dev/null; echo stopped; fi"  # fmt: skip
        res = self.session.execute(script, self.op_timeout_s)
        if res.stdout.strip() == "stopped":
            task.status = "stopped"
            return f"Stopped {task.id}."
        try:
            task.status, task.exit_code = "exited", int(res.stdout.strip())
        except ValueError:
            raise EnvironmentFailure(f"feather task_stop of {task.id} failed: {res.stderr[-300:]}") from None
        return f"{task.id} had already {task.describe()}."

    def task_list(self) -> str:
        """Every background task with its status and command (statuses refreshed with one call)."""
        running = [t for t in self.tasks.values() if t.status == "running"]
        if running:
            self._peek(running, 0)
        if not self.tasks:
            return "No background tasks."
        return "\n".join(f"{t.id}\t{t.describe()}\t{t.command[:120]}" for t in self.tasks.values())
