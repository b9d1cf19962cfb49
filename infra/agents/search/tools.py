"""The Search Agent's three Strands tools (paper §3.7): ``web_search``, ``web_scrape`` and ``python``.

Each web tool has one backend, chosen in :class:`SearchToolsConfig`: the local page store (BM25 search,
trafilatura extraction) for training and offline use, or the paper's evaluation services (Serper, Jina
Reader). The blocklist of answer-leaking sites applies to both. The conventions are those of
:mod:`infra.agents.tools` and ``execute_command``:

* a malformed argument (missing, not a string, empty, oversized) is a tool error (``status: error``)
  whose text starts ``Error: malformed tool call`` like the tool layer's own (the stage-06 reward counts
  both as malformed), never an exception; a blocked or unreadable page and Python code that fails or
  times out are tool errors too;
* an API, summarizer or sandbox that cannot be used raises :class:`~infra.agents.contract.EnvironmentFailure`
  (``SearchUnavailable``, ``SummarizerUnavailable``), which aborts the episode instead of scoring it;
* a page over ``page_budget_tokens`` is condensed by the summarizer when one is configured, else cut
  with a visible marker; Python output is cut per stream to ``python_budget_tokens``.

Build them with :func:`build_search_tools`; the environment owns the store, index, sandbox and clients.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from strands.tools.tools import PythonAgentTool
from strands.types.tools import AgentTool

from infra.agents.contract import EnvironmentFailure
from infra.agents.search.blocklist import DEFAULT_BLOCKLIST, Blocklist
from infra.agents.search.clients import (
    JinaConfig,
    JinaReaderClient,
    PageFetchError,
    SerperClient,
    SerperConfig,
)
from infra.agents.search.results import SearchResult, format_results
from infra.agents.search.store import BM25Index, PageStore
from infra.agents.search.summarize import Summarizer
from infra.agents.search.text_budget import clip_tokens, count_tokens
from infra.sandbox.isolation import HARNESS_IN_SANDBOX, SandboxUnavailable


class SearchToolsConfig(BaseModel):
    """Backends and budgets of the three tools."""

    model_config = ConfigDict(extra="forbid")

    search_backend: Literal["local", "serper"] = Field(default="local", description="BM25 store or Serper.")
    scrape_backend: Literal["local", "jina"] = Field(default="local", description="Page store or Jina.")
    results: int = Field(default=10, ge=1, le=10, description="Search results shown per query.")
    snippet_chars: int = Field(default=240, ge=40, description="Snippet length of local results.")
    page_budget_tokens: int = Field(
        default=8192, ge=64, description="Longer pages are summarized (or cut without a summarizer)."
    )
    python_timeout_s: float = Field(default=10.0, gt=0, description="Wall time of one python call.")
    python_budget_tokens: int = Field(default=2048, ge=16, description="Each output stream is cut to this.")
    max_query_chars: int = Field(default=1000, ge=1, description="Longer queries are malformed.")
    max_url_chars: int = Field(default=2048, ge=8, description="Longer URLs are malformed.")
    max_code_chars: int = Field(default=20_000, ge=1, description="Longer code is malformed.")
    blocklist: list[str] = Field(
        default_factory=lambda: list(DEFAULT_BLOCKLIST), description="Answer-leaking sites; [] disables."
    )
    serper: SerperConfig = Field(default_factory=SerperConfig)
    jina: JinaConfig = Field(default_factory=JinaConfig)


# A traceback frame of the sandbox's own harness (its file line and the indented source lines under it).
_HARNESS_FRAME = re.compile(r'  File "' + re.escape(HARNESS_IN_SANDBOX) + r'".*\n(?:    .*\n)*')


def _result(tool_use: dict[str, Any], text: str, ok: bool = True) -> dict[str, Any]:
    return {
        "toolUseId": tool_use["toolUseId"],
        "status": "success" if ok else "error",
        "content": [{"text": text}],
    }


def _string_arg(tool_use: dict[str, Any], tool: str, key: str, max_chars: int) -> tuple[str | None, str]:
    """Return ``(value, "")`` or ``(None, error text)`` for the required string argument ``key``."""
    value = (tool_use.get("input") or {}).get(key)
    if not isinstance(value, str) or not value.strip():
        return None, f"Error: malformed tool call: {tool} needs a non-empty string argument '{key}'."
    if len(value) > max_chars:
        return (
            None,
            f"Error: malformed tool call: '{key}' of {tool} is {len(value)} characters (limit {max_chars}).",
        )
    return value, ""


def _spec(name: str, description: str, arg: str, arg_description: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"json": {
            "type": "object",
            "properties": {arg: {"type": "string", "description": arg_description}},
            "required": [arg],
        }},
    }  # fmt: skip


def web_search_tool(
    search: Callable[[str], list[SearchResult]],
    blocklist: Blocklist,
    k: int = 10,
    max_query_chars: int = 1000,
) -> AgentTool:
    """``web_search(query)`` → numbered title/URL/snippet of the top ``k`` unblocked results."""
    spec = _spec(
        "web_search",
        "Search the web. Returns up to 10 results, each with its title, URL and a snippet.",
        "query",
        "The search query, e.g. 'founder of Acme Corp year founded'.",
    )

    def run(tool_use: dict[str, Any], **_: Any) -> dict[str, Any]:
        query, error = _string_arg(tool_use, "web_search", "query", max_query_chars)
        if query is None:
            return _result(tool_use, error, ok=False)
        results = blocklist.filter(search(query.strip()))[:k]
        return _result(tool_use, format_results(query.strip(), results))

    return PythonAgentTool("web_search", spec, run)


def web_scrape_tool(
    fetch: Callable[[str], str],
    blocklist: Blocklist,
    budget_tokens: int = 8192,
    summarizer: Summarizer | None = None,
    tokenizer: Any = None,
    max_url_chars: int = 2048,
) -> AgentTool:
    """``web_scrape(url)`` → the page's main content; over ``budget_tokens`` it is condensed or cut."""
    spec = _spec(
        "web_scrape",
        "Read a web page: returns its main content as text. Long pages are condensed to their key facts.",
        "url",
        "The page's full URL, e.g. 'https://example.com/page'.",
    )

    def run(tool_use: dict[str, Any], **_: Any) -> dict[str, Any]:
        url, error = _string_arg(tool_use, "web_scrape", "url", max_url_chars)
        if url is None:
            return _result(tool_use, error, ok=False)
        url = url.strip()
        if any(c.isspace() for c in url):
            return _result(tool_use, f"Error: malformed tool call: {url!r} is not a URL.", ok=False)
        if blocklist.blocks(url):
            return _result(
                tool_use, f"Error: {url} is on a blocked site (it can leak answers); not fetched.", False
            )
        try:
            text = fetch(url)
        except PageFetchError as exc:
            return _result(tool_use, f"Error: could not read {url}: {exc}", ok=False)
        n = count_tokens(text, tokenizer)
        if n > budget_tokens and summarizer is not None:
            summary = summarizer.condense(text, budget_tokens, url=url)
            text = f"[page of {n} tokens condensed by the summarizer]\n{summary}"
        return _result(tool_use, clip_tokens(text, budget_tokens, tokenizer)[0])

    return PythonAgentTool("web_scrape", spec, run)


def python_tool(sandbox: Any, timeout_s: float = 10.0, budget_tokens: int = 2048, tokenizer: Any = None,
                max_code_chars: int = 20_000) -> AgentTool:  # fmt: skip
    """``python(code)`` → stdout, ``[stderr]``, ``[exit code]`` of ``code`` run in the project sandbox.

    The sandbox (:class:`infra.sandbox.Sandbox`) has no network and only a wiped scratch folder to write
    to. Exit 0 is a success; an exception, non-zero exit or timeout is a tool error (the code failed);
    a sandbox that cannot run anything raises ``EnvironmentFailure``.
    """
    spec = _spec(
        "python",
        "Run Python 3 code in a sandbox with no network or file access, for arithmetic, dates and strings. "
        "Print what you need: returns stdout, stderr and the exit code.",
        "code",
        "The program, e.g. 'print(2**10)'.",
    )

    def run(tool_use: dict[str, Any], **_: Any) -> dict[str, Any]:
        code, error = _string_arg(tool_use, "python", "code", max_code_chars)
        if code is None:
            return _result(tool_use, error, ok=False)
        try:
            res = sandbox.run_python(code, timeout_s=timeout_s)
        except SandboxUnavailable as exc:
            raise EnvironmentFailure(f"python tool: sandbox unavailable: {exc}") from exc
        if res.killed_reason and res.killed_reason.startswith("sandbox error"):
            raise EnvironmentFailure(f"python tool: {res.killed_reason}")
        text = clip_tokens(res.stdout.rstrip("\n"), budget_tokens, tokenizer)[0]
        stderr = _HARNESS_FRAME.sub("", res.stderr).rstrip("\n")
        if stderr:
            text += f"\n[stderr]: {clip_tokens(stderr, budget_tokens, tokenizer)[0]}"
        if res.timed_out:
            text += f"\n[timed out after {timeout_s:g}s]"
        elif res.killed_reason:
            text += f"\n[stopped: {res.killed_reason}]"
        elif res.exit_code != 0:
            text += f"\n[exit code]: {res.exit_code}"
        return _result(tool_use, text.strip() or "(no output)", ok=res.ok)

    return PythonAgentTool("python", spec, run)


def build_search_tools(
    config: SearchToolsConfig,
    *,
    index: BM25Index | None = None,
    store: PageStore | None = None,
    serper: SerperClient | None = None,
    jina: JinaReaderClient | None = None,
    summarizer: Summarizer | None = None,
    sandbox: Any = None,
    tokenizer: Any = None,
    with_python: bool = True,
) -> list[AgentTool]:
    """Return ``[web_search, web_scrape, python]`` on the configured backends (``python`` on ``sandbox``).

    The local backends need ``index`` (search) and ``store`` (scrape; defaults to ``index.store``); the
    remote ones use ``serper``/``jina`` when given, else clients built from ``config`` (keys from the
    environment). A missing piece is a ValueError naming the config key.
    """
    blocklist = Blocklist(config.blocklist)
    if config.search_backend == "local":
        if index is None:
            raise ValueError("search_backend: local needs a BM25Index (index=...)")
        local_index = index

        def search(query: str) -> list[SearchResult]:
            return local_index.search(query, config.results, blocklist.blocks, config.snippet_chars)
    else:
        search = (serper or SerperClient(config.serper)).search

    if config.scrape_backend == "local":
        pages = store or (index.store if index is not None else None)
        if pages is None:
            raise ValueError("scrape_backend: local needs a PageStore (store=... or index=...)")

        def fetch(url: str) -> str:
            page = pages.get(url)
            if page is None:
                raise PageFetchError("no such page (HTTP 404)")
            return f"Title: {page.title}\nURL: {page.url}\n\n{pages.content(page)}"
    else:
        fetch = (jina or JinaReaderClient(config.jina, tokenizer=tokenizer)).read

    tools = [
        web_search_tool(search, blocklist, config.results, config.max_query_chars),
        web_scrape_tool(
            fetch, blocklist, config.page_budget_tokens, summarizer, tokenizer, config.max_url_chars
        ),
    ]
    if with_python:
        if sandbox is None:
            raise ValueError("the python tool needs a sandbox (sandbox=infra.sandbox.Sandbox(...))")
        tools.append(
            python_tool(
                sandbox,
                config.python_timeout_s,
                config.python_budget_tokens,
                tokenizer,
                config.max_code_chars,
            )
        )
    return tools
