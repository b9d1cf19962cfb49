"""The program that runs *inside* one trajectory's sandbox: the agent's commands and the task's verifier.

Started by :mod:`infra.agents.harbor.runtime` as ``python -s -B /opt/rufus-harbor/sandboxed_shell.py --fd N
--config JSON`` (bubblewrap's PID, network, IPC and UTS namespaces; see that module for the mount plan). It
stays root with the few capabilities the sandbox's zygote keeps (see :mod:`infra.sandbox.harness`) and
serves length-prefixed JSON requests (:mod:`infra.sandbox.wire`) on socket ``N``:

* ``prepare``: copy the task snapshot into ``/app`` and make ``HOME``, as the job uid (the agent owns them);
* ``exec``: run ``bash -c COMMAND`` in ``/app`` as the job uid with the sandbox's rlimits and
  ``no_new_privs`` (the harness's own ``_drop_privileges``), in a new session, stdin ``/dev/null``;
  stdout and stderr go to root-only files and come back cut to ``max_bytes`` (head and tail kept); on
  timeout the command's whole process group is killed, background jobs it detached survive, as in a
  container. Two harness options (off unless the request sets them, see
  :mod:`infra.agents.harbor.command_tool`) use the root-owned, agent-readable ``/tmp/rufus_outputs``:
  ``save_over`` copies a stream longer than that many bytes to ``OUT/NAME.out`` / ``.err``, and
  ``background`` writes the streams there from the start and, on timeout, leaves the command running
  (reply ``background_pid``) instead of killing it; its exit status goes to ``OUT/NAME.exit`` once a later
  request reaps it. Root creates these files in a folder only root can write, so no agent link is followed;
* ``verify``: kill every job process, clear ``/logs``, copy the tests from the root-only
  ``/.rufus-private/tests`` to a new root-owned, read-only ``/tests``, run the test script as the job uid
  and return the text of ``/logs/verifier/reward.json`` and ``reward.txt`` (files opened without
  following links). The host parses them; nothing here decides a reward.

Standard library only (plus the harness and wire modules bound beside it), like the harness.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import time

try:  # on the host (imported by tests)
    from infra.sandbox.harness import _drop_privileges, _other_processes, _reap, _wait
    from infra.sandbox.wire import ProtocolError, recv_frame, send_frame
except ImportError:  # in the sandbox: harness.py and wire.py are bound read-only at /opt/rufus-sandbox
    sys.path.append("/opt/rufus-sandbox")
    from harness import _drop_privileges, _other_processes, _reap, _wait  # type: ignore[no-redef]
    from wire import ProtocolError, recv_frame, send_frame  # type: ignore[no-redef]

APP, HOME, LOGS, TESTS, IO = "/app", "/tmp/home", "/logs", "/tests", "/.rufus-io"
OUT = "/tmp/rufus_outputs"  # saved and background outputs: root-owned files the agent can read
SNAPSHOT, PRIVATE_TESTS = "/opt/rufus-harbor/snapshot", "/.rufus-private/tests"
REWARD_FILES = ("reward.json", "reward.txt")
#: Commands left running in the background: pid -> the file that gets their exit status.
BACKGROUND: dict[int, str] = {}


def _read_cut(path: str, max_bytes: int) -> tuple[str, int]:
    """Return (text, size) of ``path``: all of it, or head and tail with a marker if over ``max_bytes``."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= max_bytes:
            data = fh.read(max_bytes)
        else:
            head = fh.read(max_bytes // 2)
            fh.seek(size - max_bytes // 2)
            marker = f"\n[... {size - 2 * (max_bytes // 2)} bytes truncated ...]\n".encode()
            data = head + marker + fh.read(max_bytes // 2)
    return data.decode("utf-8", errors="replace"), size


def _kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid`` until it is empty (a fork bomb keeps refilling it for a moment)."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        _reap()
        time.sleep(0.001)


def _spawn(cfg: dict, argv: list[str], paths: list[str], as_job: bool, cwd: str, mode: int = 0o600) -> int:
    """Fork ``argv`` in a new session, stdin ``/dev/null``, stdout and stderr to new files ``paths``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    fds = [os.open(p, flags, mode) for p in paths]
    null = os.open("/dev/null", os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for target, fd in enumerate((null, *fds)):
                os.dup2(fd, target)
            os.closerange(3, 1 << 16)
            if as_job:
                _drop_privileges(cfg)
            os.chdir(cwd)
            os.execve(argv[0], argv, cfg["env"])
        finally:
            os._exit(127)
    for fd in (null, *fds):
        os.close(fd)
    return pid


def _reply(out: tuple[str, int], err: tuple[str, int], status: int | None, timed_out: bool) -> dict:
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    return {"ok": True, "stdout": out[0], "stderr": err[0], "exit": code, "timed_out": timed_out,
            "stdout_bytes": out[1], "stderr_bytes": err[1]}  # fmt: skip


def run(
    cfg: dict, argv: list[str], timeout: float, max_bytes: int, as_job: bool = True, cwd: str = APP
) -> dict:
    """Run ``argv`` (as the job uid unless ``as_job`` is false); return its cut output and exit status."""
    paths = [os.path.join(IO, name) for name in ("out", "err")]
    pid = _spawn(cfg, argv, paths, as_job, cwd)
    timed_out, status = _wait(pid, timeout)
    if timed_out:
        _kill_group(pid)
    out, err = (_read_cut(p, max_bytes) for p in paths)
    for p in paths:
        os.unlink(p)
    return _reply(out, err, status, timed_out)


def _wait_no_kill(pid: int, timeout: float) -> tuple[bool, int | None]:
    """Wait for ``pid`` up to ``timeout`` seconds; on timeout leave it running and return (True, None)."""
    import select

    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], max(timeout, 0.0))[0]:
            return True, None
        return False, os.waitpid(pid, 0)[1]
    finally:
        os.close(pidfd)


def _save(src: str, dest: str) -> bool:
    """Copy ``src`` to the new file ``dest`` (0644); False, and nothing left, if it does not fit."""
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return False
    try:
        with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        return True
    except OSError:
        os.unlink(dest)
        return False


def reap_background() -> None:
    """Write the exit status of each background command that has ended to its ``.exit`` file."""
    for pid, exit_path in list(BACKGROUND.items()):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its status is gone
            BACKGROUND.pop(pid)
            continue
        if done:
            BACKGROUND.pop(pid)
            try:
                fd = os.open(exit_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w") as fh:
                    fh.write(f"{os.waitstatus_to_exitcode(status)}\n")
            except OSError:
                pass


def run_command(
    cfg: dict, cmd: str, timeout: float, max_bytes: int, save_over: int | None, background: bool, name: str
) -> dict:
    """Run the agent's ``bash -c cmd`` in ``/app``: :func:`run`, plus the ``save_over``/``background``
    options (files ``OUT/NAME.out``, ``.err``, ``.exit``; their paths come back under ``saved``)."""
    argv = ["/bin/bash", "-c", cmd]
    if save_over is None and not background:
        return run(cfg, argv, timeout, max_bytes)
    if not name.replace("_", "").isalnum():
        raise ValueError(f"bad output name {name!r}")
    streams = ("stdout", "stderr")
    saved = dict(zip(streams, (os.path.join(OUT, f"{name}.{ext}") for ext in ("out", "err")), strict=True))
    paths = list(saved.values()) if background else [os.path.join(IO, n) for n in ("out", "err")]
    pid = _spawn(cfg, argv, paths, True, APP, 0o644)
    if background:
        timed_out, status = _wait_no_kill(pid, timeout)
    else:
        timed_out, status = _wait(pid, timeout)
        if timed_out:
            _kill_group(pid)
    out, err = (_read_cut(p, max_bytes) for p in paths)
    reply = _reply(out, err, status, timed_out)
    if background and timed_out:  # still writing to its files
        BACKGROUND[pid] = saved["exit"] = os.path.join(OUT, f"{name}.exit")
        reply.update(saved=saved, background_pid=pid)
        return reply
    for stream, path, (_, size) in zip(streams, paths, (out, err), strict=True):
        keep = save_over is not None and size > save_over and (background or _save(path, saved[stream]))
        if not keep:
            saved.pop(stream)
        if not (keep and background):
            os.unlink(path)
    reply["saved"] = saved
    return reply


def _kill_jobs() -> None:
    """SIGKILL every process but init and this server (``kill(-1)``), until none is left."""
    deadline = time.monotonic() + 5.0
    while _other_processes() and time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap()
        time.sleep(0.001)
    if _other_processes():
        raise RuntimeError("job processes survived SIGKILL")


def _read_reward(name: str) -> str | None:
    """Return the text of ``/logs/verifier/NAME`` (a regular file, not followed if a link), else None."""
    try:
        fd = os.open(os.path.join(LOGS, "verifier", name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return None
        return fh.read(65536).decode("utf-8", errors="replace")


def verify(cfg: dict, script: str, timeout: float, max_bytes: int) -> dict:
    """Stop the agent's processes, install ``/tests``, run the test script; return its reward files' text."""
    _kill_jobs()
    BACKGROUND.clear()
    for entry in os.listdir(LOGS):
        path = os.path.join(LOGS, entry)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    os.mkdir(os.path.join(LOGS, "verifier"))
    os.chmod(os.path.join(LOGS, "verifier"), 0o777)
    if os.path.lexists(TESTS):
        raise RuntimeError(f"{TESTS} already exists before verification")
    # Copied as root without keeping owners: root-owned and not writable by the job uid.
    for argv in (["/bin/cp", "-R", "--preserve=mode,timestamps", PRIVATE_TESTS, TESTS],
                 ["/bin/chmod", "-R", "u=rwX,go=rX", TESTS]):  # fmt: skip
        done = run(cfg, argv, 60, 4096, as_job=False, cwd="/")
        if done["exit"] != 0:
            raise RuntimeError(f"installing {TESTS} failed: {done['stderr'].strip()}")
    res = run(cfg, ["/bin/bash", os.path.join(TESTS, script)], timeout, max_bytes)
    res["rewards"] = {name: _read_reward(name) for name in REWARD_FILES}
    return res


def serve(sock: socket.socket, cfg: dict) -> None:
    """Answer requests on ``sock`` until it closes."""
    while True:
        try:
            req = recv_frame(sock, 1 << 24)
        except (EOFError, OSError, ProtocolError):
            return
        try:
            op, timeout, max_bytes = (
                req.get("op"),
                float(req.get("timeout", 60)),
                int(req.get("max_bytes", 65536)),
            )
            if op == "hello":
                reply = {"ok": True, "pid": os.getpid()}
            elif op == "prepare":
                argv = [
                    "/bin/sh",
                    "-c",
                    'cd "$0" && find . -mindepth 1 -maxdepth 1 -exec cp -a -t /app {} + && mkdir -m 700 "$1"',
                    SNAPSHOT,
                    HOME,
                ]
                reply = run(cfg, argv, timeout, max_bytes, cwd="/")
            elif op == "exec":
                reap_background()
                save_over = req.get("save_over")
                reply = run_command(
                    cfg, str(req["cmd"]), timeout, max_bytes, None if save_over is None else int(save_over),
                    bool(req.get("background")), str(req.get("name") or "cmd"),
                )  # fmt: skip
            elif op == "verify":
                reply = verify(cfg, str(req["script"]), timeout, max_bytes)
            else:
                reply = {"ok": False, "msg": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - reported to the host, which aborts the trajectory
            reply = {"ok": False, "msg": f"{type(exc).__name__}: {exc}"[:1000]}
        send_frame(sock, reply)


if __name__ == "__main__":
    import ctypes  # noqa: F401 - imported once here, not in every command's child (_drop_privileges)
    import resource  # noqa: F401

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.umask(0o022)
    config = json.loads(sys.argv[sys.argv.index("--config") + 1])
    serve(socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1])), config)
