"""Feather's tool set for the agent loop: JSON-schema specs, argument checks, dispatch, the system prompt.

Ten Strands tools over one episode's sandbox session: ``read``, ``edit``, ``write``, ``grep``, ``glob``
(:mod:`.files`, run in the sandbox; the host keeps each file's sha256 from its last read or change and
sends them with ``edit``/``write``), ``bash``, ``task_output``, ``task_stop``, ``task_list``
(:mod:`.shell`) and ``todo`` (:mod:`.todo`). Descriptions say what a tool does and guarantees, not when to
use it, and the system prompt is three sentences (about 50 tokens), as the paper trains.

Compact specs (``FeatherOptions.compact``, for a small policy's context, ours: the paper trains one harness
at full size): each tool with the one-line description of :data:`COMPACT` and only its required
arguments; the rules are the same, and an argument the spec does not show is refused as unknown (so
compact ``bash`` runs in the foreground only).

Failure classes (the recipe's rule): a mistake of the model (bad arguments, a path outside the workspace,
a stale or missing read, no unique match, an unknown task id) is returned to the model as an ``error``
tool result; ``EnvironmentFailure`` (a dead sandbox, a helper that broke) propagates, and the tool layer
(:mod:`infra.agents.tools`) aborts the episode. Calls of one turn run one at a time in the model's order
(the loop's ``SequentialToolExecutor``; :meth:`FeatherHarness.call` also holds a lock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infra.agents.feather.files import PolicyError
from infra.agents.feather.shell import Shell, _runtime, helper_call
from infra.agents.feather.todo import STATUSES, TodoList
from infra.agents.harbor.runtime import Session

SYSTEM_PROMPT = (
    "You work in a Linux sandbox through the tools provided; the workspace is /app. Never reveal, log, "
    "send or write down secrets or credentials. Save requested deliverables at the paths the user or the "
    "task names."
)

_S, _I, _B = {"type": "string"}, {"type": "integer", "minimum": 1}, {"type": "boolean"}
_CHECKLIST_ITEM = {
    "type": "object",
    "properties": {"content": _S, "status": {"type": "string", "enum": list(STATUSES)}},
    "required": ["content", "status"],
    "additionalProperties": False,
}
#: name -> (description, properties with their descriptions, required names)
TOOLS: dict[str, tuple[str, dict[str, dict], list[str]]] = {
    "read": ("Read a text file with line numbers. `offset` (first line, from 1) and `limit` (number of "
             "lines) bound the returned range. A successful read records the file revision that edit and "
             "write require.",
             {"file_path": _S, "offset": _I, "limit": _I}, ["file_path"]),
    "edit": ("Replace `old_string` with `new_string` in a file. `old_string` must occur exactly once, unless "
             "`replace_all` is true. Refused if the file was not read or has changed since it was read.",
             {"file_path": _S, "old_string": _S, "new_string": _S, "replace_all": _B},
             ["file_path", "old_string", "new_string"]),
    "write": ("Write `content` to a file, creating it and its folders if needed. Overwriting an existing "
              "file is refused if it was not read or has changed since it was read.",
              {"file_path": _S, "content": _S}, ["file_path", "content"]),
    "grep": ("Search file contents line by line with a regular expression. Returns `path:line: text` for "
             "at most `limit` matches and whether the results were truncated. `path` is a file or folder to "
             "search (default: the workspace); `glob` filters file names.",
             {"pattern": _S, "path": _S, "glob": _S, "ignore_case": _B, "limit": _I}, ["pattern"]),
    "glob": ("List files whose path, relative to `path` (default: the workspace), matches a glob pattern "
             "such as `**/*.md`. Returns at most `limit` sorted paths and whether the list was truncated.",
             {"pattern": _S, "path": _S, "limit": _I}, ["pattern"]),
    "bash": ("Run a command in a new bash shell in the workspace; the working directory and environment "
             "variables do not carry over between calls. `timeout` is in seconds. With `run_in_background` "
             "the command keeps running and a task id is returned.",
             {"command": _S, "timeout": {"type": "number"}, "run_in_background": _B}, ["command"]),
    "task_output": ("Return the output a background task has produced since the last call, and its "
                    "status.", {"task_id": _S}, ["task_id"]),
    "task_stop": ("Stop a background task and the processes it started.", {"task_id": _S}, ["task_id"]),
    "task_list": ("List the background tasks with their status and command.", {}, []),
    "todo": ("Replace the todo list with `todos`, items with `content` and `status` (pending, in_progress or "
             "completed). The list is kept when the context is compressed.",
             {"todos": {"type": "array", "items": _CHECKLIST_ITEM}}, ["todos"]),
}  # fmt: skip
#: name -> the compact spec's description (see the module docstring)
COMPACT: dict[str, str] = {
    "read": "Read a text file with line numbers.",
    "edit": "Replace the one occurrence of `old_string` with `new_string` in a file read before.",
    "write": "Write `content` to a file; overwriting a file needs a read of it first.",
    "grep": "Search file contents with a regular expression.",
    "glob": "List files matching a glob pattern such as `**/*.md`.",
    "bash": "Run a command in a new bash shell in /app.",
    "task_output": "Return a background task's new output and its status.",
    "task_stop": "Stop a background task.",
    "task_list": "List the background tasks.",
    "todo": "Replace the todo list with `todos`.",
}


def _shown(name: str, compact: bool) -> tuple[str, dict[str, dict], list[str]]:
    desc, props, required = TOOLS[name]
    if not compact:
        return desc, props, required
    return COMPACT[name], {k: props[k] for k in required}, required


def tool_specs(compact: bool = False) -> list[dict[str, Any]]:
    """The Strands ``ToolSpec`` of each tool (``inputSchema.json`` a JSON schema), in :data:`TOOLS` order;
    ``compact``: the compact specs of the module docstring."""
    specs = []
    for name in TOOLS:
        desc, props, required = _shown(name, compact)
        schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        specs.append({"name": name, "description": desc, "inputSchema": {"json": schema}})
    return specs


def _coerce(key: str, kind: str, value: Any) -> Any:
    """``value`` as JSON-schema ``kind`` (the GLM parser JSON-decodes argument text: ``42`` for "42")."""
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if kind in ("integer", "number"):
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                pass
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if kind == "number":
                return float(value)
            if float(value).is_integer() and value >= 1:
                return int(value)
        raise PolicyError(f"{key} must be a{' positive integer' if kind == 'integer' else ' number'}")
    if kind == "boolean":
        if isinstance(value, bool) or value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise PolicyError(f"{key} must be true or false")
    if isinstance(value, str):  # an array given as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, list):
        raise PolicyError(f"{key} must be a list")
    return value


def coerce_args(name: str, arguments: Any, compact: bool = False) -> dict[str, Any]:
    """The arguments of a ``name`` call checked against its (``compact``) schema; ``PolicyError`` saying
    what is wrong."""
    if name not in TOOLS:
        raise PolicyError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
    _, props, required = _shown(name, compact)
    if not isinstance(arguments, dict):
        raise PolicyError(f"{name} takes an object of arguments")
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        raise PolicyError(f"{name} has no argument {', '.join(unknown)}; its arguments: {', '.join(props)}")
    missing = [key for key in required if arguments.get(key) is None]
    if missing:
        raise PolicyError(f"{name} needs {', '.join(missing)}")
    return {k: _coerce(k, props[k]["type"], v) for k, v in arguments.items() if v is not None}


class FeatherOptions(BaseModel):
    """Budgets of the Feather tools (an environment's spec options)."""

    model_config = ConfigDict(extra="forbid")

    command_timeout_s: float = Field(default=60.0, gt=0, description="bash timeout when the call gives none.")
    max_command_timeout_s: float = Field(default=600.0, gt=0, description="Cap on a bash call's timeout.")
    op_timeout_s: float = Field(default=30.0, gt=0, description="Time limit of one file-tool call.")
    result_bytes: int = Field(default=24000, ge=1024, description="Text budget of one tool result.")
    read_limit: int = Field(default=2000, ge=1, description="Lines a read returns when it gives no limit.")
    search_limit: int = Field(default=100, ge=1, description="grep/glob results when the call gives none.")
    max_search_limit: int = Field(default=1000, ge=1, description="Cap on a grep/glob limit.")
    compact: bool = Field(default=False, description="Compact specs: short descriptions, required arguments.")


class FileTools:
    """The host side of the file tools: requests to :mod:`.files` and the per-path sha256 records."""

    def __init__(self, call: Callable[[dict[str, Any]], dict[str, Any]], options: FeatherOptions) -> None:
        self.call, self.options = call, options
        self.records: dict[str, str] = {}  # real path in the sandbox -> sha256 at the last read or change

    def run(self, op: str, args: dict[str, Any]) -> str:
        """Run one file tool; raise ``PolicyError`` with the helper's refusal."""
        args = dict(args)
        if op == "read":
            args["limit"] = args.get("limit", self.options.read_limit)
        elif op in ("grep", "glob"):
            args["limit"] = min(args.get("limit", self.options.search_limit), self.options.max_search_limit)
        request = {"op": op, "args": args, "max_bytes": self.options.result_bytes}
        if op in ("edit", "write"):
            request["records"] = self.records
        reply = self.call(request)
        if not reply.get("ok"):
            raise PolicyError(str(reply.get("error") or f"{op} failed"))
        if reply.get("sha256"):
            self.records[reply["path"]] = reply["sha256"]
        return str(reply["text"])


class FeatherHarness:
    """The Feather tools of one episode's sandbox session (a :class:`.shell.FeatherRuntime` session)."""

    def __init__(self, session: Session, options: FeatherOptions | None = None) -> None:
        self.options = options = options or FeatherOptions()
        rt = _runtime(session)
        if options.result_bytes + 4096 > rt.output_bytes:
            raise ValueError(
                f"feather result_bytes={options.result_bytes} needs a runtime with output_bytes >= "
                f"{options.result_bytes + 4096} (has {rt.output_bytes})"
            )
        self.session = session
        self.files = FileTools(lambda req: helper_call(session, req, options.op_timeout_s), options)
        self.shell = Shell(
            session,
            timeout_s=options.command_timeout_s,
            max_timeout_s=options.max_command_timeout_s,
            result_bytes=options.result_bytes,
            op_timeout_s=options.op_timeout_s,
        )
        self.todo = TodoList()
        self.executed: list[str] = []  # tool names in execution order
        self._lock = threading.Lock()

    @property
    def records(self) -> dict[str, str]:
        """sha256 of each file at its last read, edit or write (real sandbox path)."""
        return self.files.records

    def _dispatch(self, name: str, args: dict[str, Any]) -> str:
        if name in ("read", "edit", "write", "grep", "glob"):
            return self.files.run(name, args)
        if name == "bash":
            return self.shell.bash(args["command"], args.get("timeout"), args.get("run_in_background", False))
        if name == "task_output":
            return self.shell.task_output(args["task_id"])
        if name == "task_stop":
            return self.shell.task_stop(args["task_id"])
        if name == "task_list":
            return self.shell.task_list()
        return self.todo.replace(args["todos"])

    def call(self, name: str, arguments: Any) -> tuple[str, bool]:
        """Run one tool call; return ``(text, is_error)``. ``EnvironmentFailure`` propagates (abort)."""
        with self._lock:
            self.executed.append(name)
            try:
                return self._dispatch(name, coerce_args(name, arguments, self.options.compact)), False
            except PolicyError as exc:
                return f"Error: {exc}", True

    def tool_result(self, tool_use: dict[str, Any]) -> dict[str, Any]:
        """The Strands ``ToolResult`` of ``tool_use``."""
        text, failed = self.call(str(tool_use.get("name")), tool_use.get("input") or {})
        status = "error" if failed else "success"
        return {"toolUseId": tool_use["toolUseId"], "status": status, "content": [{"text": text}]}

    def tools(self, names: list[str] | None = None) -> list[Any]:
        """Strands tools of ``names`` (default all, in :data:`TOOLS` order) bound to this harness, with the
        compact specs when the options say so."""
        from strands.tools.tools import PythonAgentTool

        specs = [s for s in tool_specs(self.options.compact) if names is None or s["name"] in names]
        run = self.tool_result
        return [PythonAgentTool(s["name"], s, lambda tool_use, **_: run(tool_use)) for s in specs]
