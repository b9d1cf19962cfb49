"""Decontamination throughput: MB/s per core of the hash scan vs pyahocorasick vs a naive phrase loop.

Same benchmark index and the same corpus in one run. The index is sized like the paper's list (~7K
sampled items × 20 phrases plus ~300 exhaustively screened math/knowledge items); the corpus is
Zipf-distributed words with punctuation, capitals and planted copies. The naive per-phrase substring
loop is timed on a slice of the corpus (it is orders of magnitude slower) and compared per MB.

Run: ``python benchmarks/bench_decontam.py [--mb 20] [--workers 2]``. Goal: hash >= 100x naive and
>= 50 MB/s per core.
"""

from __future__ import annotations

import argparse
import random
import string
import time

from data_prep.benchmarks import BenchmarkItem
from data_prep.decontaminate import build_index, iter_scan, scan_texts


def _vocab(rng: random.Random, n: int = 50_000) -> tuple[list[str], list[float]]:
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10))) for _ in range(n)]
    return words, [1.0 / (i + 1) for i in range(n)]


def _text(rng: random.Random, vocab: tuple[list[str], list[float]], n_words: int) -> str:
    words = rng.choices(vocab[0], weights=vocab[1], k=n_words)
    punct = rng.choices(["", "", "", ",", ".", "\n", ":"], k=n_words)
    return " ".join(w.capitalize() if p == "." else w + p for w, p in zip(words, punct, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=20.0, help="corpus size in MB")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--naive-seconds", type=float, default=5.0)
    args = parser.parse_args()
    rng = random.Random(0)
    vocab = _vocab(rng)
    chained = [
        (f"bench{b}", [BenchmarkItem(f"{b}-{i}", _text(rng, vocab, 120)) for i in range(700)], False)
        for b in range(10)
    ]
    exhaustive = [("aime24", [BenchmarkItem(f"m{i}", _text(rng, vocab, 90)) for i in range(300)], True)]
    t0 = time.perf_counter()
    index = build_index(chained + exhaustive)
    print(
        f"index: {len(index.items)} items, {len(index.phrases)} phrases, "
        f"built in {time.perf_counter() - t0:.1f}s"
    )

    corpus: list[str] = []
    size = 0
    while size < args.mb * 1e6:
        doc = _text(rng, vocab, rng.randint(100, 1500))
        if len(corpus) % 500 == 0:  # plant a copy of a benchmark item
            doc += "\n" + chained[len(corpus) % 10][1][len(corpus) % 700].text
        corpus.append(doc)
        size += len(doc.encode())
    mb = size / 1e6
    print(f"corpus: {len(corpus)} rows, {mb:.1f} MB")

    def rate(engine: str, texts: list[str]) -> tuple[float, int]:
        t = time.perf_counter()
        found = sum(m is not None for m in scan_texts(index, texts, engine))
        return sum(len(x.encode()) for x in texts) / 1e6 / (time.perf_counter() - t), found

    batch = []
    hash_rates, found_hash = [], 0
    for doc in corpus:  # 1 MB batches, as the streaming scanner uses
        batch.append(doc)
        if sum(len(d) for d in batch) >= 1 << 20:
            r, f = rate("hash", batch)
            hash_rates.append(r)
            found_hash += f
            batch = []
    hash_mbps = len(hash_rates) / sum(1 / r for r in hash_rates)
    scan_texts(index, ["warm-up builds the automaton"], "aho")
    aho_mbps, found_aho = rate("aho", corpus[: max(1, len(corpus) // 4)])
    naive_texts, t = [], time.perf_counter()
    naive_bytes = 0
    for doc in corpus:
        scan_texts(index, [doc], "naive")
        naive_texts.append(doc)
        naive_bytes += len(doc.encode())
        if time.perf_counter() - t > args.naive_seconds:
            break
    naive_mbps = naive_bytes / 1e6 / (time.perf_counter() - t)
    t = time.perf_counter()
    par_found = sum(m is not None for _, m in iter_scan(enumerate(corpus), index, workers=args.workers))
    par_mbps = mb / (time.perf_counter() - t)

    print(f"hash  (1 core): {hash_mbps:8.1f} MB/s  removed {found_hash}")
    print(f"aho   (1 core): {aho_mbps:8.1f} MB/s  (on 1/4 of the corpus, removed {found_aho})")
    print(f"naive (1 core): {naive_mbps:8.3f} MB/s  (on {naive_bytes / 1e6:.2f} MB)")
    print(f"hash / naive = {hash_mbps / naive_mbps:,.0f}x   hash / aho = {hash_mbps / aho_mbps:.1f}x")
    print(
        f"parallel ({args.workers} workers, streaming incl. IPC): {par_mbps:.1f} MB/s total, "
        f"{par_mbps / args.workers:.1f} MB/s per core, removed {par_found}"
    )
    print(
        f"goal >=100x naive: {'met' if hash_mbps / naive_mbps >= 100 else 'NOT met'}; "
        f">=50 MB/s per core: {'met' if hash_mbps >= 50 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
