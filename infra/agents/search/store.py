"""The local page store and its BM25 index: the training/offline backend of ``web_search`` and ``web_scrape``.

A store is JSON lines, one page a line: ``{"url", "title", "html"}`` or ``{"url", "title", "text"}``
(plus an optional ``metadata`` object), in one ``.jsonl`` file or a folder of them (read in name order).
URLs are compared after :func:`normalize_url`. A page's content is its ``text``, or the main content
``trafilatura`` extracts from its ``html`` (navigation, footers and boilerplate dropped, Markdown out).

:class:`BM25Index` ranks pages with ``bm25s`` (Lucene BM25 over title + content). Tokens are casefolded
word characters minus English stopwords, without stemming, so ranking needs nothing beyond ``bm25s``.
Every page is scored and ties are broken by URL, so the ranking is a pure function of store and query.
The saved index records the store's fingerprint and refuses to load against a different store.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import bm25s
import numpy as np
import trafilatura
from bm25s.stopwords import STOPWORDS_EN
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from infra.agents.search.results import SearchResult

_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(STOPWORDS_EN)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_META_FILE = "pages.json"


class Page(BaseModel):
    """One stored page: its URL, title and either raw ``html`` or plain ``text``."""

    model_config = ConfigDict(extra="forbid")

    url: str
    title: str = ""
    html: str | None = None
    text: str | None = None
    metadata: dict[str, Any] = {}

    @model_validator(mode="after")
    def _one_body(self) -> Page:
        if not self.url.strip():
            raise ValueError("'url' must be non-empty")
        if (self.html is None) == (self.text is None):
            raise ValueError("give exactly one of 'html' and 'text'")
        return self


def normalize_url(url: str) -> str:
    """Return ``url`` with scheme and host lowercased, no fragment, no default port, no trailing slash."""
    parts = urlsplit(url.strip())
    netloc = parts.netloc.lower()
    if (parts.scheme.lower(), netloc.rpartition(":")[2]) in (("http", "80"), ("https", "443")):
        netloc = netloc.rpartition(":")[0]
    path = parts.path.rstrip("/") if parts.path not in ("", "/") else ""
    return urlunsplit((parts.scheme.lower(), netloc, path, parts.query, ""))


def extract_main_content(html: str, url: str | None = None) -> str:
    """Return the main content of ``html`` as Markdown (trafilatura), else all its text, else ``""``."""
    text = trafilatura.extract(
        html, url=url, output_format="markdown", include_comments=False, include_tables=True
    )
    if not text:  # too little structure for the extractor: fall back to every text node
        text = trafilatura.html2txt(html)
    return (text or "").strip()


def tokenize(text: str) -> list[str]:
    """Return the BM25 tokens of ``text``: casefolded word characters, English stopwords removed."""
    return [t for t in _WORD.findall(text.casefold()) if t not in _STOPWORDS]


class PageStore:
    """Pages by normalised URL, in load order; ``content(page)`` is the main text (extracted once)."""

    def __init__(self, pages: Iterable[Page]) -> None:
        self.pages: dict[str, Page] = {}
        for page in pages:
            key = normalize_url(page.url)
            if key in self.pages:
                raise ValueError(f"page store: duplicate URL {page.url!r} (same as {self.pages[key].url!r})")
            self.pages[key] = page
        self._content: dict[str, str] = {}

    @classmethod
    def load(cls, path: str | Path) -> PageStore:
        """Read a ``.jsonl`` file, or every ``*.jsonl`` in a folder in name order; errors name file:line."""
        path = Path(path)
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files or not all(f.is_file() for f in files):
            raise FileNotFoundError(f"page store {path}: no such .jsonl file or folder of .jsonl files")
        pages = []
        for file in files:
            with file.open(encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        pages.append(Page.model_validate(json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{file}:{n}: not JSON: {exc.msg}") from None
                    except ValidationError as exc:
                        err = exc.errors()[0]
                        where = ".".join(str(part) for part in err["loc"]) or "record"
                        raise ValueError(f"{file}:{n}: not a page record: {where}: {err['msg']}") from None
        return cls(pages)

    def save(self, path: str | Path) -> None:
        """Write the store as one ``.jsonl`` file (the format :meth:`load` reads)."""
        with Path(path).open("w", encoding="utf-8") as fh:
            for page in self.pages.values():
                fh.write(page.model_dump_json(exclude_none=True) + "\n")

    def __len__(self) -> int:
        return len(self.pages)

    def __iter__(self) -> Iterator[Page]:
        return iter(self.pages.values())

    def get(self, url: str) -> Page | None:
        """Return the page stored at ``url`` (normalised), or None."""
        return self.pages.get(normalize_url(url))

    def content(self, page: Page) -> str:
        """Return the page's text: ``text`` as stored, or the main content extracted from ``html``."""
        if page.text is not None:
            return page.text
        key = normalize_url(page.url)
        if key not in self._content:
            self._content[key] = extract_main_content(page.html or "", page.url)
        return self._content[key]

    def fingerprint(self) -> str:
        """Return a SHA-256 over every page's URL, title and stored body, in order."""
        digest = hashlib.sha256()
        for key, page in self.pages.items():
            for part in (key, page.title, page.html or "", page.text or ""):
                digest.update(part.encode("utf-8") + b"\0")
        return digest.hexdigest()


def snippet(text: str, query_tokens: Iterable[str], max_chars: int = 240, title: str = "") -> str:
    """Return the sentence of ``text`` holding most distinct query tokens (first wins) and what follows it.

    A line that only repeats the title is skipped; following sentences are added while they fit.
    """
    wanted = set(query_tokens)
    sentences = [" ".join(s.lstrip("#*-> ").split()) for s in _SENTENCE.split(text)]
    sentences = [s for s in sentences if s and s.casefold() != title.strip().casefold()]
    if not sentences:
        return ""
    hits = [len(wanted & set(tokenize(s))) for s in sentences]
    best = hits.index(max(hits))
    out = sentences[best]
    for follow in sentences[best + 1 :]:
        if len(out) + 1 + len(follow) > max_chars:
            break
        out += " " + follow
    if len(out) <= max_chars:
        return out
    return out[:max_chars].rsplit(" ", 1)[0] + " …"


class BM25Index:
    """A ``bm25s`` index over a :class:`PageStore`; ``search`` returns ranked :class:`SearchResult` s."""

    def __init__(self, store: PageStore, retriever: bm25s.BM25, urls: list[str]) -> None:
        self.store = store
        self.retriever = retriever
        self.urls = urls  # document order of the index: normalised URLs

    @classmethod
    def build(cls, store: PageStore) -> BM25Index:
        """Index every page's title and content."""
        if not len(store):
            raise ValueError("page store is empty: nothing to index")
        urls = list(store.pages)
        corpus = [tokenize(f"{p.title}\n{store.content(p)}") for p in store]
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        return cls(store, retriever, urls)

    def save(self, directory: str | Path) -> None:
        """Write the index and the store fingerprint it was built for to ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(directory), show_progress=False)
        meta = {"urls": self.urls, "store_fingerprint": self.store.fingerprint()}
        (directory / _META_FILE).write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | Path, store: PageStore) -> BM25Index:
        """Read an index saved by :meth:`save`; ValueError when it was built for another store."""
        directory = Path(directory)
        meta_file = directory / _META_FILE
        if not meta_file.is_file():
            raise FileNotFoundError(f"{meta_file}: missing; build the index with BM25Index.build(...).save()")
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("store_fingerprint") != store.fingerprint() or set(meta["urls"]) != set(store.pages):
            raise ValueError(f"{directory}: index was built for a different page store; rebuild it")
        retriever = bm25s.BM25.load(str(directory), show_progress=False)
        return cls(store, retriever, list(meta["urls"]))

    def search(
        self,
        query: str,
        k: int = 10,
        exclude: Callable[[str], bool] | None = None,
        snippet_chars: int = 240,
    ) -> list[SearchResult]:
        """Return up to ``k`` pages with a positive score, best first, ties by URL; ``exclude(url)`` skips."""
        tokens = tokenize(query)
        known = [t for t in tokens if t in self.retriever.vocab_dict]
        if not known:
            return []
        scores = np.asarray(self.retriever.get_scores(known), dtype=np.float64)
        ranked = sorted((i for i in np.flatnonzero(scores > 0)), key=lambda i: (-scores[i], self.urls[i]))
        results = []
        for i in ranked:
            page = self.store.pages[self.urls[i]]
            if exclude is not None and exclude(page.url):
                continue
            text = snippet(self.store.content(page), tokens, snippet_chars, page.title)
            results.append(SearchResult(url=page.url, title=page.title, snippet=text))
            if len(results) == k:
                break
        return results
