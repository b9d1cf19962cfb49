"""HTTP clients of the evaluation backends: Serper (Google search) and Jina Reader (page → Markdown).

The paper's standardized search harness (App. E): Serper with up to 10 organic results per query at
``gl=us, hl=en``; Jina Reader returning Markdown truncated to 95K tokens. Both use ``httpx`` with
timeouts, retries with exponential backoff, and typed errors that say whose fault a failure is:

* :class:`SearchUnavailable` (and :class:`SearchTimeout`, :class:`SearchAuthError`) subclass
  :class:`~infra.agents.contract.EnvironmentFailure`: the API could not be used (unreachable, rate-limited
  or failing after retries, the key rejected). Raised out of a tool, it aborts the episode; the sample
  is dropped, never scored 0.
* :class:`PageFetchError`: Jina answered but the *page* could not be read (the site refused, timed out
  or does not exist). The tool returns it as an error observation the agent can recover from; the paper
  scores such trajectories normally.

Retried: connection errors, timeouts (Serper) and HTTP 408/429/5xx. For Jina a read timeout is the
page's slowness (a page error, not retried) while a connect failure is Jina's; HTTP 500 and other 4xx
from Jina describe the page, 429/502/503/504 the service. Base URLs are configurable so tests run the
clients against a loopback double of each API.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from infra.agents.contract import EnvironmentFailure
from infra.agents.search.results import SearchResult
from infra.agents.search.text_budget import clip_tokens

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_AUTH_STATUS = frozenset({401, 402, 403})


class SearchUnavailable(EnvironmentFailure):
    """A search or reader API could not be used: infrastructure failure, the episode aborts."""


class SearchTimeout(SearchUnavailable):
    """The API did not answer within its timeout on any attempt."""


class SearchAuthError(SearchUnavailable):
    """The API rejected the key (or has no credit left); the message names the key's variable."""


class PageFetchError(RuntimeError):
    """The reader answered, but this page could not be read: a tool error the agent recovers from."""


class ApiConfig(BaseModel):
    """Connection settings shared by the two clients."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="API root; a loopback double's address in tests.")
    api_key_env: str = Field(description="Environment variable holding the API key.")
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(default=3, ge=0, description="Retries of a retryable failure.")
    backoff_s: float = Field(default=1.0, ge=0, description="First retry delay; doubles each retry.")


class SerperConfig(ApiConfig):
    """Google search through Serper (paper App. E: 10 organic results, gl=us, hl=en)."""

    base_url: str = "https://google.serper.dev"
    api_key_env: str = "SERPER_API_KEY"
    timeout_s: float = Field(default=15.0, gt=0)
    num: int = Field(default=10, ge=1, le=100, description="Organic results asked for.")
    gl: str = "us"
    hl: str = "en"


class JinaConfig(ApiConfig):
    """Jina Reader (paper App. E: Markdown, truncated to 95K tokens); the key is optional (lower rate)."""

    base_url: str = "https://r.jina.ai"
    api_key_env: str = "JINA_API_KEY"
    timeout_s: float = Field(default=60.0, gt=0)
    max_tokens: int = Field(default=95_000, ge=1, description="Pages are truncated to this many tokens.")


class _ApiClient:
    """Retry loop and error typing over one ``httpx.Client``; subclasses say what a status means."""

    name = "api"
    key_required = True

    def __init__(self, config: ApiConfig, api_key: str | None = None) -> None:
        self.config = config
        self.api_key = api_key if api_key is not None else os.environ.get(config.api_key_env)
        if self.key_required and not self.api_key:
            raise SearchAuthError(f"{self.name}: no API key; set {config.api_key_env}")
        self.http = httpx.Client(timeout=config.timeout_s, follow_redirects=True)

    def _request(
        self, method: str, url: str, *, page_timeouts: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """Send with retries; return the first non-retryable response. Raises the typed errors above."""
        last, timed_out = "", False
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                time.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.http.request(method, url, **kwargs)
            except httpx.ReadTimeout as exc:
                if page_timeouts:
                    raise PageFetchError(f"timed out after {self.config.timeout_s:g}s") from exc
                last, timed_out = f"timed out after {self.config.timeout_s:g}s", True
                continue
            except httpx.TimeoutException:
                last, timed_out = f"timed out after {self.config.timeout_s:g}s", True
                continue
            except httpx.TransportError as exc:
                last, timed_out = f"{type(exc).__name__}: {exc}", False
                continue
            if response.status_code in _AUTH_STATUS:
                raise SearchAuthError(
                    f"{self.name}: HTTP {response.status_code}: the key in {self.config.api_key_env} was "
                    f"rejected or has no credit: {_detail(response)}"
                )
            if response.status_code not in _RETRY_STATUS:
                return response
            last, timed_out = f"HTTP {response.status_code}: {_detail(response)}", False
            if response.status_code == 500 and attempt == self.config.max_retries:
                return response  # the subclass decides whose fault a persistent 500 is
        error = SearchTimeout if timed_out else SearchUnavailable
        raise error(
            f"{self.name} ({url}): gave up after {self.config.max_retries + 1} attempts; last: {last}"
        )

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def __enter__(self) -> _ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _detail(response: httpx.Response) -> str:
    """Return the error message of an API response (its JSON ``message`` when there is one), short."""
    try:
        data = response.json()
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return data["message"][:300]
    except ValueError:
        pass
    return response.text[:300].strip() or "(empty body)"


class SerperClient(_ApiClient):
    """``search(query)`` → organic results as :class:`SearchResult` s, in Serper's order."""

    name = "serper"
    config: SerperConfig

    def __init__(self, config: SerperConfig | None = None, api_key: str | None = None) -> None:
        super().__init__(config or SerperConfig(), api_key)

    def search(self, query: str) -> list[SearchResult]:
        """POST ``{base_url}/search``; raise :class:`SearchUnavailable` on any failure (all are the API's)."""
        c = self.config
        body = {"q": query, "num": c.num, "gl": c.gl, "hl": c.hl}
        url = c.base_url.rstrip("/") + "/search"
        headers = {"X-API-KEY": self.api_key or "", "Content-Type": "application/json"}
        response = self._request("POST", url, json=body, headers=headers)
        if response.status_code != 200:
            raise SearchUnavailable(f"serper ({url}): HTTP {response.status_code}: {_detail(response)}")
        try:
            data = response.json()
        except ValueError:
            raise SearchUnavailable(f"serper ({url}): response is not JSON: {response.text[:200]}") from None
        organic = data.get("organic", []) if isinstance(data, dict) else None
        if not isinstance(organic, list):
            raise SearchUnavailable(f"serper ({url}): response has no 'organic' list: {str(data)[:200]}")
        results = []
        for item in organic[: c.num]:
            if isinstance(item, dict) and isinstance(item.get("link"), str):
                snippet = str(item.get("snippet") or "")
                if item.get("date"):
                    snippet = f"{item['date']} — {snippet}"
                results.append(
                    SearchResult(url=item["link"], title=str(item.get("title") or ""), snippet=snippet)
                )
        return results


class JinaReaderClient(_ApiClient):
    """``read(url)`` → the page as Markdown, truncated to ``max_tokens`` with a visible marker."""

    name = "jina"
    key_required = False
    config: JinaConfig

    def __init__(
        self, config: JinaConfig | None = None, api_key: str | None = None, tokenizer: Any = None
    ) -> None:
        super().__init__(config or JinaConfig(), api_key)
        self.tokenizer = tokenizer

    def read(self, url: str) -> str:
        """GET ``{base_url}/{url}``; :class:`PageFetchError` when the page failed, typed errors otherwise."""
        endpoint = f"{self.config.base_url.rstrip('/')}/{url}"
        headers = {"X-Return-Format": "markdown"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        response = self._request("GET", endpoint, headers=headers, page_timeouts=True)
        if response.status_code == 200:
            return clip_tokens(response.text, self.config.max_tokens, self.tokenizer)[0]
        raise PageFetchError(f"HTTP {response.status_code}: {_detail(response)}")
