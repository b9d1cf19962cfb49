"""The domain blocklist of the search tools: sites that can leak benchmark answer keys (paper App. E).

Both backends apply it: ``web_search`` drops blocked hits before numbering them and ``web_scrape`` refuses
a blocked URL with a tool error (an observation the agent recovers from, not a crash). An entry is
``host`` (the host and all its subdomains) or ``host/path`` (URLs on that host whose path is that path or
below it, compared case-insensitively because GitHub and the Hugging Face Hub ignore case in names).

:data:`DEFAULT_BLOCKLIST` covers where BrowseComp, HLE / HLE-Verified and SealQA (Seal-0) publish their
questions and answers, plus the dataset hubs and mirrors that redistribute them:

* BrowseComp: ``openaipublic.blob.core.windows.net/simple-evals`` (the encrypted CSV),
  ``github.com/openai/simple-evals`` (its decryption code), Kaggle's copy;
* HLE: ``lastexam.ai``, ``agi.safe.ai``, ``github.com/centerforaisafety/hle``,
  ``huggingface.co/datasets/cais/hle``;
* SealQA and HLE-Verified: Hugging Face datasets; all of ``huggingface.co/datasets`` (and its API, the
  datasets server, ``hf.co`` short links, ``hf-mirror.com`` and ModelScope's dataset mirror) because
  copies and derived sets appear under many names. Model cards and papers on the Hub stay searchable.

Extend it per evaluation through the tools' config (``blocklist:``); an empty list turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from infra.agents.search.results import SearchResult

DEFAULT_BLOCKLIST: tuple[str, ...] = (
    "huggingface.co/datasets",
    "huggingface.co/api/datasets",
    "datasets-server.huggingface.co",
    "hf.co/datasets",
    "hf-mirror.com",
    "modelscope.cn/datasets",
    "kaggle.com",
    "openaipublic.blob.core.windows.net/simple-evals",
    "github.com/openai/simple-evals",
    "raw.githubusercontent.com/openai/simple-evals",
    "lastexam.ai",
    "agi.safe.ai",
    "github.com/centerforaisafety/hle",
    "raw.githubusercontent.com/centerforaisafety/hle",
)


def _host_and_path(url: str) -> tuple[str, str]:
    """Return the lowercased host (no ``www.``, no port) and path of ``url`` (a scheme is optional)."""
    url = url.strip()
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = (parts.hostname or "").lower().rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    return host, parts.path.lower().rstrip("/")


class Blocklist:
    """Decides whether a URL is on an answer-leaking site; ``blocks(url)`` is the one question asked."""

    def __init__(self, entries: Iterable[str] = DEFAULT_BLOCKLIST) -> None:
        self.rules: list[tuple[str, str]] = []
        for entry in entries:
            host, path = _host_and_path(entry)
            if not host:
                raise ValueError(f"blocklist entry {entry!r}: expected 'host' or 'host/path'")
            self.rules.append((host, path))
        self.entries = tuple(entries)

    def blocks(self, url: str) -> bool:
        """True when ``url`` is on a blocked host (or a subdomain) under a blocked path prefix."""
        host, path = _host_and_path(url)
        if not host:
            return False
        for rule_host, rule_path in self.rules:
            if host != rule_host and not host.endswith("." + rule_host):
                continue
            if not rule_path or path == rule_path or path.startswith(rule_path + "/"):
                return True
        return False

    def filter(self, results: Iterable[SearchResult]) -> list[SearchResult]:
        """Return the results whose URL is not blocked, in order."""
        return [r for r in results if not self.blocks(r.url)]
