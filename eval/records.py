"""The records every benchmark loader shares: a parsed item, a load result, a malformed-record error.

A leaf module, so the loaders of different benchmark families (``eval.loaders``, ``eval.agent_loaders``)
import these without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]


@dataclass
class EvalItem:
    """One benchmark prompt: messages to send, what the scorer needs, and where it came from."""

    id: str
    messages: list[dict[str, str]]
    reference: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadResult:
    """Items of a benchmark file plus how many records were dropped and why (first few reasons)."""

    benchmark: str
    items: list[EvalItem]
    dropped: int = 0
    reasons: list[str] = field(default_factory=list)


class BadRecord(ValueError):
    """A record that does not follow the benchmark's format (dropped and counted)."""
