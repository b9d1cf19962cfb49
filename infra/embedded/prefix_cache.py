"""A prefix KV cache for the embedded ``/generate`` server: reuse the keys/values of tokens seen before.

An agent episode sends its whole transcript with every model call, and the samples of one task share
their prompt (the system turn with every tool schema is most of it), so without reuse the server
re-encodes the same hundreds of tokens on every call. SGLang keeps a radix tree of cached prefixes for
this; here the same idea is a short list of finished sequences with their per-layer keys and values: a new
request reuses the longest common prefix with any of them and encodes only the rest
(:func:`infra.embedded.generation.generate_rows`). Entries are evicted least recently used beyond
``max_tokens``. A cache belongs to one set of weights: the rollout that owns it drops it afterwards.

Hand-written: transformers' caches hold one batch's state, not a store of reusable prefixes.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

#: Per layer ``(keys, values)``, each ``[1, kv_heads, tokens, head_dim]``.
LayerKV = list[tuple[torch.Tensor, torch.Tensor]]


class PrefixKVCache:
    """Finished sequences and their keys/values, looked up by longest common prefix."""

    def __init__(self, max_tokens: int = 150_000) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, tuple[np.ndarray, LayerKV]] = OrderedDict()
        self._next = 0
        self.tokens = 0
        self.hits = 0  # tokens served from the cache (for metrics and tests)
        self.misses = 0  # tokens encoded

    def lookup(self, ids: list[int]) -> tuple[int, LayerKV | None]:
        """Return ``(n, kv)``: the longest cached prefix of ``ids`` (``n`` tokens) and its keys/values."""
        query = np.asarray(ids, dtype=np.int64)
        best, best_key = 0, None
        for key, (seq, _) in self._entries.items():
            m = min(len(seq), len(query))
            if m <= best:
                continue
            same = seq[:m] == query[:m]
            n = m if bool(same.all()) else int(np.argmin(same))
            if n > best:
                best, best_key = n, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key][1]

    def put(self, ids: list[int], kv: LayerKV) -> None:
        """Store the keys/values of ``ids`` (dropping stored sequences that are prefixes of it).

        ``kv`` is stored as given, so it must be the caller's own tensors, not views of a batch's buffers.
        """
        seq = np.asarray(ids, dtype=np.int64)
        for key in [
            k for k, (s, _) in self._entries.items() if len(s) <= len(seq) and (s == seq[: len(s)]).all()
        ]:
            self.tokens -= len(self._entries.pop(key)[0])
        self._entries[self._next] = (seq, list(kv))
        self._next += 1
        self.tokens += len(seq)
        while self.tokens > self.max_tokens and len(self._entries) > 1:
            self.tokens -= len(self._entries.popitem(last=False)[1][0])
