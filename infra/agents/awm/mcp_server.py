"""An AWM scenario server spoken to over MCP on stdio; this program runs *inside* the project sandbox.

Use (the host side, :mod:`infra.agents.awm.mcp_client`, launches it; by hand for trusted code only)::

    python -m infra.agents.awm.mcp_server --scenario-dir DIR [--workdir W] [--runner-config JSON]

``DIR`` holds the scenario's generated server (``server.py``) and its pristine database
(``pristine.db``). The program reads both, applies the sandbox's rlimits and drops to the unprivileged
uid of ``--runner-config`` (the same config and code path as the sandbox's runners, see
:mod:`infra.sandbox.harness`), copies the database to ``W/work.db``, boots the server on it (the
``create_engine(`` rewrite of :mod:`.sandboxed`, the app's lifespan started) and serves MCP on stdin and
stdout until stdin closes. The MCP layer is ``fastapi-mcp``'s ``FastApiMCP``: one tool per operation,
named by its ``operationId``, whose calls reach the app through ``httpx.ASGITransport`` (in-process, no
port, no network inside the sandbox). An HTTP status >= 400 is an MCP error result whose text carries
``Status code: N``; the host turns 4xx into tool errors and 5xx into an aborted episode.

One resource, ``awm://episode/database`` (never a tool, so the model cannot see it), returns the
episode database's bytes for the verifier. Each process serves one episode: a fresh database is a
fresh process. File descriptor 1 is moved aside for MCP and fd 1 then points at stderr, so a server
that prints cannot corrupt the protocol stream.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from io import TextIOWrapper
from pathlib import Path
from typing import Any

try:  # on the host (unsafe_local) or under ``python -m``
    from infra.agents.awm.sandboxed import rewrite_server_code
    from infra.sandbox.harness import _drop_privileges
except ImportError:  # in the sandbox: this file, sandboxed.py and the harness are bound read-only
    sys.path.append("/opt/rufus-sandbox")
    from harness import _drop_privileges  # type: ignore[no-redef]
    from sandboxed import rewrite_server_code  # type: ignore[no-redef]

DATABASE_URI = "awm://episode/database"
SERVER_FILE, DATABASE_FILE = "server.py", "pristine.db"


def load_app(code: str, db_path: str) -> tuple[Any, dict[str, Any]]:
    """Execute the server code on ``db_path``; return (its FastAPI ``app``, its namespace)."""
    namespace: dict[str, Any] = {"__name__": "awm_server"}
    exec(compile(rewrite_server_code(code, db_path), "<awm-server>", "exec"), namespace)  # noqa: S102
    app = namespace.get("app")
    if app is None or not hasattr(app, "openapi"):
        raise RuntimeError("the server code defines no FastAPI 'app'")
    return app, namespace


def database_bytes(namespace: dict[str, Any], db_path: str) -> bytes:
    """Return the episode database's bytes, the server's connections released first."""
    for value in namespace.values():
        if type(value).__name__ == "Engine" and hasattr(value, "dispose"):
            value.dispose()
    return Path(db_path).read_bytes()


async def serve(code: str, pristine: bytes, workdir: str, mcp_out: TextIOWrapper) -> None:
    """Boot the scenario server on a fresh database copy and serve MCP until the client hangs up."""
    import anyio
    import mcp.types as types
    from fastapi_mcp import FastApiMCP
    from mcp.server.lowlevel.helper_types import ReadResourceContents
    from mcp.server.stdio import stdio_server

    db_path = os.path.join(workdir, "work.db")
    Path(db_path).write_bytes(pristine)
    app, namespace = load_app(code, db_path)
    name = str(getattr(app, "title", "") or "awm")
    mcp = FastApiMCP(app, name=name)
    server = mcp.server

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [types.Resource(uri=DATABASE_URI, name="episode database", mimeType="application/x-sqlite3")]

    @server.read_resource()
    async def read_resource(uri: Any) -> list[ReadResourceContents]:
        if str(uri) != DATABASE_URI:
            raise ValueError(f"unknown resource {uri}")
        data = database_bytes(namespace, db_path)
        return [ReadResourceContents(content=data, mime_type="application/x-sqlite3")]

    async with app.router.lifespan_context(app):
        async with stdio_server(stdout=anyio.wrap_file(mcp_out)) as (read, write):
            await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    """CLI: read the scenario, drop privileges, serve MCP on stdio."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--scenario-dir", required=True, type=Path, help=f"holds {SERVER_FILE} and {DATABASE_FILE}"
    )
    ap.add_argument("--workdir", default=".", help="writable folder for the episode database")
    ap.add_argument("--runner-config", default="", help="JSON of Limits.runner_config: rlimits and uid")
    args = ap.parse_args(argv)
    code = (args.scenario_dir / SERVER_FILE).read_text(encoding="utf-8")
    pristine = (args.scenario_dir / DATABASE_FILE).read_bytes()
    # Read as root above; everything below (the generated server included) runs unprivileged.
    if args.runner_config:
        _drop_privileges(json.loads(args.runner_config))
    workdir = os.path.join(args.workdir, "awm")
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    os.chdir(workdir)
    mcp_out = TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8")
    os.dup2(2, 1)  # anything the server prints goes to stderr, never into the MCP stream
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # fastapi-mcp logs a traceback for every 4xx answer; the status reaches the host in the result.
    logging.getLogger("fastapi_mcp").setLevel(logging.CRITICAL)
    import warnings

    warnings.filterwarnings("ignore")
    import anyio

    anyio.run(serve, code, pristine, workdir, mcp_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
