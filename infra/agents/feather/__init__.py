"""Feather, stage 08's agent harness: file tools with read-before-write checks, bash with explicit
background tasks, a todo list kept across compaction, and a ~50-token system prompt.

Use (one episode)::

    rt = FeatherRuntime(spares=2)                 # once per process: the harbor sandbox plus Feather's binds
    session = rt.start()                          # a fresh sandbox, empty /app
    upload(session, {"brief.md": text, "data/q3.xlsx": xlsx_bytes})   # one archive, one call
    harness = FeatherHarness(session)             # FeatherOptions for the budgets
    tools = harness.tools()                       # Strands tools for the agent loop; SYSTEM_PROMPT as system
    ...                                           # harness.todo.compaction_note() after a compaction
    session.close()

Modules: :mod:`.files` (the file tools, run inside the sandbox), :mod:`.shell` (runtime, upload, bash and
background tasks), :mod:`.todo`, :mod:`.tools` (specs, dispatch, the system prompt).
"""

from infra.agents.feather.files import VISION, PolicyError
from infra.agents.feather.shell import FeatherRuntime, Shell, helper_call, pack, upload
from infra.agents.feather.todo import TodoList
from infra.agents.feather.tools import (
    SYSTEM_PROMPT,
    TOOLS,
    FeatherHarness,
    FeatherOptions,
    FileTools,
    coerce_args,
    tool_specs,
)

__all__ = [
    "SYSTEM_PROMPT",
    "TOOLS",
    "VISION",
    "FeatherHarness",
    "FeatherOptions",
    "FeatherRuntime",
    "FileTools",
    "PolicyError",
    "Shell",
    "TodoList",
    "coerce_args",
    "helper_call",
    "pack",
    "tool_specs",
    "upload",
]
