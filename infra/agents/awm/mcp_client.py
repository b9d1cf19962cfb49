"""Host side of AWM over MCP: one sandboxed MCP server per episode, reached with Strands' ``MCPClient``.

:class:`McpScenarioServer` writes the scenario's server code and pristine database to a private temp
folder, launches :mod:`infra.agents.awm.mcp_server` inside the project sandbox (the bubblewrap mount
plan of :func:`infra.sandbox.isolation.bwrap_argv` plus read-only binds of that folder and of the two
program files; own PID and network namespaces, the runner's rlimits, a fresh unprivileged uid) and
talks MCP to it over the process's stdin/stdout (``mcp.client.stdio.stdio_client``), so no port or
network exists anywhere. Killing the sandbox's init tears down its PID namespace: nothing it started
survives :meth:`McpScenarioServer.close`.

:meth:`~McpScenarioServer.tools` returns one Strands tool per MCP tool, with the server's name and input
schema (the policy calls endpoints by name; no ``list_tools``/``call_tool`` meta-tools). A server error
result carrying an HTTP 4xx status (or an MCP input-validation error) is a tool error the policy sees;
a 5xx, a dead server, a protocol error or a timeout raises
:class:`~infra.agents.contract.EnvironmentFailure` (the episode is aborted). :meth:`snapshot` reads the
episode database through the server's ``awm://episode/database`` resource for the verifier.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
import re
import secrets
import shutil
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters, stdio_client
from strands.tools.mcp import MCPClient
from strands.tools.tools import PythonAgentTool
from strands.types.tools import AgentTool, ToolResult

from infra.agents.awm import mcp_server
from infra.agents.awm.release import Scenario
from infra.agents.awm.schemas import compact_tool_spec
from infra.agents.awm.server import SERVER_LIMITS
from infra.agents.contract import EnvironmentFailure
from infra.sandbox import Limits, check_isolation
from infra.sandbox.isolation import SCRATCH_IN_SANDBOX, bwrap_argv, find_bwrap
from infra.sandbox.limits import SANDBOX_ENV
from infra.sandbox.runner import UNSAFE_WARNING

#: Like a dispatch server's limits, with room for the threads of anyio's pool (RLIMIT_NPROC counts them).
MCP_LIMITS = dataclasses.replace(SERVER_LIMITS, max_procs=32)
AWM_IN_SANDBOX = "/opt/rufus-awm"
_PROGRAMS = (Path(mcp_server.__file__), Path(mcp_server.__file__).with_name("sandboxed.py"))
_STATUS = re.compile(r"Status code: (\d{3})\. Response: (.*)", re.S)
REPO_ROOT = Path(mcp_server.__file__).resolve().parents[3]


def launch_parameters(folder: Path, limits: Limits, unsafe_local: bool) -> StdioServerParameters:
    """Return the command that serves the scenario in ``folder/scenario`` over MCP on stdio."""
    if unsafe_local:
        warnings.warn(UNSAFE_WARNING, RuntimeWarning, stacklevel=3)
        args = ["-s", "-B", "-m", "infra.agents.awm.mcp_server", "--scenario-dir", str(folder / "scenario")]
        cfg = limits.runner_config(0, False, str(folder))
        args += ["--workdir", str(folder), "--runner-config", json.dumps(cfg)]
        env = dict(SANDBOX_ENV, PYTHONPATH=str(REPO_ROOT))
        return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(folder))
    check_isolation().require()
    argv = bwrap_argv(find_bwrap() or "bwrap", 0, limits.scratch_mb)
    argv = argv[: argv.index("--")] + ["--perms", "0755", "--dir", AWM_IN_SANDBOX]
    for program in _PROGRAMS:
        argv += ["--ro-bind", str(program), f"{AWM_IN_SANDBOX}/{program.name}"]
    argv += ["--ro-bind", str(folder / "scenario"), f"{AWM_IN_SANDBOX}/scenario"]
    uid = 100_000 + secrets.randbelow(1 << 30)  # a uid no host account or other sandbox uses
    cfg = limits.runner_config(uid, True, SCRATCH_IN_SANDBOX)
    argv += ["--", sys.executable, "-s", "-B", f"{AWM_IN_SANDBOX}/{_PROGRAMS[0].name}"]
    argv += ["--scenario-dir", f"{AWM_IN_SANDBOX}/scenario", "--workdir", SCRATCH_IN_SANDBOX]
    argv += ["--runner-config", json.dumps(cfg)]
    return StdioServerParameters(command=argv[0], args=argv[1:], env={"PATH": SANDBOX_ENV["PATH"]})


class McpScenarioServer:
    """One scenario's server in its own sandbox, holding a fresh database copy; serves one episode."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        unsafe_local: bool = False,
        limits: Limits = MCP_LIMITS,
        call_timeout_s: float = 10.0,
        boot_timeout_s: float = 60.0,
    ) -> None:
        self.scenario, self.call_timeout_s = scenario, call_timeout_s
        self.broken = False
        self.boot_s = 0.0
        self._folder = Path(tempfile.mkdtemp(prefix="rufus-awm-mcp-"))
        self._errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.client: MCPClient | None = None
        try:
            (self._folder / "scenario").mkdir()
            (self._folder / "scenario" / mcp_server.SERVER_FILE).write_text(scenario.full_code, "utf-8")
            (self._folder / "scenario" / mcp_server.DATABASE_FILE).write_bytes(scenario.database())
            params = launch_parameters(self._folder, limits, unsafe_local)
            start = time.monotonic()
            client = MCPClient(
                lambda: stdio_client(params, errlog=self._errlog),
                startup_timeout=max(1, math.ceil(boot_timeout_s)),
            )
            try:
                client.start()
            except Exception as exc:  # noqa: BLE001 - any start failure is the environment's, reported whole
                raise self._failure(f"MCP server did not start ({exc})") from None
            self.client = client
            try:
                listed = client.list_tools_sync()
            except Exception as exc:  # noqa: BLE001
                raise self._failure(f"list_tools failed ({exc})") from None
            self.boot_s = time.monotonic() - start
            self.tool_specs = [dict(t.tool_spec) for t in listed]
        except BaseException:
            self.close()
            raise

    def _failure(self, what: str) -> EnvironmentFailure:
        """Return an ``EnvironmentFailure`` naming the scenario, with the tail of the server's stderr."""
        self.broken = True
        tail = ""
        with contextlib.suppress(OSError, ValueError):
            self._errlog.seek(0)
            tail = self._errlog.read()[-600:].strip()
        return EnvironmentFailure(
            f"AWM scenario {self.scenario.name!r} over MCP: {what}"
            + (f"; server stderr: {tail}" if tail else "")
        )

    def call_tool(self, name: str, arguments: dict[str, Any], tool_use_id: str = "call") -> ToolResult:
        """Run one tool call; return its result (4xx: ``error``); raise ``EnvironmentFailure`` otherwise."""
        if self.client is None or self.broken:
            raise self._failure(f"{name}: the server is no longer usable")
        result = self.client.call_tool_sync(
            tool_use_id, name, arguments, read_timeout_seconds=timedelta(seconds=self.call_timeout_s)
        )
        text = "\n".join(str(c.get("text", "")) for c in result.get("content", []) if "text" in c)
        if "isError" not in result:  # Strands' own error result: the call never got a server answer
            raise self._failure(f"{name}: {text[:300]}")
        if not result["isError"]:
            return {"toolUseId": tool_use_id, "status": "success", "content": [{"text": text}]}
        match = _STATUS.search(text)
        if match and int(match.group(1)) >= 500:
            raise self._failure(f"{name} answered HTTP {match.group(1)}: {match.group(2)[:300]}")
        message = f"HTTP {match.group(1)}: {match.group(2)}" if match else text
        return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": message}]}

    def tools(self) -> list[AgentTool]:
        """Return one Strands tool per MCP tool (same name and input schema), calling :meth:`call_tool`."""

        def bind(name: str) -> Any:
            def run(tool_use: dict[str, Any], **_: Any) -> ToolResult:
                return self.call_tool(name, dict(tool_use.get("input") or {}), tool_use["toolUseId"])

            return run

        specs = [compact_tool_spec(s) for s in self.tool_specs]  # as the dispatch path shows them
        return [PythonAgentTool(str(s["name"]), s, bind(str(s["name"]))) for s in specs]

    def snapshot(self) -> bytes:
        """Return the episode database's bytes (read over MCP from the sandboxed server)."""
        if self.client is None or self.broken:
            raise self._failure("snapshot: the server is no longer usable")
        try:
            result = self.client.read_resource_sync(mcp_server.DATABASE_URI)
            return base64.b64decode(result.contents[0].blob)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - any failure to read the database aborts the episode
            raise self._failure(f"snapshot failed ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        """Stop the server (its sandbox and everything in it) and delete the temp folder."""
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop(None, None, None)
        with contextlib.suppress(OSError):
            self._errlog.close()
        shutil.rmtree(self._folder, ignore_errors=True)
