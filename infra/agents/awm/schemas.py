"""Compact tool schemas for the system prompt: the same arguments, fewer prompt tokens.

FastAPI's OpenAPI output (and fastapi-mcp's tool schemas built from it) spells an optional argument as
``anyOf: [{type: T}, {type: null}]`` with ``default: null`` and repeats each name as a ``title``. The
policy reads every tool schema in its system prompt on every turn (paper §3.5: schemas are registered
there directly), so :func:`compact_tool_spec` drops the titles, folds nullable unions into their type and
drops null defaults. Required lists, types, enums, bounds and descriptions are kept, so a call valid under
the compact schema is valid under the original. A few lines of dict walking: no library does this.
"""

from __future__ import annotations

from typing import Any


def compact_schema(schema: Any) -> Any:
    """Return ``schema`` without ``title`` keys, nullable ``anyOf`` unions folded, null defaults dropped."""
    if isinstance(schema, list):
        return [compact_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    alts = out.get("anyOf")
    if isinstance(alts, list):
        kept = [a for a in alts if not (isinstance(a, dict) and a.get("type") == "null")]
        if len(kept) == 1 and isinstance(kept[0], dict) and len(kept) < len(alts):
            del out["anyOf"]
            out = {**kept[0], **out}
    if "default" in out and out["default"] is None:
        del out["default"]
    out.pop("title", None)
    return {
        k: ({n: compact_schema(v) for n, v in val.items()} if k == "properties" and isinstance(val, dict)
            else compact_schema(val))
        for k, val in out.items()
    }  # fmt: skip


def compact_tool_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Return a Strands tool spec whose input schema is :func:`compact_schema`'d."""
    schema = spec.get("inputSchema", {}).get("json")
    if schema is None:
        return spec
    return {**spec, "inputSchema": {**spec["inputSchema"], "json": compact_schema(schema)}}
