"""Stage 06's search tools: ``web_search``, ``web_scrape`` and ``python`` with local and remote backends.

* :mod:`~infra.agents.search.store`: the local page store (JSONL) and its ``bm25s`` index;
* :mod:`~infra.agents.search.clients`: Serper and Jina Reader clients with typed errors;
* :mod:`~infra.agents.search.summarize`: condenses over-budget pages, numbers kept verbatim;
* :mod:`~infra.agents.search.blocklist`: answer-leaking sites, applied to both backends;
* :mod:`~infra.agents.search.tools`: the Strands tools and :func:`build_search_tools`.

Use::

    store = PageStore.load("pages.jsonl"); index = BM25Index.build(store)
    tools = build_search_tools(SearchToolsConfig(), index=index, sandbox=Sandbox())
"""

from infra.agents.search.blocklist import DEFAULT_BLOCKLIST, Blocklist
from infra.agents.search.clients import (
    JinaConfig,
    JinaReaderClient,
    PageFetchError,
    SearchAuthError,
    SearchTimeout,
    SearchUnavailable,
    SerperClient,
    SerperConfig,
)
from infra.agents.search.results import SearchResult
from infra.agents.search.store import BM25Index, Page, PageStore, extract_main_content, normalize_url
from infra.agents.search.summarize import Summarizer, SummarizerUnavailable

__all__ = [
    "DEFAULT_BLOCKLIST",
    "BM25Index",
    "Blocklist",
    "JinaConfig",
    "JinaReaderClient",
    "Page",
    "PageFetchError",
    "PageStore",
    "SearchAuthError",
    "SearchResult",
    "SearchTimeout",
    "SearchUnavailable",
    "SerperClient",
    "SerperConfig",
    "Summarizer",
    "SummarizerUnavailable",
    "extract_main_content",
    "normalize_url",
]
