"""The ``harbor`` agent environment: Harbor-format terminal tasks, one fresh sandbox per trajectory.

Spec: ``harbor:tasks=/path/to/tasks_root[,runtime=local,e2b_prefix=rufus-05,spares=2,runtimes=8,
command_timeout=30,verifier_timeout=120,output_tokens=512,workspace_mb=256,<EpisodeLimits fields>]``
(``rl.environment: {name: agent, options: {env: "harbor:tasks=..."}}``; the production hook and the Ray
environment actors load it by the same spec). ``runtime`` picks where each episode's sandbox comes from
(:mod:`.backends`): ``local`` (default; the bubblewrap runtime, files-only tasks, offline), ``docker`` (a
container of the task's image) or ``e2b`` (a sandbox of the task's template baked ahead of time, alias
``<e2b_prefix>-<task>``: production). The FireFlash options, all off by default: ``partial_credit=1``
(score: the verifier's reward clamped to [0, 1], not binarised), ``redirect_outputs=1`` and
``background_long_commands=1`` (the tool's harness behaviours, :mod:`.command_tool`; local runtime only),
``compress_at=0.85[,context_window=N]`` (context compression in the agent loop,
:mod:`infra.agents.compression`).

The task root is loaded once per process and runtime (:func:`catalog`): a task that does not load is
dropped and named once in a log line, and so is one the runtime cannot run (the backend's ``problems``;
local: Harbor's structural filter plus "files-only Dockerfile copying into ``/app``, scored by a reward
file"). Per episode :meth:`HarborEnv.reset` takes a fresh sandbox from the backend (local: from the task's
:class:`~infra.agents.harbor.runtime.LocalRuntime`, cached per process, least recently used closed past
``runtimes``), the one tool is ``execute_command`` and :meth:`HarborEnv.score` runs the task's tests
against the final state: 1.0 iff they pass (or the partial reward). A sandbox that does not boot raises
``EnvironmentFailure`` (the episode is aborted); a verifier that cannot finish is an ``aborted`` result.
The local runtime does not carry over the task's image, ``[verifier]``/``[environment]`` env vars or
network access (always offline); the Docker and E2B sessions do. The task's agent timeout is not used
(the episode limits bound the agent).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strands.types.tools import AgentTool

from infra.agents.compression import CompressionOptions
from infra.agents.contract import AgentTask, EnvironmentFailure, EpisodeLimits
from infra.agents.envs.base import AgentEnvironment, cycled_tasks
from infra.agents.harbor.backends import TRAIN_E2B_PREFIX, Backend, LocalBackend, make_backend
from infra.agents.harbor.command_tool import HarnessOptions, execute_command_tool, flag_option
from infra.agents.harbor.local_runtime import APP, RuntimeOptions
from infra.agents.harbor.task import HarborTask, load_tasks
from rewards.contract import RewardRequest, RewardResult

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are in a Linux shell; the working directory is /app. Use the execute_command tool to run bash "
    "commands and complete the task. When it is done, give a short final answer."
)


class TaskCatalog:
    """The runnable tasks of one task root, and what was dropped (each named once in a log line)."""

    def __init__(self, root: str, backend: Backend | None = None) -> None:
        self.root = root
        backend = backend or LocalBackend()
        loaded, self.malformed = load_tasks(root)
        self.unrunnable: dict[str, list[str]] = {}
        self.tasks: dict[str, HarborTask] = {}
        for line in self.malformed:
            log.warning("harbor tasks %s: dropped a malformed task: %s", root, line)
        for task in loaded:
            problems = backend.problems(task)
            if problems:
                self.unrunnable[task.name] = problems
                log.warning("harbor tasks %s: dropped %s: %s", root, task.task_dir, "; ".join(problems))
            else:
                self.tasks[task.name] = task
        log.info("harbor tasks %s: %s", root, self.counts)

    @property
    def counts(self) -> dict[str, int]:
        """Tasks kept, and dropped as malformed or as not runnable here."""
        return {
            "tasks": len(self.tasks),
            "malformed": len(self.malformed),
            "unrunnable": len(self.unrunnable),
        }

    def task(self, name: str) -> HarborTask:
        """Return task ``name``; the error names the root and why a dropped task was dropped."""
        if name in self.tasks:
            return self.tasks[name]
        why = "; ".join(self.unrunnable.get(name, ["no such task (or it did not load)"]))
        raise KeyError(f"harbor tasks {self.root}: task {name!r}: {why}")


@functools.lru_cache(maxsize=8)
def catalog(root: str, runtime: str = "local", e2b_prefix: str = TRAIN_E2B_PREFIX) -> TaskCatalog:
    """Return the process-wide catalog of task root ``root`` (an absolute path) for backend ``runtime``."""
    return TaskCatalog(root, make_backend(runtime, e2b_prefix))


class HarborEnv(AgentEnvironment):
    """Harbor-format terminal tasks of one task root; one tool, ``execute_command``; reward: the tests."""

    name = "harbor"
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        tasks: str,
        spares: int = 2,
        runtimes: int = 8,
        command_timeout: float = 30.0,
        verifier_timeout: float = 120.0,
        output_tokens: int = 512,
        workspace_mb: int = 256,
        partial_credit: Any = False,
        redirect_outputs: Any = False,
        background_long_commands: Any = False,
        compress_at: Any = None,
        context_window: Any = None,
        runtime: str = "local",
        e2b_prefix: str = TRAIN_E2B_PREFIX,
        **limits: Any,
    ) -> None:
        if output_tokens < 80:
            raise ValueError(f"harbor option output_tokens={output_tokens}: expected at least 80")
        self.root = str(Path(str(tasks)).resolve())
        harness = HarnessOptions(
            flag_option("harbor", "redirect_outputs", redirect_outputs),
            flag_option("harbor", "background_long_commands", background_long_commands),
        )
        self.runtime, self.e2b_prefix = str(runtime), str(e2b_prefix)
        self.backend: Backend = make_backend(self.runtime, self.e2b_prefix)
        if harness.enabled and self.runtime != "local":
            raise ValueError(
                "harbor options redirect_outputs/background_long_commands need runtime=local, "
                f"not {self.runtime}"
            )
        self.options = RuntimeOptions(
            int(spares),
            float(command_timeout),
            float(verifier_timeout),
            int(output_tokens),
            int(workspace_mb),
            harness,
        )
        self.partial_credit = flag_option("harbor", "partial_credit", partial_credit)
        self.compression = CompressionOptions.parse("harbor", compress_at, context_window)
        self.capacity = int(runtimes)
        self.limits = EpisodeLimits(**limits)
        self.session: Any = None  # a local Session, or a Docker/E2B one: execute, verify, close
        self._release: Callable[[], None] | None = None

    @property
    def catalog(self) -> TaskCatalog:
        """The task root's process-wide catalog, loaded on first use (a config check needs no tasks)."""
        return catalog(self.root, self.runtime, self.e2b_prefix)

    def task_of(self, task: HarborTask) -> AgentTask:
        """Return the agent task of ``task``: the system prompt (naming the backend's working directory
        when it is not ``/app``, e.g. SWE-bench's ``/testbed``), then its instruction."""
        return AgentTask(
            id=f"harbor-{task.name}",
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT.replace(APP, self.backend.workdir(task))},
                {"role": "user", "content": task.instruction or ""},
            ],
            limits=self.limits,
            metadata={"env": self.name, "task": task.name, "task_dir": str(task.task_dir)},
        )

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` tasks in a seeded order (cycling, with a ``-rK`` id suffix, past the end)."""
        empty = f"harbor tasks {self.root}: no runnable task ({self.catalog.counts})"
        tasks = self.catalog.tasks
        return cycled_tasks(sorted(tasks), n, seed, lambda name: self.task_of(tasks[name]), empty)

    def tools(self) -> list[AgentTool]:
        """Return ``execute_command`` bound to the current episode's sandbox ([] outside an episode)."""
        if self.session is None:
            return []
        opts = self.options
        return [execute_command_tool(self.session, budget_tokens=opts.output_tokens, harness=opts.harness)]

    def preflight(self) -> str | None:
        """Why the runtime cannot run here (local: no isolation; docker: no daemon; e2b: no SDK or key)."""
        return self.backend.preflight()

    def harbor_task(self, task: AgentTask) -> HarborTask:
        """The Harbor task an agent task was made from (from the catalog)."""
        return self.catalog.task(str(task.metadata["task"]))

    async def reset(self, task: AgentTask) -> None:
        """Take a fresh sandbox of the task from the backend; ``EnvironmentFailure`` if none starts."""
        harbor_task = self.harbor_task(task)
        try:
            self.session, self._release = await asyncio.to_thread(
                self.backend.open, harbor_task, self.options, self.capacity
            )
        except (OSError, ValueError) as exc:
            raise EnvironmentFailure(f"{self.runtime} runtime for {harbor_task.task_dir}: {exc}") from None

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Run the task's tests on the final ``/app``: 1.0 iff they pass (``partial_credit``: the reward
        in [0, 1]), ``aborted`` on infra failure."""
        if self.session is None:
            return RewardResult(score=0.0, aborted=True, failure="sandbox: no session", details={})
        result = self.session.verify(partial_credit=self.partial_credit)
        return result.model_copy(update={"details": {**result.details, "task": task.metadata.get("task")}})

    async def cleanup(self) -> None:
        """Destroy the episode's sandbox and give its runtime back."""
        session, release, self.session, self._release = self.session, self._release, None, None
        if session is not None:
            await asyncio.to_thread(session.close)
        if release is not None:
            release()
