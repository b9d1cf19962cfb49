"""The program that runs *inside* the sandbox: a warm zygote that forks one runner per job.

Standard library only (plus :mod:`infra.sandbox.wire`, bound next to it), because it is started as a
plain script by the sandbox's Python: ``python -s -B harness.py --fd N``.

Process layout inside one sandbox worker (one bubblewrap PID namespace)::

    bwrap init (pid 1, root)  ─  zygote (uid 0, CAP_SETUID/SETGID/KILL/DAC_OVERRIDE)  ─  runner (uid U)  ─  …

* The **zygote** imports the usual solution modules once, then waits on its control socket. It never
  receives test data or expected outputs, so nothing forked from it can find them in memory.
* On ``spawn`` it forks a **runner**: the runner starts a new session, sets rlimits, drops to the
  worker's unprivileged uid ``U`` (so RLIMIT_NPROC applies and no other process can be signalled,
  traced or read), sets ``no_new_privs``, makes its own scratch directory and serves one job on the
  socket the host passed in.
* On ``sweep`` the zygote sends SIGKILL to every other process of its PID namespace (``kill(-1)``)
  until none is left, then wipes the scratch area: daemons, double-forked children and fork bombs of
  the job die with it and nothing it wrote survives. For this it holds CAP_KILL and CAP_DAC_OVERRIDE
  (to delete whatever the job wrote, whatever modes it set).

What crosses the socket is data only: requests carry the code, call arguments or stdin; replies carry
return values (tagged JSON of builtin types), captured output and exit status. Verdicts are computed by
the host, which the untrusted uid cannot reach; see :mod:`infra.sandbox.judge`.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sys
import time

try:  # on the host
    from infra.sandbox.wire import ProtocolError, decode, encode, recv_frame, send_frame
except ImportError:  # in the sandbox, where wire.py is bound next to this script
    from wire import ProtocolError, decode, encode, recv_frame, send_frame  # type: ignore[no-redef]

# Modules imported once in the zygote so every runner starts with them already loaded.
WARM_MODULES = (
    "array bisect builtins collections copy dataclasses datetime decimal fractions functools heapq io "
    "itertools json math operator random re statistics string sys traceback typing unicodedata "
    "ctypes resource select shutil"
).split()


# ---------------------------------------------------------------------------------------------- runner
def _drop_privileges(cfg: dict) -> None:
    import resource

    mem = cfg["memory_bytes"]
    limits = {
        resource.RLIMIT_AS: mem,
        resource.RLIMIT_DATA: mem,
        resource.RLIMIT_CPU: (cfg["cpu_s"], cfg["cpu_s"] + 1),
        resource.RLIMIT_NPROC: cfg["max_procs"],
        resource.RLIMIT_NOFILE: cfg["max_open_files"],
        resource.RLIMIT_FSIZE: cfg["max_output_bytes"],
        resource.RLIMIT_CORE: 0,
    }
    for res, value in limits.items():
        resource.setrlimit(res, value if isinstance(value, tuple) else (value, value))
    uid = cfg["uid"]
    if cfg["switch_uid"]:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            os._exit(70)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        os._exit(71)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-long output fails with EFBIG instead of dying


def _redirect(stdin_path: str, out_path: str, err_path: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for fd, path, mode in ((0, stdin_path, os.O_RDONLY), (1, out_path, flags), (2, err_path, flags)):
        new = os.open(path, mode, 0o600)
        os.dup2(new, fd)
        os.close(new)
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _read_capped(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _exc_reply(exc: BaseException) -> dict:
    return {"ok": False, "exc": type(exc).__name__, "msg": str(exc)[:500]}


class _Runner:
    """Serves one job: load code, answer calls, or run scripts and commands in forked children."""

    def __init__(self, sock: socket.socket, workdir: str, cfg: dict) -> None:
        self.sock, self.workdir, self.cfg = sock, workdir, cfg
        self.ns: dict = {}
        self.code = None
        self.handles: dict[int, object] = {}
        self.counter = 0

    def serve(self) -> None:
        while True:
            try:
                req = recv_frame(self.sock, 1 << 30)
            except (EOFError, OSError, ProtocolError):
                os._exit(0)
            try:
                reply = getattr(self, "op_" + str(req.get("op")))(req)
            except BaseException as exc:  # noqa: BLE001 - the job's own failures are reported, not raised
                reply = _exc_reply(exc)
            try:
                send_frame(self.sock, reply)
            except (TypeError, ValueError, RecursionError) as exc:
                send_frame(self.sock, _exc_reply(exc))

    def op_load(self, req: dict) -> dict:
        """Compile and execute a solution module; report the names it defines and their kinds."""
        try:
            code = compile(req["code"], "<solution>", "exec")
        except (SyntaxError, ValueError) as exc:
            return {"ok": False, "exc": "SyntaxError", "msg": str(exc)[:500]}
        self.ns = {"__name__": "solution", "__builtins__": __builtins__}
        exec(code, self.ns)  # noqa: S102 - this is the sandboxed process; running the code is its job
        fn_name = req.get("fn_name")
        sol = self.ns.get("Solution")
        if fn_name and fn_name not in self.ns and isinstance(sol, type) and hasattr(sol, fn_name):
            self.ns[fn_name] = getattr(sol(), fn_name)  # LeetCode style: method of class Solution
        kinds = {}
        for name, value in self.ns.items():
            if name.startswith("__"):
                continue
            if type(value).__name__ == "module":
                kinds[name] = "module:" + str(getattr(value, "__name__", ""))
            else:
                kinds[name] = "callable" if callable(value) else "value"
        return {"ok": True, "names": kinds}

    def op_get(self, req: dict) -> dict:
        return {"ok": True, "value": encode(self.ns[req["name"]], self.handles)}

    def op_call(self, req: dict) -> dict:
        """Call a solution name or handle (following attributes); return the value and mutated args."""
        target = self.handles[req["ref"]] if isinstance(req["ref"], int) else self.ns[req["ref"]]
        for attr in req.get("path", ()):
            target = getattr(target, attr)
        args = decode(req["args"], self.handles.__getitem__)
        kwargs = decode(req["kwargs"], self.handles.__getitem__)
        result = target(*args, **kwargs)
        after = {}
        for i, arg in enumerate(args):
            if isinstance(arg, (list, dict, set, bytearray)):
                try:
                    after[str(i)] = encode(arg)
                except (TypeError, RecursionError):
                    pass
        return {"ok": True, "value": encode(result, self.handles), "after": after}

    def op_script(self, req: dict) -> dict:
        """Compile a script; later ``run`` requests execute it as ``__main__`` in a forked child."""
        try:
            self.code = compile(req["code"], "<solution>", "exec")
        except (SyntaxError, ValueError) as exc:
            return {"ok": False, "exc": "SyntaxError", "msg": str(exc)[:500]}
        return {"ok": True}

    def op_run(self, req: dict) -> dict:
        """Run the compiled script (or ``argv``) once on ``stdin`` in a child; return its output."""
        self.counter += 1
        base = os.path.join(self.workdir, f".io{self.counter}")
        with open(base + ".in", "wb") as fh:
            fh.write(req.get("stdin", "").encode())
        for name, data in (req.get("files") or {}).items():
            path = os.path.join(self.workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(base64.b64decode(data))
        argv = req.get("argv")
        if req.get("inprocess") and self.code is not None:
            return self._run_here(base)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.setpgid(0, 0)
                self.sock.close()
                _redirect(base + ".in", base + ".out", base + ".err")
                if argv:
                    os.execvp(argv[0], argv)
                status = _exec_main(self.code)
            finally:
                os._exit(status)
        timed_out, status = _wait(pid, float(req.get("timeout", 10)))
        limit = self.cfg["max_output_bytes"]
        out, err = _read_capped(base + ".out", limit), _read_capped(base + ".err", 65536)
        for suffix in (".in", ".out", ".err"):
            try:
                os.unlink(base + suffix)
            except OSError:
                pass
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        return {"ok": True, "stdout": out, "stderr": err, "exit": code, "timed_out": timed_out}

    def _run_here(self, base: str) -> dict:
        """Run the script in this process on fds 0/1/2 swapped for files (no fork: the fast path)."""
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        streams = (sys.stdin, sys.stdout, sys.stderr)
        try:
            _redirect(base + ".in", base + ".out", base + ".err")
            status = _exec_main(self.code)
        finally:
            for fd, copy in enumerate(saved):
                os.dup2(copy, fd)
                os.close(copy)
            sys.stdin, sys.stdout, sys.stderr = streams
        out = _read_capped(base + ".out", self.cfg["max_output_bytes"])
        err = _read_capped(base + ".err", 65536)
        for suffix in (".in", ".out", ".err"):
            os.unlink(base + suffix)
        return {"ok": True, "stdout": out, "stderr": err, "exit": status, "timed_out": False}


def _exec_main(code) -> int:
    """Execute a compiled script as ``__main__``; return the exit status it asked for."""
    import traceback

    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a crashing script reports its traceback on stderr
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 1
    return status & 0xFF


def _wait(pid: int, timeout: float) -> tuple[bool, int | None]:
    """Wait for ``pid`` up to ``timeout`` seconds; kill its process group on timeout."""
    import select

    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], max(timeout, 0.0))
        timed_out = not ready
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return timed_out, status
    finally:
        os.close(pidfd)


# ---------------------------------------------------------------------------------------------- zygote
def _wipe(path: str) -> None:
    """Remove everything under ``path`` (not ``path`` itself), fixing permissions the job took away."""
    import shutil

    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            try:
                os.unlink(full)
            except OSError:
                pass


def _sweep(cfg: dict, runner_pid: int) -> bool:
    """Kill everything the job started and wipe the scratch area; return whether nothing survived.

    Inside the sandbox's PID namespace the only processes are bubblewrap's init (pid 1), this zygote and
    the job's, so ``kill(-1)`` (which spares pid 1 and the caller) reaches every job process however it
    detached (new session, double fork, reparenting). Outside a sandbox (``unsafe_local``) only the
    runner's process group can be killed.
    """
    if runner_pid:
        try:
            os.killpg(runner_pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(runner_pid, 0)
        except ChildProcessError:
            pass
    clean = True
    if cfg["switch_uid"]:
        deadline = time.monotonic() + 5.0
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap()
            if not _other_processes():
                break
            if time.monotonic() > deadline:
                clean = False
                break
            time.sleep(0.0002)
    _wipe(cfg["scratch"])
    return clean


def _other_processes() -> list[int]:
    """Pids in this PID namespace other than init (1) and ourselves, zombies included."""
    me = os.getpid()
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in (1, me)]


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _spawn(cfg: dict, fd: int, job: int) -> int:
    """Fork a runner that serves the job on socket ``fd``; return its pid."""
    pid = os.fork()
    if pid:
        os.close(fd)
        return pid
    try:
        os.setsid()
        os.closerange(3, fd)
        os.closerange(fd + 1, 1 << 16)
        _drop_privileges(cfg)
        workdir = os.path.join(cfg["scratch"], f"job{job}")
        os.mkdir(workdir, 0o700)
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(cfg["env"], HOME=workdir, TMPDIR=workdir, PWD=workdir)
        _redirect("/dev/null", os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr"))
        _Runner(socket.socket(fileno=fd), workdir, cfg).serve()
    finally:
        os._exit(1)


def zygote(control_fd: int) -> None:
    """Serve ``spawn``/``sweep`` requests on a SEQPACKET control socket until it closes."""
    for name in WARM_MODULES:
        __import__(name)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ctl = socket.socket(fileno=control_fd)
    cfg: dict = {}
    job = 0
    send_frame_packet(ctl, {"ok": True, "uid": os.getuid(), "pid": os.getpid()})
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 1)
        except OSError:
            return
        if not msg:
            return
        req = json.loads(msg)
        _reap()
        if req["op"] == "config":
            cfg = req["cfg"]
            reply = {"ok": True}
        elif req["op"] == "spawn":
            job += 1
            reply = {"ok": True, "pid": _spawn(cfg, fds[0], job)}
        elif req["op"] == "sweep":
            reply = {"ok": _sweep(cfg, int(req.get("pid") or 0))}
        else:
            reply = {"ok": False, "msg": f"unknown op {req['op']!r}"}
        send_frame_packet(ctl, reply)


def send_frame_packet(ctl: socket.socket, obj: object, fds: list[int] | None = None) -> None:
    """Send one JSON control message (SEQPACKET keeps boundaries), optionally passing file descriptors."""
    socket.send_fds(ctl, [json.dumps(obj).encode()], fds or [])


if __name__ == "__main__":
    zygote(int(sys.argv[sys.argv.index("--fd") + 1]))
