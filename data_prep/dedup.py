"""Deduplication and leakage checks for prompt sets (paper §3.3).

* exact dedup: SHA-256 of the whitespace-normalised, lowercased statement;
* LiveCodeBench leak check: a training problem leaks if its 400-character prefix hash equals an
  evaluation problem's, or if it shares at least five character 60-grams with one evaluation problem
  (both on whitespace-normalised text; 60-grams hashed with xxhash64);
* near duplicates: MinHash LSH (datasketch) over word 5-gram shingles, for stages that need it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import xxhash

PREFIX_CHARS = 400
CHAR_NGRAM = 60
MIN_SHARED_NGRAMS = 5


def normalize_ws(text: str) -> str:
    """Lowercase and collapse whitespace runs to single spaces."""
    return " ".join(text.lower().split())


def statement_key(text: str) -> str:
    """SHA-256 hex of the whitespace-normalised, lowercased statement."""
    return hashlib.sha256(normalize_ws(text).encode("utf-8")).hexdigest()


def dedup_exact(rows: Iterable[dict], text_of: Callable[[dict], str]) -> Iterator[tuple[dict, bool]]:
    """Yield ``(row, is_duplicate)``: later rows with a seen statement key are duplicates."""
    seen: set[str] = set()
    for row in rows:
        key = statement_key(text_of(row))
        yield row, key in seen
        seen.add(key)


def _char_ngrams(text: str, n: int = CHAR_NGRAM) -> set[int]:
    return {xxhash.xxh64_intdigest(text[i : i + n].encode("utf-8")) for i in range(len(text) - n + 1)}


@dataclass(frozen=True)
class Leak:
    """A training problem that overlaps an evaluation problem."""

    eval_id: str
    reason: str  # "prefix_hash" or "char_ngrams"
    shared_ngrams: int


class LeakIndex:
    """Index of evaluation problems (e.g. LiveCodeBench v6) for the prefix-hash and 60-gram checks."""

    def __init__(self, problems: Sequence[tuple[str, str]], min_shared: int = MIN_SHARED_NGRAMS) -> None:
        self.min_shared = min_shared
        self.prefix: dict[str, str] = {}
        self.ngram_owner: dict[int, list[str]] = {}
        for pid, text in problems:
            norm = normalize_ws(text)
            self.prefix.setdefault(hashlib.sha256(norm[:PREFIX_CHARS].encode()).hexdigest(), pid)
            for h in _char_ngrams(norm):
                self.ngram_owner.setdefault(h, []).append(pid)

    def check(self, text: str) -> Leak | None:
        """Return the leak for one training problem, or None if it is clean."""
        norm = normalize_ws(text)
        owner = self.prefix.get(hashlib.sha256(norm[:PREFIX_CHARS].encode()).hexdigest())
        if owner is not None:
            return Leak(owner, "prefix_hash", 0)
        shared: dict[str, int] = {}
        for h in _char_ngrams(norm):
            for pid in self.ngram_owner.get(h, ()):
                shared[pid] = shared.get(pid, 0) + 1
        if shared:
            pid, n = max(shared.items(), key=lambda kv: kv[1])
            if n >= self.min_shared:
                return Leak(pid, "char_ngrams", n)
        return None


def near_duplicates(
    items: Sequence[tuple[str, str]], threshold: float = 0.8, num_perm: int = 128, shingle: int = 5
) -> list[tuple[str, str]]:
    """Return ``(kept_id, duplicate_id)`` pairs whose estimated word-shingle Jaccard is >= ``threshold``."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    pairs: list[tuple[str, str]] = []
    for item_id, text in items:
        words = normalize_ws(text).split()
        grams = {" ".join(words[i : i + shingle]) for i in range(max(len(words) - shingle + 1, 1))}
        mh = MinHash(num_perm=num_perm)
        mh.update_batch([g.encode("utf-8") for g in grams])
        hits = lsh.query(mh)
        if hits:
            pairs.append((sorted(hits)[0], item_id))
        else:
            lsh.insert(item_id, mh)
    return pairs
