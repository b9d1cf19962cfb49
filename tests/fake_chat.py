"""Shared piece of the local chat-completions servers that stand in for remote teacher/judge endpoints.

None is reachable here, so tests run ``http.server`` handlers on 127.0.0.1 that speak the wire format.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, obj: Any, status: int = 200) -> None:
    """Write ``obj`` as a JSON response with its length, as an OpenAI-compatible server does."""
    data = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
