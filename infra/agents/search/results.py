"""One search hit (url, title, snippet), shared by both search backends, and the tool's numbered list."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchResult:
    """A ranked hit: the page's URL, its title and a short snippet of its text."""

    url: str
    title: str
    snippet: str


def format_results(query: str, results: list[SearchResult]) -> str:
    """Return the ``web_search`` observation: a numbered list of title, URL and snippet, best first."""
    if not results:
        return f"No results for {query!r}."
    blocks = []
    for i, r in enumerate(results, 1):
        lines = [f"{i}. {r.title or '(untitled)'}", f"   URL: {r.url}"]
        if r.snippet:
            lines.append(f"   {r.snippet}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
