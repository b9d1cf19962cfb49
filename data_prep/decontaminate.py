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

Matching engine. ``hash`` (default) fingerprints every word of a batch of normalised text (its length
and five of its bytes: first, second, middle, second-to-last, last), hashes every k-word window as a
polynomial over those fingerprints in numpy, looks windows up in a sorted array of phrase hashes (behind
a bitmap prefilter), then confirms each hit byte for byte. The hash is only a prefilter, so it need not
read every byte: per-word fingerprints cost a few passes over the bytes and the rest is per word, about
twice the rate of the earlier hash over every byte (an int64 multiply and cumulative sum per byte).
It is hand-written because pyahocorasick, the library choice, drops to a few MB/s per core with the
~165K phrases of the full benchmark list (its trie no longer fits in cache; see
``benchmarks/bench_decontam.py``) while the hash scan keeps ~200 MB per CPU-second. ``aho``
(pyahocorasick over the same normalised text) and ``naive`` (a per-phrase substring loop) give identical
results and serve as the benchmark's baselines. The index's phrase hashes are computed in numpy too, by
the same fingerprint code (a per-phrase Python loop cost ~3 s for the full list).

:func:`iter_scan` and the file pipeline (``data_prep.decontam_pipeline``) spread chunks over workers with
:func:`data_prep.ordered_pool.map_ordered`.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate

import numpy as np

from data_prep.benchmarks import BenchmarkItem
from data_prep.ordered_pool import map_ordered

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


_INV_BASE = _to_int64(pow(_BASE, -1, 1 << 64))


def _fingerprint(word: bytes) -> int:
    """A word's fingerprint: its length and its first, second, middle, second-to-last and last bytes.

    A one-byte word's second and second-to-last bytes are the spaces around it (as the scan reads them).
    """
    n = len(word)
    second, second_last = (word[1], word[-2]) if n > 1 else (32, 32)
    return n << 40 | word[0] << 32 | second << 24 | word[n >> 1] << 16 | second_last << 8 | word[-1]


def phrase_hash(phrase: bytes) -> int:
    """The int64 hash of ``phrase``'s words: sum of fingerprint(word i) * BASE**i mod 2**64."""
    h, p = 0, 1
    for word in phrase.split(b" "):
        if word:
            h = (h + _fingerprint(word) * p) & _MASK64
            p = (p * _BASE) & _MASK64
    return _to_int64(h)


@lru_cache(maxsize=4096)
def _sampled_starts(windows: int, n_phrases: int) -> tuple[int, ...]:
    last = windows - 1
    return tuple(sorted({round(i * last / (n_phrases - 1)) for i in range(n_phrases)}))


def item_phrases(
    text: str,
    exhaustive: bool = False,
    n_phrases: int = PHRASES_PER_ITEM,
    n: int = PHRASE_WORDS,
    short_min_words: int = SHORT_MIN_WORDS,
) -> list[bytes]:
    """Return the distinct normalised phrases screened for one item (empty if the item is too short)."""
    words = prepare(text).split()
    joined = b" " + b" ".join(words) + b" "
    if len(words) < n:
        return [joined] if len(words) >= short_min_words else []
    windows = len(words) - n + 1
    starts = range(windows) if exhaustive or windows <= n_phrases else _sampled_starts(windows, n_phrases)
    # ends[i] + i: the space before word i in ``joined``, so a phrase is one slice of it.
    ends = list(accumulate(map(len, words), initial=0))
    return list(dict.fromkeys([joined[ends[s] + s : ends[s + n] + s + n + 1] for s in starts]))


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
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sorted phrase hashes
    hash_pids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # pid of each hash
    bitmap: np.ndarray = field(default_factory=lambda: np.zeros(1 << _BITMAP_BITS, bool))
    window_words: tuple[int, ...] = ()

    def finalize(self) -> PhraseIndex:
        """Build the hash arrays after all phrases are added."""
        hashes, words = _phrase_hashes(self.phrases)
        self.hash_pids = np.argsort(hashes, kind="stable")
        self.hashes = hashes[self.hash_pids]
        self.bitmap = np.zeros(1 << _BITMAP_BITS, bool)
        self.bitmap[self.hashes & ((1 << _BITMAP_BITS) - 1)] = True
        self.window_words = tuple(int(k) for k in np.unique(words))
        return self


def _word_fingerprints(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and fingerprint (see :func:`_fingerprint`) of every space-separated word of ``raw``.

    ``raw`` (uint8) must begin and end with a space, so word starts and ends alternate.
    """
    space = raw == 32
    edges = np.flatnonzero(space[1:] != space[:-1]) + 1  # a word starts, ends, starts, ...
    starts, ends = edges[0::2], edges[1::2]
    lengths = ends - starts
    fp = lengths << 40
    sampled = (starts, starts + 1, starts + (lengths >> 1), ends - 2, ends - 1)
    for shift, at in zip((32, 24, 16, 8, 0), sampled, strict=True):
        fp |= raw[at].astype(np.int64) << shift
    return starts, ends, fp


def _prefix_hashes(fp: np.ndarray) -> np.ndarray:
    """``P`` with ``P[j]`` = sum of fp[i] * BASE**i for i < j (wrapping int64); length ``len(fp) + 1``."""
    pw, _ = _powers(len(fp) + 1)
    prefix = np.zeros(len(fp) + 1, dtype=np.int64)
    np.multiply(fp, pw[: len(fp)], out=prefix[1:])
    np.cumsum(prefix[1:], out=prefix[1:])
    return prefix


def _phrase_hashes(phrases: Sequence[bytes], chunk: int = 1 << 14) -> tuple[np.ndarray, np.ndarray]:
    """``phrase_hash`` of every phrase and its number of words, in numpy chunks."""
    hashes, counts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for first in range(0, len(phrases), chunk):
        part = phrases[first : first + chunk]
        lengths = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        offsets = np.cumsum(lengths + 1) - lengths  # where each phrase begins in " p0 p1 ... "
        starts, _, fp = _word_fingerprints(np.frombuffer(b" " + b" ".join(part) + b" ", dtype=np.uint8))
        first_word = np.searchsorted(starts, offsets)
        words = np.diff(first_word, append=len(starts))
        _, inv = _powers(len(fp) + 1)
        prefix = _prefix_hashes(fp)
        hashes.append((prefix[first_word + words] - prefix[first_word]) * inv[first_word])
        counts.append(words)
    return np.concatenate(hashes), np.concatenate(counts)


def screen_rule(drop_shared: bool = False) -> str:
    """The screen's rule in words, for manifests (``drop_shared`` as :func:`build_index` takes it)."""
    rule = "word 8-grams, >=50% of one item's phrases (data_prep.decontaminate)"
    if drop_shared:
        rule += "; phrases two distinct held-out items share are template, not indexed"
        rule += " (build_index drop_shared)"
    return rule


def build_index(
    benchmarks: Sequence[tuple[str, Sequence[BenchmarkItem], bool]],
    threshold: float = THRESHOLD,
    n_phrases: int = PHRASES_PER_ITEM,
    short_min_words: int = SHORT_MIN_WORDS,
    *,
    drop_shared: bool = False,
) -> PhraseIndex:
    """Index ``(name, items, exhaustive)`` benchmarks in chain order.

    ``drop_shared`` is for held-out sets of generated tasks, whose items are a few templates with values
    filled in: a phrase that two or more distinct items contain (in any of the sets) is template, not
    content, and would remove every training task of that template (the embedded SFT mix lost all of two
    puzzle types and nearly all stdin/stdout code problems that way). Such phrases are not indexed; an
    item left with none is indexed by its whole normalised text, so an exact copy is still caught. Off
    for benchmarks, where the paper's rule applies as written.
    """
    per_set = [
        [item_phrases(i.text, exhaustive, n_phrases, short_min_words=short_min_words) for i in items]
        for _, items, exhaustive in benchmarks
    ]
    if drop_shared:
        per_set = _without_shared(benchmarks, per_set)
    index = PhraseIndex()
    pid_of: dict[bytes, int] = {}
    phrase_items = index.phrase_items
    for b_idx, ((name, items, _), per_item) in enumerate(zip(benchmarks, per_set, strict=True)):
        index.benchmarks.append(name)
        index.skipped_short[name] = 0
        for item, phrases in zip(items, per_item, strict=True):
            if not phrases:
                index.skipped_short[name] += 1
                continue
            gid = len(index.items)
            index.items.append((b_idx, item.id, len(phrases), max(1, math.ceil(threshold * len(phrases)))))
            for phrase in phrases:
                pid = pid_of.get(phrase)
                if pid is None:
                    pid_of[phrase] = len(phrase_items)
                    phrase_items.append([gid])
                else:
                    phrase_items[pid].append(gid)
    index.phrases = list(pid_of)  # insertion order: pid order
    return index.finalize()


def _without_shared(
    benchmarks: Sequence[tuple[str, Sequence[BenchmarkItem], bool]], per_set: list[list[list[bytes]]]
) -> list[list[list[bytes]]]:
    """Each item's phrases minus those another distinct item has too (its whole text if none is left)."""
    distinct: dict[bytes, list[bytes]] = {}  # normalised text -> phrases (an item in two sets counts once)
    for (_, items, _), per_item in zip(benchmarks, per_set, strict=True):
        for item, phrases in zip(items, per_item, strict=True):
            distinct.setdefault(normalize(item.text), phrases)
    shared = Counter(p for phrases in distinct.values() for p in phrases)
    return [
        [
            own if (own := [p for p in phrases if shared[p] == 1]) or not phrases else [normalize(item.text)]
            for item, phrases in zip(items, per_item, strict=True)
        ]
        for (_, items, _), per_item in zip(benchmarks, per_set, strict=True)
    ]


_POWERS: dict[str, np.ndarray] = {}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and BASE**-i mod 2**64 (as wrapping int64) for i < n, cached and grown geometrically."""
    if "pw" not in _POWERS or len(_POWERS["pw"]) < n:
        size = max(2 * n, 2 * len(_POWERS.get("pw", ())), 1 << 16)  # headroom: one growth, not one a batch
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


def _scan_hash(index: PhraseIndex, texts: Sequence[bytes]) -> list[set[int]]:
    joined = b" " + _SEP.join(texts) + b" "
    raw = np.frombuffer(joined, dtype=np.uint8)
    starts, ends, fp = _word_fingerprints(raw)
    _, inv = _powers(len(fp) + 1)
    prefix = _prefix_hashes(fp)
    found: list[set[int]] = [set() for _ in texts]
    seps: np.ndarray | None = None
    for k in index.window_words:
        windows = len(fp) - k + 1
        if windows <= 0:
            continue
        h = (prefix[k:] - prefix[:windows]) * inv[:windows]  # the window of words c .. c + k - 1
        cand = np.flatnonzero(index.bitmap[h & ((1 << _BITMAP_BITS) - 1)])
        if not len(cand):
            continue
        hc = h[cand]
        pos = np.searchsorted(index.hashes, hc)
        hit = index.hashes[np.minimum(pos, len(index.hashes) - 1)] == hc
        for c, p in zip(cand[hit].tolist(), pos[hit].tolist(), strict=True):
            left = int(starts[c])
            window = b" " + b" ".join(joined[left : int(ends[c + k - 1])].split()) + b" "
            seps = np.flatnonzero(raw == 1) if seps is None else seps
            row = int(np.searchsorted(seps, left))
            while p < len(index.hashes) and index.hashes[p] == h[c]:  # every phrase with this hash
                pid = int(index.hash_pids[p])
                if index.phrases[pid] == window:
                    found[row].add(pid)
                p += 1
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


def _scan_task(index: PhraseIndex, task: tuple[list[str], str]) -> list[Match | None]:
    return scan_texts(index, *task)


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
    payloads: deque[list[object]] = deque()  # results come back in task order

    def tasks() -> Iterator[tuple[list[str], str]]:
        for batch in _batches(items, batch_bytes):
            payloads.append([p for p, _ in batch])
            yield [t for _, t in batch], engine

    for matches in map_ordered(index, _scan_task, tasks(), workers):
        yield from zip(payloads.popleft(), matches, strict=True)
