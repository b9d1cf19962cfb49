"""Benchmark decontamination by word-level 8-gram phrases (paper §3.1), streaming and parallel.

Rule: for each benchmark item take about 20 evenly spaced 8-word phrases (every phrase for the
exhaustive math/knowledge screen); a training sample is dropped once at least 50% of any single item's
phrases occur in the lowercased concatenation of all its turns. Benchmarks are checked in the paper's
chain order and a removed sample is charged to the first benchmark that matched, which is what running
the passes one after another gives, in one scan.

Normalisation (both sides): lowercase, every ASCII character that is not a letter or digit becomes a
space, whitespace runs collapse to one space; phrases are matched on word boundaries. This is the
paper's lowercased substring match made robust to punctuation/line-break differences.

Short items (fewer than 8 words): the whole normalised item is one phrase if it has at least
``short_min_words`` (5) words; shorter items are skipped and counted, because a 1–4 word string
(``"what is 2+2"``) matches unrelated text and would remove clean samples.

Matching engine. ``hash`` (default) hashes every k-word window of a batch of normalised text with a
polynomial rolling hash in numpy and looks windows up in a sorted array of phrase hashes (behind a
bitmap prefilter), then confirms each hit byte for byte. It is hand-written because pyahocorasick, the
library choice, drops to a few MB/s per core with the ~165K phrases of the full benchmark list (its
trie no longer fits in cache; see ``benchmarks/bench_decontam.py``) while the hash scan keeps
~50-60 MB/s. ``aho`` (pyahocorasick over the same normalised text) and ``naive`` (a per-phrase
substring loop) give identical results and serve as the benchmark's baselines.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from data_prep.benchmarks import BenchmarkItem

PHRASE_WORDS = 8
PHRASES_PER_ITEM = 20
THRESHOLD = 0.5
SHORT_MIN_WORDS = 5
# One translate pass: ASCII letters lowercased, digits and non-ASCII bytes kept, everything else a space.
_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if (48 <= c <= 57 or 97 <= c <= 122 or c >= 128) else 32
    for c in range(256)
)
_SEP = b" \x01 "
_BASE = 1099511628211  # odd, so it has an inverse mod 2**64
_MASK64 = (1 << 64) - 1
_BITMAP_BITS = 24


def prepare(text: str) -> bytes:
    """Return ``text`` lowercased as UTF-8 with non-alphanumeric ASCII as spaces (runs not yet collapsed)."""
    return (text if text.isascii() else text.lower()).encode("utf-8", "replace").translate(_TABLE)


def normalize(text: str) -> bytes:
    """Return ``text`` prepared, single-spaced and padded with spaces: the form phrases are matched in."""
    return b" " + b" ".join(prepare(text).split()) + b" "


def _to_int64(h: int) -> int:
    h &= _MASK64
    return h - (1 << 64) if h >= 1 << 63 else h


def phrase_hash(phrase: bytes) -> int:
    """The int64 polynomial hash of ``phrase`` (sum of byte * BASE**position mod 2**64)."""
    h, p = 0, 1
    for c in phrase:
        h = (h + c * p) & _MASK64
        p = (p * _BASE) & _MASK64
    return _to_int64(h)


def item_phrases(
    text: str,
    exhaustive: bool = False,
    n_phrases: int = PHRASES_PER_ITEM,
    n: int = PHRASE_WORDS,
    short_min_words: int = SHORT_MIN_WORDS,
) -> list[bytes]:
    """Return the distinct normalised phrases screened for one item (empty if the item is too short)."""
    words = normalize(text).split()
    if len(words) < n:
        return [b" " + b" ".join(words) + b" "] if len(words) >= short_min_words else []
    starts = range(len(words) - n + 1)
    if not exhaustive and len(starts) > n_phrases:
        last = len(starts) - 1
        starts = sorted({round(i * last / (n_phrases - 1)) for i in range(n_phrases)})
    return list(dict.fromkeys(b" " + b" ".join(words[s : s + n]) + b" " for s in starts))


@dataclass(frozen=True)
class Match:
    """Why a sample was removed: the benchmark, the item and how many of its phrases hit."""

    benchmark: str
    item_id: str
    hits: int
    phrases: int


@dataclass
class PhraseIndex:
    """Phrases of every screened benchmark item, in chain order, with their hashes."""

    benchmarks: list[str] = field(default_factory=list)
    items: list[tuple[int, str, int, int]] = field(default_factory=list)  # (bench idx, id, phrases, needed)
    phrases: list[bytes] = field(default_factory=list)
    phrase_items: list[list[int]] = field(default_factory=list)
    skipped_short: dict[str, int] = field(default_factory=dict)
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hash_pids: dict[int, list[int]] = field(default_factory=dict)
    bitmap: np.ndarray = field(default_factory=lambda: np.zeros(1 << _BITMAP_BITS, bool))
    window_words: tuple[int, ...] = ()

    def finalize(self) -> PhraseIndex:
        """Build the hash arrays after all phrases are added."""
        self.hash_pids = {}
        for pid, phrase in enumerate(self.phrases):
            self.hash_pids.setdefault(phrase_hash(phrase), []).append(pid)
        self.hashes = np.array(sorted(self.hash_pids), dtype=np.int64)
        self.bitmap = np.zeros(1 << _BITMAP_BITS, bool)
        self.bitmap[self.hashes & ((1 << _BITMAP_BITS) - 1)] = True
        self.window_words = tuple(sorted({p.count(b" ") - 1 for p in self.phrases}))
        return self


def build_index(
    benchmarks: Sequence[tuple[str, Sequence[BenchmarkItem], bool]],
    threshold: float = THRESHOLD,
    n_phrases: int = PHRASES_PER_ITEM,
    short_min_words: int = SHORT_MIN_WORDS,
) -> PhraseIndex:
    """Index ``(name, items, exhaustive)`` benchmarks in chain order."""
    index = PhraseIndex()
    pid_of: dict[bytes, int] = {}
    for b_idx, (name, items, exhaustive) in enumerate(benchmarks):
        index.benchmarks.append(name)
        index.skipped_short[name] = 0
        for item in items:
            phrases = item_phrases(item.text, exhaustive, n_phrases, short_min_words=short_min_words)
            if not phrases:
                index.skipped_short[name] += 1
                continue
            gid = len(index.items)
            index.items.append((b_idx, item.id, len(phrases), max(1, math.ceil(threshold * len(phrases)))))
            for phrase in phrases:
                pid = pid_of.setdefault(phrase, len(index.phrases))
                if pid == len(index.phrases):
                    index.phrases.append(phrase)
                    index.phrase_items.append([])
                index.phrase_items[pid].append(gid)
    return index.finalize()


_POWERS: dict[str, np.ndarray] = {}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and BASE**-i mod 2**64 (as wrapping int64) for i < n, cached and grown geometrically."""
    if "pw" not in _POWERS or len(_POWERS["pw"]) < n:
        size = max(n, 2 * len(_POWERS.get("pw", ())), 1 << 16)
        for key, base in (("pw", _BASE), ("inv", pow(_BASE, -1, 1 << 64))):
            arr = np.empty(size, dtype=np.int64)
            arr[0], filled, step = 1, 1, base
            while filled < size:  # doubling: arr[m:2m] = arr[:m] * base**m
                count = min(filled, size - filled)
                np.multiply(arr[:count], np.int64(_to_int64(step)), out=arr[filled : filled + count])
                filled += count
                step = (step * step) & _MASK64
            _POWERS[key] = arr
    return _POWERS["pw"], _POWERS["inv"]


_SCRATCH: dict[str, np.ndarray] = {}


def _scratch(name: str, n: int) -> np.ndarray:
    """A reused int64 work buffer of length ``n`` (fresh large arrays cost page faults on every batch)."""
    if name not in _SCRATCH or len(_SCRATCH[name]) < n:
        _SCRATCH[name] = np.empty(max(n, 2 * len(_SCRATCH.get(name, ()))), dtype=np.int64)
    return _SCRATCH[name][:n]


def _scan_hash(index: PhraseIndex, texts: Sequence[bytes]) -> list[set[int]]:
    joined = b" " + _SEP.join(texts) + b" "
    raw = np.frombuffer(joined, dtype=np.uint8)
    space = raw == 32
    keep = np.empty(len(raw), dtype=bool)
    keep[0] = True
    np.logical_not(space[1:] & space[:-1], out=keep[1:])
    b = raw[keep]
    n = len(b)
    pw, inv = _powers(n + 1)
    prefix = _scratch("prefix", n + 1)
    prefix[0] = 0
    weighted = _scratch("weighted", n)
    np.multiply(b, pw[:n], out=weighted, dtype=np.int64)
    np.cumsum(weighted, out=prefix[1:])
    spaces = np.flatnonzero(b == 32)
    seps = np.flatnonzero(b == 1)
    found: list[set[int]] = [set() for _ in texts]
    for k in index.window_words:
        if len(spaces) <= k:
            continue
        left, right = spaces[:-k], spaces[k:] + 1
        h = (prefix[right] - prefix[left]) * inv[left]
        cand = np.flatnonzero(index.bitmap[h & ((1 << _BITMAP_BITS) - 1)])
        if not len(cand):
            continue
        hc = h[cand]
        pos = np.minimum(np.searchsorted(index.hashes, hc), len(index.hashes) - 1)
        for c in cand[index.hashes[pos] == hc]:
            window = b[left[c] : right[c]].tobytes()
            row = int(np.searchsorted(seps, left[c]))
            for pid in index.hash_pids[int(h[c])]:
                if index.phrases[pid] == window:
                    found[row].add(pid)
    return found


def _collapse(text: bytes) -> bytes:
    return b" " + b" ".join(text.split()) + b" "


def _scan_aho(index: PhraseIndex, texts: Sequence[bytes]) -> list[set[int]]:
    cached = _AHO_CACHE.get(id(index))
    automaton = cached[1] if cached is not None and cached[0] is index else None
    if automaton is None:
        import ahocorasick

        automaton = ahocorasick.Automaton()
        for pid, phrase in enumerate(index.phrases):
            automaton.add_word(phrase.decode("latin-1"), pid)
        automaton.make_automaton()
        _AHO_CACHE[id(index)] = (index, automaton)
    return [{pid for _, pid in automaton.iter(_collapse(t).decode("latin-1"))} for t in texts]


def _scan_naive(index: PhraseIndex, texts: Sequence[bytes]) -> list[set[int]]:
    collapsed = [_collapse(t) for t in texts]
    return [{pid for pid, phrase in enumerate(index.phrases) if phrase in t} for t in collapsed]


_AHO_CACHE: dict[int, tuple[PhraseIndex, object]] = {}
ENGINES = {"hash": _scan_hash, "aho": _scan_aho, "naive": _scan_naive}


def decide(index: PhraseIndex, pids: set[int]) -> Match | None:
    """Return the match of the first benchmark (chain order) with an item at or over its threshold."""
    if not pids:
        return None
    counts: dict[int, int] = {}
    for pid in pids:
        for gid in index.phrase_items[pid]:
            counts[gid] = counts.get(gid, 0) + 1
    best: tuple[int, float, int] | None = None
    for gid, hits in counts.items():
        b_idx, _, total, needed = index.items[gid]
        if hits >= needed:
            key = (b_idx, -hits / total, gid)
            best = key if best is None or key < best else best
    if best is None:
        return None
    b_idx, item_id, total, _ = index.items[best[2]]
    return Match(index.benchmarks[b_idx], item_id, counts[best[2]], total)


def scan_texts(index: PhraseIndex, texts: Sequence[str], engine: str = "hash") -> list[Match | None]:
    """Return the match (or None) for each text."""
    prepared = [prepare(t) for t in texts]
    return [decide(index, pids) for pids in ENGINES[engine](index, prepared)]


_WORKER_INDEX: dict[str, PhraseIndex] = {}


def _init_worker(index: PhraseIndex) -> None:
    _WORKER_INDEX["index"] = index


def _worker_scan(args: tuple[list[str], str]) -> list[Match | None]:
    texts, engine = args
    return scan_texts(_WORKER_INDEX["index"], texts, engine)


def _batches(items: Iterable[tuple[object, str]], batch_bytes: int) -> Iterator[list[tuple[object, str]]]:
    batch: list[tuple[object, str]] = []
    size = 0
    for item in items:
        batch.append(item)
        size += len(item[1])
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def iter_scan(
    items: Iterable[tuple[object, str]],
    index: PhraseIndex,
    *,
    workers: int = 1,
    batch_bytes: int = 1 << 20,
    engine: str = "hash",
) -> Iterator[tuple[object, Match | None]]:
    """Stream ``(payload, text)`` pairs and yield ``(payload, match)`` in input order.

    Memory stays bounded: at most ``2 * workers`` batches of about ``batch_bytes`` are in flight.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {sorted(ENGINES)}")
    if workers <= 1:
        for batch in _batches(items, batch_bytes):
            yield from zip(
                (p for p, _ in batch), scan_texts(index, [t for _, t in batch], engine), strict=True
            )
        return
    if "fork" in mp.get_all_start_methods():  # children inherit the index: nothing to pickle
        _WORKER_INDEX["index"] = index
        pool_cm = mp.get_context("fork").Pool(workers)
    else:
        pool_cm = mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(index,))
    with pool_cm as pool:
        pending: deque = deque()
        for batch in _batches(items, batch_bytes):
            pending.append(
                ([p for p, _ in batch], pool.apply_async(_worker_scan, (([t for _, t in batch], engine),)))
            )
            while len(pending) > 2 * workers:
                payloads, result = pending.popleft()
                yield from zip(payloads, result.get(), strict=True)
        while pending:
            payloads, result = pending.popleft()
            yield from zip(payloads, result.get(), strict=True)
