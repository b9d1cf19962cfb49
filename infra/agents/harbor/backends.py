"""Where a Harbor episode's sandbox comes from: the local bubblewrap runtime, Docker or E2B.

One :class:`Backend` per ``runtime`` name (:data:`RUNTIMES`), used by the stage-05 ``harbor`` environment in
training (``harbor:tasks=...,runtime=e2b``) and by the Terminal-Bench / SWE-bench harness (``--runtime``):

* ``local``: a fresh sandbox per episode from the task's cached
  :class:`~infra.agents.harbor.runtime.LocalRuntime` (:mod:`.local_runtime`); files-only tasks (``COPY``
  into ``/app``), offline; what it cannot run is said by :func:`~.local_runtime.local_problems`;
* ``docker``: :class:`~.sandboxes.DockerSession`, one container of the task's image per episode;
* ``e2b``: :class:`~.sandboxes.E2BSession`, one sandbox per episode from the task's template baked ahead of
  time by ``python -m data_prep.harbor_sources build-templates`` (alias ``<prefix>-<task>``: stage 05's data
  prep writes the ``rufus-05`` templates, the harness bakes ``rufus-eval`` ones).

Each backend has ``preflight()`` (why it cannot run here, or None), ``problems(task)`` (why it cannot run
that task), ``workdir(task)`` and ``open(task, opts, capacity)`` → ``(session, release)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from infra.agents.harbor.local_runtime import (
    APP,
    RuntimeOptions,
    local_problems,
    open_session,
    runtime_cache,
)
from infra.agents.harbor.sandboxes import DockerSession, E2BSession, docker_image, docker_problem, e2b_problem
from infra.agents.harbor.task import HarborTask, structural_problems

RUNTIMES = ("local", "docker", "e2b")
TRAIN_E2B_PREFIX = "rufus-05"  # the aliases stage 05's templates.json gives (data_prep.harbor_sources)


class Backend(Protocol):
    """Where one episode's sandbox comes from."""

    name: str

    def describe(self) -> str: ...

    def preflight(self) -> str | None: ...

    def problems(self, task: HarborTask) -> list[str]: ...

    def workdir(self, task: HarborTask) -> str: ...

    def open(
        self, task: HarborTask, opts: RuntimeOptions, capacity: int
    ) -> tuple[Any, Callable[[], None]]: ...


class LocalBackend:
    """The local runtime: a bubblewrap sandbox per episode holding the task's files in ``/app``."""

    name = "local"

    def describe(self) -> str:
        return "local bubblewrap sandbox per attempt (infra.agents.harbor.runtime; files-only tasks, offline)"

    def preflight(self) -> str | None:
        from infra.sandbox import check_isolation

        report = check_isolation()
        return (
            None
            if report.ok
            else "local runtime: sandbox isolation unavailable: " + "; ".join(report.problems)
        )

    def problems(self, task: HarborTask) -> list[str]:
        return local_problems(task)

    def workdir(self, task: HarborTask) -> str:
        return APP

    def open(self, task: HarborTask, opts: RuntimeOptions, capacity: int) -> tuple[Any, Callable[[], None]]:
        cache = runtime_cache(capacity)
        key, session = open_session(task, opts, cache)
        return session, lambda: cache.release(key)


def _session_options(task: HarborTask, opts: RuntimeOptions) -> dict[str, Any]:
    return {
        "command_timeout_s": opts.command_timeout,
        "verify_timeout_s": min(task.verifier_timeout_sec, opts.verifier_timeout),
        "output_bytes": 4 * opts.output_tokens - 64,  # as the local runtime: markers within the budget
    }


class DockerBackend:
    """One container per episode from the task's image (its ``docker_image``, else ``environment/`` built)."""

    name = "docker"

    def describe(self) -> str:
        return "docker container per attempt from the task's image (docker CLI; network per the task)"

    def preflight(self) -> str | None:
        return docker_problem()

    def problems(self, task: HarborTask) -> list[str]:
        env = task.environment
        missing = [] if env.docker_image or env.dockerfile else ["no Dockerfile or docker_image to run"]
        return structural_problems(task) + missing

    def workdir(self, task: HarborTask) -> str:
        return task.environment.workdir or APP

    def open(self, task: HarborTask, opts: RuntimeOptions, capacity: int) -> tuple[Any, Callable[[], None]]:
        return DockerSession(task, docker_image(task), **_session_options(task, opts)), lambda: None


class E2BBackend:
    """One E2B sandbox per episode from the task's baked template (no image build at run time)."""

    name = "e2b"

    def __init__(self, prefix: str = TRAIN_E2B_PREFIX, lifetime_s: int = 7200) -> None:
        self.prefix, self.lifetime_s = prefix, lifetime_s

    def describe(self) -> str:
        return f"e2b sandbox per attempt from the task's baked template ({self.prefix}-<task>)"

    def preflight(self) -> str | None:
        return e2b_problem()

    def problems(self, task: HarborTask) -> list[str]:
        missing = [] if task.environment.dockerfile else ["no Dockerfile to bake a template from"]
        return structural_problems(task) + missing

    def workdir(self, task: HarborTask) -> str:
        return task.environment.workdir or APP

    def template(self, task: HarborTask) -> str:
        """The alias ``build-templates`` gives the task's template."""
        return template_specs([task], self.prefix)[0]["alias"]

    def open(self, task: HarborTask, opts: RuntimeOptions, capacity: int) -> tuple[Any, Callable[[], None]]:
        session = E2BSession(task, self.template(task), self.lifetime_s, **_session_options(task, opts))
        return session, lambda: None


def template_specs(tasks: list[HarborTask], prefix: str = TRAIN_E2B_PREFIX) -> list[dict[str, Any]]:
    """The ``templates.json`` rows of ``tasks`` that ``python -m data_prep.harbor_sources build-templates``
    bakes (stage 05's default resources where a task sets none)."""
    from data_prep.harbor_sources import TemplateResources
    from data_prep.harbor_sources import template_specs as specs

    return specs(tasks, TemplateResources(), prefix)


def make_backend(name: str, e2b_prefix: str = TRAIN_E2B_PREFIX) -> Backend:
    """Return the backend called ``name`` (one of :data:`RUNTIMES`); ValueError naming it otherwise."""
    if name == "local":
        return LocalBackend()
    if name == "docker":
        return DockerBackend()
    if name == "e2b":
        return E2BBackend(e2b_prefix)
    raise ValueError(f"runtime {name!r}: expected one of {', '.join(RUNTIMES)}")
