"""OpenAI-compatible teacher client against a local HTTP server on 127.0.0.1.

The server is a boundary double for a remote teacher/judge endpoint (none is reachable here): it speaks
the chat-completions wire format and can be told to fail, so retries and errors are exercised for real
over HTTP.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from fake_chat import send_json

from data_prep.teacher import ChatClient, TeacherError


class _Handler(BaseHTTPRequestHandler):
    plan: list[int] = []
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        status = _Handler.plan.pop(0) if _Handler.plan else 200
        if status != 200:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"error": "busy"}')
            return
        choices = [
            {"message": {"content": f"answer {i}", "reasoning_content": "thinking"}} for i in range(body["n"])
        ]
        send_json(self, {"choices": choices})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.plan, _Handler.seen = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_chat_returns_choices_and_retries_server_errors(server):
    _Handler.plan = [503, 429]
    client = ChatClient(server, "teacher", api_key="k", backoff=0.01)
    out = client.chat([{"role": "user", "content": "hi"}], n=2, max_tokens=16)
    assert out == ["<think>thinking</think>answer 0", "<think>thinking</think>answer 1"]
    assert len(_Handler.seen) == 3 and _Handler.seen[-1]["path"] == "/v1/chat/completions"
    assert _Handler.seen[-1]["body"]["max_tokens"] == 16 and _Handler.seen[-1]["auth"] == "Bearer k"
    gen = client.as_generate(include_reasoning=False)
    assert gen([[{"role": "user", "content": "a"}]], 1) == [["answer 0"]]


def test_client_errors_are_not_retried_and_unreachable_gives_up(server):
    _Handler.plan = [400]
    with pytest.raises(TeacherError, match="HTTP 400"):
        ChatClient(server, "m", backoff=0.01).chat([{"role": "user", "content": "x"}])
    assert len(_Handler.seen) == 1
    with pytest.raises(TeacherError, match="gave up after 2 attempts"):
        ChatClient("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.01, timeout=2).chat([])
