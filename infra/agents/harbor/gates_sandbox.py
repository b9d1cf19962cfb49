"""One Harbor task in the training sandbox, for the validation gates (:mod:`infra.agents.harbor.gates`).

:class:`TaskSandbox` holds the task's :class:`~infra.agents.harbor.runtime.LocalRuntime` (the runtime
training uses, its ``/app`` built by :func:`~infra.agents.harbor.local_runtime.build_workspace`, no spare
sandboxes so that every boot is counted, a larger output budget so that file manifests come back whole)
and gives the gates what they need from one session: the reference solution run the way Harbor's oracle
runs it (``solution/`` copied in, ``bash …/solve.sh`` from ``/app``), a hash manifest of ``/app``, file
mutations and a scan of the filesystem as the agent sees it. The helper programs below run inside with the
sandbox's ``python3``, as the agent's uid.

Not as in Harbor: ``solution/`` lands in :data:`SOLUTION_DIR` (the agent's uid cannot create ``/solution``),
so a solve.sh naming ``/solution/…`` by absolute path fails here; it is deleted before the tests run, and
``[solution].env`` is not applied (the training runtime applies no task env vars either).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shlex
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor.local_runtime import build_workspace, local_problems
from infra.agents.harbor.runtime import CommandResult, LocalRuntime, Session
from infra.agents.harbor.task import HarborTask
from rewards.contract import RewardResult

Status = Literal["pass", "fail", "skipped"]  # a gate's outcome
SOLUTION_DIR = "/tmp/rufus-solution"
ARG_FILE = "/tmp/.rufus-gate-arg.json"
OUTPUT_BYTES = 1 << 20  # manifests and scan reports are JSON on stdout
CHUNK = 60_000  # base64 characters per upload command (one bash -c argument stays under 128 KiB)
HELPER_TIMEOUT_S = 60.0
MAX_TEXT_BYTES = 2 << 20  # larger task files are not read by the static checks (not scripts or answers)
# Host system directories bound read-only into every sandbox: the same for all tasks, never the task's.
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Each helper reads its JSON argument from the file named by argv[1], deletes it, prints JSON.
_READ_ARG = "import json, os, sys\narg = json.load(open(sys.argv[1]))\nos.unlink(sys.argv[1])\n"

MANIFEST_PY = (
    _READ_ARG
    + r"""
import hashlib
out = {}
for d, dirs, files in os.walk(arg["root"]):
    dirs.sort()
    for f in files:
        p = os.path.join(d, f)
        try:
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            data = open(p, "rb").read()
        except OSError:
            continue
        try:
            text = b"\0" not in data and bool(data.decode("utf-8")) and data.endswith(b"\n")
        except UnicodeDecodeError:
            text = False
        out[os.path.relpath(p, arg["root"])] = [hashlib.sha256(data).hexdigest(), text]
print(json.dumps(out, sort_keys=True))
"""
)

MUTATE_PY = (
    _READ_ARG
    + r"""
import base64, shutil
root, op, done = arg["root"], arg["op"], []
def files():
    for d, dirs, names in os.walk(root):
        for f in names:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                yield p
targets = [os.path.join(root, rel) for rel in arg.get("paths", [])] if op != "garbage" else list(files())
if op == "delete_all":
    for entry in os.listdir(root):
        p = os.path.join(root, entry)
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        done.append(p)
for p in targets if op != "delete_all" else []:
    os.chmod(p, os.stat(p).st_mode | 0o200)
    if op == "strip_final_newline":
        data = open(p, "rb").read()
        if data.endswith(b"\n"):
            os.truncate(p, len(data) - 1)
            done.append(p)
    elif op == "empty":
        os.truncate(p, 0)
        done.append(p)
    elif op == "garbage":
        with open(p, "wb") as fh:
            fh.write(base64.b64decode(arg["garbage_b64"]))
        done.append(p)
print(json.dumps({"done": sorted(done)}))
"""
)

SCAN_PY = (
    _READ_ARG
    + r"""
needles = [(n["source"], n["kind"], n["text"].encode()) for n in arg["needles"]]
prune, hits = set(arg["prune"]), []
for root in arg["roots"]:
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if os.path.join(d, x) not in prune)
        for f in sorted(files):
            p = os.path.join(d, f)
            try:
                if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > arg["max_bytes"]:
                    continue
                data = open(p, "rb").read()
            except OSError:
                continue
            for source, kind, text in needles:
                if text in data:
                    excerpt = text[:80].decode("utf-8", "replace")
                    hits.append({"file": p, "source": source, "kind": kind, "text": excerpt})
                    break
print(json.dumps({"paths": [p for p in arg["paths"] if os.path.lexists(p)], "hits": hits[:50]}))
"""
)


class BootFailure(RuntimeError):
    """A sandbox that did not boot: the gate needing it is skipped and gate 4 counts it."""


@dataclass
class Run:
    """The reference solution (or a mutation of it) run in one session, then the task's tests."""

    command: CommandResult | None  # None when nothing ran (a do-nothing attempt)
    before: dict[str, list]  # /app manifest before: relative path -> [sha256, text ending in a newline]
    after: dict[str, list]
    reward: RewardResult

    @property
    def written(self) -> list[str]:
        """Paths under /app the run created or changed."""
        return sorted(p for p, entry in self.after.items() if self.before.get(p, [None])[0] != entry[0])


def raw_reward(result: RewardResult) -> float | None:
    """The reward the test script wrote (before binarising); None when the verifier aborted."""
    return None if result.aborted else result.details.get("raw_reward")


def describe(result: RewardResult) -> str:
    """``reward 1 (raw 1.0)`` or ``aborted (reward_file: …missing)``: one line for the report."""
    if result.aborted:
        return f"aborted ({result.failure})"
    return f"reward {result.score:g} (raw {raw_reward(result)})"


def describe_command(res: CommandResult | None) -> str:
    """How a solution run ended, with the tail of its stderr when it failed."""
    if res is None:
        return "nothing ran"
    if res.timed_out:
        return f"timed out after {res.duration_s:.0f}s"
    tail = " ".join(res.stderr.split())[-200:]
    return f"exit {res.exit_code}" + (f", stderr: {tail}" if res.exit_code and tail else "")


def text_files(*roots: Path | None) -> list[Path]:
    """The regular files under ``roots`` of at most :data:`MAX_TEXT_BYTES` without a NUL byte, sorted."""
    files: list[Path] = []
    for root in roots:
        if root is not None and root.is_dir():
            files += sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    return [p for p in files if p.stat().st_size <= MAX_TEXT_BYTES and b"\0" not in p.read_bytes()]


def rel_path(task: HarborTask, path: Path) -> str:
    """``path`` relative to the task dir (as the report names files)."""
    return str(path.relative_to(task.task_dir)) if task.task_dir in path.parents else str(path)


def python_roots() -> list[str]:
    """The interpreter directories the runtime binds into every sandbox (pruned from leak scans)."""
    exe = Path(sys.executable).resolve()
    return sorted({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)} | {str(exe.parent.parent)})


class TaskSandbox:
    """One task's runtime; ``problem`` says why it cannot run (then every sandbox gate is skipped)."""

    def __init__(
        self, task: HarborTask, workspace_mb: int, verifier_timeout_s: float, solution_timeout_s: float
    ) -> None:
        self.task, self.solution_timeout_s = task, solution_timeout_s
        self.boots = 0  # sandboxes every gate tried to boot
        self.boot_failures: list[str] = []  # why each one that failed failed
        self.rt: LocalRuntime | None = None
        self._reference: Run | None = None
        problems = local_problems(task)
        self.problem = "; ".join(problems) or None
        if self.problem:
            return
        with tempfile.TemporaryDirectory(prefix="rufus-gates-ws-") as tmp:
            try:
                build_workspace(task, Path(tmp) / "app")
            except OSError as exc:
                self.problem = f"its /app could not be built: {exc}"
                return
            self.rt = LocalRuntime(
                Path(tmp) / "app",
                task.tests_dir,
                workspace_mb=workspace_mb,
                spares=0,
                verify_timeout_s=min(task.verifier_timeout_sec, verifier_timeout_s),
                output_bytes=OUTPUT_BYTES,
            )

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A fresh sandbox of the task, closed afterwards; :class:`BootFailure` when it does not boot."""
        assert self.rt is not None, self.problem
        self.boots += 1
        try:
            session = self.rt.start()
        except EnvironmentFailure as exc:
            self.boot_failures.append(str(exc))
            raise BootFailure(str(exc)) from None
        try:
            yield session
        finally:
            session.close()

    def sh(self, session: Session, command: str, what: str) -> CommandResult:
        """Run a helper command; raise ``EnvironmentFailure`` naming ``what`` unless it exits 0."""
        res = session.execute(command, HELPER_TIMEOUT_S)
        if res.exit_code != 0 or res.truncated:
            why = "output cut" if res.truncated else describe_command(res)
            raise EnvironmentFailure(f"{what} failed in the sandbox: {why}")
        return res

    def upload(self, session: Session, data: bytes, path: str) -> None:
        """Write ``data`` to ``path`` in the sandbox (base64 in chunks through ``execute``)."""
        text, q = base64.b64encode(data).decode(), shlex.quote(path)
        self.sh(session, f"rm -f {q}.b64 && touch {q}.b64", f"uploading {path}")
        for start in range(0, len(text), CHUNK):
            self.sh(session, f"printf %s {text[start : start + CHUNK]} >> {q}.b64", f"uploading {path}")
        self.sh(session, f"base64 -d {q}.b64 > {q} && rm {q}.b64", f"uploading {path}")

    def helper(self, session: Session, program: str, arg: dict[str, Any], what: str) -> Any:
        """Run one of the helper programs with ``arg``; return its JSON output."""
        self.upload(session, json.dumps(arg).encode(), ARG_FILE)
        res = self.sh(session, f"python3 -c {shlex.quote(program)} {ARG_FILE}", what)
        return json.loads(res.stdout)

    def manifest(self, session: Session) -> dict[str, list]:
        """``/app``'s regular files: relative path -> [sha256, is text ending in a newline]."""
        return self.helper(session, MANIFEST_PY, {"root": "/app"}, "hashing /app")

    def mutate(self, session: Session, op: str, paths: Sequence[str] = (), garbage: bytes = b"") -> list[str]:
        """Apply a :data:`MUTATE_PY` operation to ``paths`` under ``/app``; return the paths it changed."""
        garbage_b64 = base64.b64encode(garbage).decode()
        arg = {"root": "/app", "op": op, "paths": list(paths), "garbage_b64": garbage_b64}
        return self.helper(session, MUTATE_PY, arg, f"mutation {op}")["done"]

    def scan(self, session: Session, needles: list[dict], paths: list[str]) -> dict[str, Any]:
        """Search what the agent can read for ``needles``; report which of ``paths`` exist."""
        arg = {"roots": ["/"], "prune": [*SYSTEM_DIRS, *python_roots()], "max_bytes": MAX_TEXT_BYTES,
               "needles": needles, "paths": paths}  # fmt: skip
        return self.helper(session, SCAN_PY, arg, "scanning the sandbox")

    def solution_tar(self, script: str | None = None) -> bytes:
        """``solution/`` as a gzipped tar; ``script`` replaces solve.sh's text when given."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(self.task.solution_dir), arcname=".")
            if script is not None:  # a later member wins on extraction
                info = tarfile.TarInfo("./solve.sh")
                info.size, info.mode = len(script.encode()), 0o755
                tar.addfile(info, io.BytesIO(script.encode()))
        return buf.getvalue()

    def solve(self, session: Session, script: str | None = None, command: str | None = None) -> CommandResult:
        """Copy ``solution/`` in, run it from ``/app`` (``command`` instead of ``bash solve.sh`` when
        given), delete it; return how the run ended."""
        q = shlex.quote(SOLUTION_DIR)
        self.upload(session, self.solution_tar(script), SOLUTION_DIR + ".tgz")
        self.sh(session, f"mkdir -p {q} && tar -xzf {q}.tgz -C {q} && rm {q}.tgz", "copying solution/ in")
        res = session.execute(command or f"bash {q}/solve.sh", self.solution_timeout_s)
        self.sh(session, f"rm -rf {q}", "removing the solution")
        return res

    def run(self, session: Session, script: str | None = None, command: str | None = None) -> Run:
        """Run the solution in ``session`` (see :meth:`solve`), hashing ``/app`` around it; not verified."""
        before = self.manifest(session)
        res = self.solve(session, script, command)
        return Run(res, before, self.manifest(session), RewardResult(score=0.0))

    def reference(self) -> Run:
        """The reference solution in a fresh session, then the tests (run once per task, cached)."""
        if self._reference is None:
            with self.session() as session:
                run = self.run(session)
                run.reward = session.verify()
            self._reference = run
        return self._reference

    def close(self) -> None:
        """Delete the runtime's snapshot."""
        if self.rt is not None:
            self.rt.close()
