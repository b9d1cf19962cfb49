"""The ``kw`` agent environment (stage 08, UM): knowledge-work tasks in Feather, graded by their rubric.

Spec: ``kw:tasks=/path/to/release[,transport=dispatch|mcp,servers=4,spares=2,workspace_mb=256,
command_timeout=60,max_command_timeout=600,result_bytes=24000,tools=*,compact_tools=false,
<EpisodeLimits fields>]``
(``rl.environment: {name: agent, options: {env: "kw:tasks=..."}}``; the production hook and the Ray
environment actors load it by the same spec). The release is a folder of task folders in the Harbor layout
of :mod:`data_prep.kw_synthesis` (:mod:`.tasks`); ``kw_tiny`` (:mod:`.tiny`) is this environment over the
embedded generators' tasks.

Per episode (:meth:`KwEnv.reset`): a fresh Feather sandbox whose ``/app`` receives the task's documents
in one archive, and each system of record of the task with a fresh copy of its pristine SQLite database,
served as stage 04 serves its apps (``transport=dispatch``: a warm sandboxed runner per task, reset per
lease; ``mcp``: a sandboxed MCP server per episode). The model sees Feather's ten tools plus one tool per
service endpoint (``list_<table>``, ``get_<row>``, ...), called by name; the loop runs calls one at a
time in the model's order. The system prompt is Feather's three sentences.

Offered tools (ours, for the embedded scale; production keeps the defaults): ``tools`` is a ``+``-separated
list of glob patterns over the tool names, Feather's and the endpoints' (default ``*``: all of them;
``kw_tiny``: ``read+write+bash+list_*``); a pattern that matches none of a task's tools is a ``ValueError``
naming the task. ``compact_tools=true`` gives Feather's tools their compact specs
(:data:`infra.agents.feather.tools.COMPACT`: one-line descriptions, required arguments only).

Failures (the paper's rule): a mistake of the policy (bad arguments, a stale read, an HTTP 4xx from a
service, an unknown tool) is a tool error the model sees; a sandbox or server that breaks raises
``EnvironmentFailure`` and the episode is ``aborted``, never scored.

Scoring (:meth:`KwEnv.score`): background tasks are stopped, the files the rubric reads are copied out of
``/app`` (:func:`.workspace.export_files`) and :func:`rewards.knowledge_work.kw_rubric_reward` grades
them: code criteria by code, judge criteria by the configured judge; judge criteria without a judge
endpoint, a renderer that is missing or a copy that fails make the result ``aborted``. The rubric is the
row's label when it carries one, else the task folder's ``tests/rubric.json`` (read on the host).
"""

from __future__ import annotations

import asyncio
import fnmatch
import shutil
import tempfile
from pathlib import Path
from typing import Any

from strands.types.tools import AgentTool

from infra.agents.awm.env import endpoint_tool
from infra.agents.awm.mcp_client import McpScenarioServer
from infra.agents.awm.schemas import compact_tool_spec
from infra.agents.awm.server import ServerLease
from infra.agents.contract import AgentTask, EnvironmentFailure, EpisodeLimits
from infra.agents.envs.base import AgentEnvironment, cycled_tasks
from infra.agents.feather import SYSTEM_PROMPT, TOOLS, FeatherHarness, FeatherOptions, upload
from infra.agents.harbor.runtime import Session
from infra.agents.kw.tasks import KwCatalog, KwTaskSpec, catalog
from infra.agents.kw.workspace import RuntimeOptions, export_files, runtime, stop_background
from infra.sandbox import SandboxUnavailable
from rewards.contract import RewardRequest, RewardResult
from rewards.knowledge_work import KWLabel, kw_rubric_reward

TRANSPORTS = ("dispatch", "mcp")


def _aborted(why: str) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure="environment", details={"error": why})


def rubric_files(label: KWLabel) -> list[str]:
    """Every workspace file the rubric reads: rendered files and the files of ``file_exists`` checks."""
    checked = [c.check.file for c in label.rubric if c.check is not None]
    return list(dict.fromkeys([*label.text_files(), *checked]))


class KwEnv(AgentEnvironment):
    """Knowledge-work tasks of one release folder: Feather tools, live systems of record, rubric reward."""

    name = "kw"
    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        tasks: str,
        transport: str = "dispatch",
        servers: int = 4,
        spares: int = 2,
        workspace_mb: int = 256,
        command_timeout: float = 60.0,
        max_command_timeout: float = 600.0,
        result_bytes: int = 24000,
        tools: str = "*",
        compact_tools: bool = False,
        **limits: Any,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"kw option transport={transport!r}: expected one of {', '.join(TRANSPORTS)}")
        self.tool_patterns = [p.strip() for p in str(tools).split("+")]
        if not all(self.tool_patterns):
            raise ValueError(f"kw option tools={tools!r}: expected glob patterns joined by '+'")
        self.root = str(Path(str(tasks)).resolve())
        self.runtime_options = RuntimeOptions(
            spares=int(spares), workspace_mb=int(workspace_mb), command_timeout=float(command_timeout),
            output_bytes=max(64 << 10, int(result_bytes) + 8192), servers=int(servers), transport=transport,
        )  # fmt: skip
        self.feather_options = FeatherOptions(
            command_timeout_s=float(command_timeout),
            max_command_timeout_s=float(max_command_timeout),
            result_bytes=int(result_bytes),
            compact=bool(compact_tools),
        )
        self.limits = EpisodeLimits(**limits)
        self.session: Session | None = None
        self.harness: FeatherHarness | None = None
        self.leases: list[ServerLease] = []
        self.mcp: list[McpScenarioServer] = []
        self._tools: list[AgentTool] = []

    @property
    def catalog(self) -> KwCatalog:
        """The release's process-wide catalog, loaded on first use (a config check needs no tasks)."""
        return catalog(self.root)

    def offered(self, spec: KwTaskSpec) -> list[str]:
        """The names of the tools an episode of ``spec`` offers (the ``tools`` option's matches), in order:
        Feather's, then the services' endpoints; ``ValueError`` for a pattern that matches none of them."""
        names = [*TOOLS, *(op for service in spec.services for op in service.operation_ids())]
        unmatched = [p for p in self.tool_patterns if not fnmatch.filter(names, p)]
        if unmatched:
            raise ValueError(
                f"kw option tools: {', '.join(unmatched)} matches none of task {spec.name}'s tools "
                f"({', '.join(names)})"
            )
        return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in self.tool_patterns)]

    def task_of(self, spec: KwTaskSpec) -> AgentTask:
        """The agent task of ``spec``: Feather's system prompt, the instruction, the rubric as label (the
        ``tools`` option is checked against the task's tools here, before any episode runs)."""
        self.offered(spec)
        return AgentTask(
            id=spec.name if spec.name.startswith("kw-") else f"kw-{spec.name}",
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": spec.instruction},
            ],
            ground_truth=spec.label.model_dump(mode="json", exclude_none=True),
            limits=self.limits,
            metadata={"env": self.name, "task": spec.name, **spec.metadata},
        )

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` tasks in a seeded order (cycling, with a ``-rK`` id suffix, past the end)."""
        empty = f"kw tasks {self.root}: no runnable task ({self.catalog.counts})"
        tasks = self.catalog.tasks
        return cycled_tasks(sorted(tasks), n, seed, lambda name: self.task_of(tasks[name]), empty)

    def tools(self) -> list[AgentTool]:
        """The offered Feather and endpoint tools of the current episode ([] outside one)."""
        return list(self._tools)

    def episode_capacity(self) -> int | None:
        """The warm service runners (``servers``): a dispatch episode holds one until it ends."""
        return self.runtime_options.servers if self.runtime_options.transport != "mcp" else None

    def _start(self, spec: KwTaskSpec) -> None:
        rt = runtime(self.runtime_options)
        try:
            self.session = rt.feather().start()
        except (SandboxUnavailable, OSError) as exc:
            raise EnvironmentFailure(f"kw task {spec.name}: the sandbox did not boot: {exc}") from None
        upload(self.session, spec.files_dir)
        self.harness = FeatherHarness(self.session, self.feather_options)
        offered = set(self.offered(spec))
        tools = self.harness.tools(sorted(offered & set(TOOLS)))
        for service in spec.services:
            scenario = service.scenario(spec.name)
            if self.runtime_options.transport == "mcp":
                server = McpScenarioServer(scenario)
                self.mcp.append(server)
                tools += server.tools()
            else:
                lease = rt.servers().acquire(scenario)
                self.leases.append(lease)
                tools += [endpoint_tool(lease, compact_tool_spec(s)) for s in lease.tool_specs]
        self._tools = [t for t in tools if t.tool_name in offered]

    async def reset(self, task: AgentTask) -> None:
        """A fresh sandbox holding the task's documents and fresh system-of-record servers."""
        spec = self.catalog.task(str(task.metadata["task"]))
        await asyncio.wrap_future(runtime(self.runtime_options).submit(self._start, spec))

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Copy the rubric's files out of ``/app``, grade them with ``kw_rubric`` (``aborted`` on infra)."""
        if self.session is None or self.harness is None:
            return _aborted("kw: no episode session")
        raw = (
            request.label
            if request.label is not None
            else self.catalog.task(str(task.metadata["task"])).label
        )
        try:
            label = raw if isinstance(raw, KWLabel) else KWLabel.model_validate(raw)
        except ValueError:
            return kw_rubric_reward(request)  # the reward names what is wrong with the label
        out = Path(tempfile.mkdtemp(prefix="rufus-kw-grade-"))
        try:
            try:
                stop_background(self.harness)
                notes = export_files(self.session, rubric_files(label), out)
            except EnvironmentFailure as exc:
                return _aborted(str(exc))
            graded = request.model_copy(
                update={
                    "label": label.model_dump(mode="json"),
                    "metadata": {**request.metadata, "workspace": str(out)},
                }
            )
            result = kw_rubric_reward(graded)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        details = {**result.details, "task": task.metadata.get("task"), "not_copied": notes}
        return result.model_copy(update={"details": details})

    def _close(self) -> None:
        session, self.session, self.harness, self._tools = self.session, None, None, []
        leases, self.leases, servers, self.mcp = self.leases, [], self.mcp, []
        for server in servers:
            server.close()
        for lease in leases:
            lease.pool.release(lease)
        if session is not None:
            session.close()

    async def cleanup(self) -> None:
        """Destroy the episode's sandbox and servers; give warm server leases back."""
        await asyncio.to_thread(self._close)
