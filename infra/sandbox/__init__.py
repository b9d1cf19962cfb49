"""The one sandbox for untrusted code: Coding-RL rewards, the search agent's python tool, IF checkers, agents.

Use::

    from infra.sandbox import Sandbox, Limits, check_isolation
    with Sandbox(Limits(wall_s=5)) as sb:
        res = sb.run_python("print(input()[::-1])", stdin="abc")    # ExecResult(stdout='cba\\n', …)
        res = sb.run_command(["sh", "-c", "cat a.txt"], files={"a.txt": b"hi"})

Guaranteed (on Linux, as root, with bubblewrap; :func:`check_isolation` probes it and every pool
refuses to start otherwise, naming the problem):

* no network (own network namespace with only loopback);
* the only writable place is a size-capped per-worker tmpfs, wiped after every job; the host's home,
  working tree, ``/tmp`` and secrets are not mounted at all; the environment is a fixed small set;
* limits per job: wall time (host clock), CPU time, address space, process count (the job runs under
  its own non-root uid, so RLIMIT_NPROC applies), open files, file and output size;
* after every job every process it started is SIGKILLed (``kill(-1)`` inside the worker's PID
  namespace, repeated until none is left), whatever it did to detach;
* verdicts of tests are computed outside the job (see :mod:`infra.sandbox.judge`), so a job cannot
  forge its result by printing, exiting early, patching builtins or attacking the harness.

Not guaranteed: total memory of a job is bounded only by ``memory_mb * max_procs`` (no memory cgroup
here); no seccomp filter is installed (namespaces, the separate uid and ``no_new_privs`` are the
boundary); side channels (timing, CPU contention between workers) are not isolated; a kernel exploit
escapes any of this. ``unsafe_local=True`` keeps only rlimits and process-group cleanup and must never
see model output.
"""

from infra.sandbox.isolation import IsolationReport, SandboxUnavailable, check_isolation
from infra.sandbox.limits import ExecResult, Limits
from infra.sandbox.runner import WorkerPool
from infra.sandbox.sandbox import Sandbox

__all__ = [
    "ExecResult",
    "IsolationReport",
    "Limits",
    "Sandbox",
    "SandboxUnavailable",
    "WorkerPool",
    "check_isolation",
]
