"""Shared piece of the local chat-completions servers that stand in for remote teacher/judge endpoints.

None is reachable here, so tests run ``http.server`` handlers on 127.0.0.1 that speak the wire format; the
JSON response writer is the one the product's local generate server uses.
"""

from infra.agents.local_server import send_json

__all__ = ["send_json"]
