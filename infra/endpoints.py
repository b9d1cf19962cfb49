"""A small OpenAI-compatible chat client for teacher, policy and judge endpoints.

Shared by data preparation (teacher solvability screens, IF synthesis; ``data_prep.teacher`` re-exports
it) and rewards (the IF RL judge), so neither has to reach into the other. Standard library only
(``urllib``) so it works in every environment the data prep and the reward workers run in. Retries
connection errors, timeouts, 429 and 5xx with exponential backoff; other HTTP errors fail at once with
the server's message. ``as_generate()`` adapts it to the ``generate(prompts, n)`` callable used by
:mod:`data_prep.filters`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class TeacherError(RuntimeError):
    """The endpoint could not produce a completion (after retries where retrying makes sense)."""


class ChatClient:
    """POSTs to ``{base_url}/chat/completions`` and returns the choices' text."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff: float = 1.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = json.dumps(payload).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:300]
                last = f"HTTP {exc.code}: {detail}"
                if exc.code not in _RETRY_STATUS:
                    raise TeacherError(f"{self.url}: {last}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except json.JSONDecodeError as exc:
                last = f"invalid JSON response: {exc.msg}"
        raise TeacherError(f"{self.url}: gave up after {self.max_retries + 1} attempts; last error: {last}")

    def chat(
        self,
        messages: list[dict],
        *,
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int | None = None,
        include_reasoning: bool = True,
        **extra: Any,
    ) -> list[str]:
        """Return ``n`` completions; reasoning is prefixed in ``<think>`` tags if asked."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "n": n,
            "temperature": temperature,
        }
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        payload.update(extra)
        data = self._post(payload)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise TeacherError(f"{self.url}: response has no choices: {str(data)[:200]}")
        out = []
        for choice in choices:
            msg = choice.get("message") or {}
            text = msg.get("content") or ""
            reasoning = msg.get("reasoning_content")
            out.append(f"<think>{reasoning}</think>{text}" if include_reasoning and reasoning else text)
        return out

    def as_generate(self, **kwargs: Any):
        """Return ``generate(prompts, n) -> list[list[str]]`` for :mod:`data_prep.filters`."""

        def generate(prompts: list[list[dict]], n: int) -> list[list[str]]:
            return [self.chat(p, n=n, **kwargs) for p in prompts]

        return generate
