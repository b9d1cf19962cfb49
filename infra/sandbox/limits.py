"""Resource limits for one sandboxed run and the result record every sandbox call returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Limits:
    """Per-run bounds; every field is enforced by the kernel (rlimits, tmpfs size) or by the host's clock.

    Memory is per process (RLIMIT_AS): without a memory cgroup the worst case for a job is
    ``memory_mb * max_procs`` plus ``scratch_mb``, so keep ``max_procs`` small.
    """

    wall_s: float = 30.0
    test_timeout_s: float = 4.0
    cpu_s: int | None = None
    memory_mb: int = 1024
    max_procs: int = 8
    max_open_files: int = 64
    max_output_bytes: int = 8 << 20
    scratch_mb: int = 64

    def __post_init__(self) -> None:
        for name in ("wall_s", "test_timeout_s", "memory_mb", "max_procs", "max_open_files", "scratch_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.max_output_bytes < 1024:
            raise ValueError("Limits.max_output_bytes must be at least 1024")

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU for the job: explicit, or the wall budget rounded up plus one second."""
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.wall_s) + 1

    def runner_config(self, uid: int, switch_uid: bool, scratch: str) -> dict:
        """The configuration the in-sandbox zygote applies to every runner it forks."""
        return {
            "uid": uid,
            "switch_uid": switch_uid,
            "scratch": scratch,
            "memory_bytes": self.memory_mb << 20,
            "cpu_s": self.cpu_seconds,
            "max_procs": self.max_procs,
            "max_open_files": self.max_open_files,
            "max_output_bytes": self.max_output_bytes,
            "env": SANDBOX_ENV,
        }


# The whole environment a sandboxed program sees (the host's is never passed in).
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass
class ExecResult:
    """What one sandboxed execution produced; ``killed_reason`` says why it was stopped, if it was."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    killed_reason: str | None = None
    duration_s: float = 0.0
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the program exited 0 on its own."""
        return self.exit_code == 0 and not self.timed_out and self.killed_reason is None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)
