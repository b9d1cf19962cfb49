"""The code that runs *inside* the sandbox for AWM: boot a generated server, dispatch tool calls, verify.

The host sends this file's source to a sandbox runner (``op: load``) and then calls its functions
(``op: call``); it imports only the standard library at load time, the server's own imports (FastAPI,
SQLAlchemy) happen in :func:`boot`. Nothing here runs in the trainer's process.

* :func:`boot` rewrites the server's ``create_engine(`` line to the episode database (as the release's
  own launcher does), executes the server module and returns one tool spec per endpoint, derived from
  the app's OpenAPI document (what ``fastapi-mcp`` would list);
* :func:`call` sends one tool call straight into the ASGI app on this process's own event loop: no
  HTTP, port or uvicorn, so a call costs the endpoint's own work;
* :func:`reset` gives the next episode a fresh copy of the pristine database (engines disposed first);
* :func:`verify` runs a task's ``verify_task_completion(initial_db_path, final_db_path, final_answer)``
  on read-only (0444) copies, with the namespace the release's runner gives it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import sqlite3
from typing import Any
from urllib.parse import quote, urlencode

_METHODS = ("get", "post", "put", "patch", "delete")
_STATE: dict[str, Any] = {}


def rewrite_server_code(code: str, db_path: str) -> str:
    """Point every ``create_engine(`` line at ``db_path`` (rest of the line replaced, as AWM does)."""
    lines = []
    for line in code.split("\n"):
        if "create_engine(" in line:
            left = line.split("create_engine(")[0]
            line = f"{left}create_engine('sqlite:///{db_path}', connect_args={{'check_same_thread': False}})"
        lines.append(line)
    return "\n".join(lines)


def _resolve(schema: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """Inline ``$ref``s of an OpenAPI schema (depth-capped against self-referencing models)."""
    if depth > 8:
        return {}
    if isinstance(schema, list):
        return [_resolve(s, components, depth + 1) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        return _resolve(components.get(ref.rsplit("/", 1)[-1], {}), components, depth + 1)
    return {k: _resolve(v, components, depth + 1) for k, v in schema.items()}


def openapi_tools(openapi: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Return (tool specs, routes): one tool per operation, arguments = path + query + JSON body fields."""
    components = openapi.get("components", {}).get("schemas", {})
    specs, routes = [], {}
    for path, item in openapi.get("paths", {}).items():
        for method, op in item.items():
            if method not in _METHODS or not op.get("operationId"):
                continue
            props: dict[str, Any] = {}
            required: list[str] = []
            where: dict[str, str] = {}
            for p in op.get("parameters", []):
                if p.get("in") not in ("path", "query"):
                    continue
                schema = dict(_resolve(p.get("schema", {}), components))
                if p.get("description"):
                    schema["description"] = p["description"]
                props[p["name"]], where[p["name"]] = schema, p["in"]
                if p.get("required"):
                    required.append(p["name"])
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            body = _resolve(content.get("schema"), components) if content else None
            raw_body = isinstance(body, dict) and "properties" not in body
            if raw_body:
                props["body"], where["body"] = body, "raw"
                required.append("body")
            elif isinstance(body, dict):
                for key, schema in body.get("properties", {}).items():
                    props[key], where[key] = schema, "body"
                required += [k for k in body.get("required", []) if k in props]
            name = str(op["operationId"])
            text = "\n\n".join(t for t in (op.get("summary"), op.get("description")) if t) or name
            schema = {"type": "object", "properties": props, "required": sorted(set(required))}
            specs.append({"name": name, "description": text, "inputSchema": {"json": schema}})
            routes[name] = (method.upper(), path, where)
    return specs, routes


def boot(full_code: str, pristine: bytes) -> list[dict[str, Any]]:
    """Execute the scenario's server on ``work.db`` (a copy of ``pristine``); return its tool specs."""
    import warnings

    warnings.filterwarnings("ignore")
    db_path = os.path.abspath("work.db")
    with open(db_path, "wb") as fh:
        fh.write(pristine)
    namespace: dict[str, Any] = {"__name__": "awm_server"}
    exec(compile(rewrite_server_code(full_code, db_path), "<awm-server>", "exec"), namespace)  # noqa: S102
    app = namespace.get("app")
    if app is None or not callable(app):
        raise RuntimeError("the server code defines no ASGI 'app'")
    specs, routes = openapi_tools(app.openapi())
    loop = asyncio.new_event_loop()
    _STATE.update(app=app, ns=namespace, routes=routes, db=db_path, pristine=pristine, loop=loop)
    _start_lifespan(app, loop)
    return specs


def _start_lifespan(app: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Run the app's startup handlers once (the task stays parked until the process ends)."""
    inbox: asyncio.Queue = asyncio.Queue()
    started = loop.create_future()

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    async def send(message: dict[str, Any]) -> None:
        if message["type"].startswith("lifespan.startup") and not started.done():
            started.set_result(message)

    async def run() -> None:
        try:
            await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
        except Exception:  # noqa: BLE001 - apps without lifespan support raise; there is nothing to start
            pass
        if not started.done():
            started.set_result({"type": "lifespan.startup.complete"})

    inbox.put_nowait({"type": "lifespan.startup"})
    _STATE["lifespan"] = loop.create_task(run())
    message = loop.run_until_complete(started)
    if message["type"] == "lifespan.startup.failed":
        raise RuntimeError(f"server startup failed: {message.get('message', '')}")


def _engines() -> list[Any]:
    return [v for v in _STATE["ns"].values() if type(v).__name__ == "Engine" and hasattr(v, "dispose")]


def reset() -> None:
    """Give the next episode a fresh copy of the pristine database."""
    for engine in _engines():
        engine.dispose()
    with open(_STATE["db"], "wb") as fh:
        fh.write(_STATE["pristine"])


def snapshot() -> bytes:
    """Return the episode database's current bytes (connections released first)."""
    for engine in _engines():
        engine.dispose()
    with open(_STATE["db"], "rb") as fh:
        return fh.read()


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def call(name: str, arguments_json: str) -> dict[str, Any]:
    """Run one tool call (arguments as JSON text) through the ASGI app; return ``{status, body}``."""
    arguments = json.loads(arguments_json)
    if not isinstance(arguments, dict):
        return {"status": 422, "body": f"arguments of tool {name!r} must be a JSON object"}
    route = _STATE["routes"].get(name)
    if route is None:
        return {"status": 404, "body": f"unknown tool {name!r}"}
    method, path, where = route
    unknown = sorted(set(arguments) - set(where))
    if unknown:
        return {"status": 422, "body": f"unknown argument(s) {unknown} for tool {name!r}"}
    query: list[tuple[str, str]] = []
    body: Any = {}
    for key, value in arguments.items():
        kind = where[key]
        if kind == "path":
            path = path.replace("{" + key + "}", quote(_text(value), safe=""))
        elif kind == "query" and value is not None:
            values = value if isinstance(value, list) else [value]
            query += [(key, _text(v)) for v in values]
        elif kind == "raw":
            body = value
        elif kind == "body":
            body[key] = value
    if re.search(r"\{[^}]+\}", path):
        return {"status": 422, "body": f"missing path argument(s) for tool {name!r}"}
    payload = json.dumps(body).encode() if method in ("POST", "PUT", "PATCH") or body else b""
    return _STATE["loop"].run_until_complete(_asgi(method, path, urlencode(query), payload))


async def _asgi(method: str, path: str, query: str, payload: bytes) -> dict[str, Any]:
    headers = [(b"host", b"awm"), (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(payload)).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("awm", 80),
        "state": {},
    }
    sent = False
    status, chunks = 500, []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await _STATE["app"](scope, receive, send)
    except Exception as exc:  # noqa: BLE001 - an unhandled server error is an HTTP 500, as over the wire
        return {"status": 500, "body": f"{type(exc).__name__}: {exc}"[:2000]}
    return {"status": status, "body": b"".join(chunks).decode("utf-8", errors="replace")}


def _verifier_function(namespace: dict[str, Any]) -> Any:
    fn = namespace.get("verify_task_completion")
    if callable(fn):
        return fn
    for key, value in namespace.items():
        if key.startswith("verify_") and callable(value):
            return value
    raise NameError("the verifier code defines no verify_task_completion")


def verify(code: str, initial: bytes, final: bytes, final_answer: str) -> dict[str, Any]:
    """Run the verifier on read-only copies of both databases; return ``{"result": ...}``."""
    paths = {}
    for label, data in (("initial", initial), ("final", final)):
        paths[label] = os.path.abspath(f"{label}.db")
        with open(paths[label], "wb") as fh:
            fh.write(data)
        os.chmod(paths[label], 0o444)
    namespace = {"sqlite3": sqlite3, "json": json, "os": os, "re": re, "__builtins__": __builtins__}
    exec(compile(code, "<verifier>", "exec"), namespace)  # noqa: S102
    fn = _verifier_function(namespace)
    params = inspect.signature(fn).parameters
    values = {
        "initial_db_path": paths["initial"],
        "final_db_path": paths["final"],
        "final_answer": final_answer or "",
    }
    kwargs = {k: v for k, v in values.items() if k in params}
    result = fn(**kwargs) if kwargs else fn(*list(values.values())[: len(params)])
    if isinstance(result, dict):
        return {"result": str(result.get("result")), "raw": json.dumps(result, default=str)[:500]}
    return {"result": str(result), "raw": repr(result)[:500]}
