"""Shared by the sampling benchmarks: a base model for the embedded sampler, loaded as a stage loads it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def load_base(name: str, threads: int) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` of base ``name`` (``smollm2-135m`` or ``micro``): eval mode, float32.

    ``threads`` sets torch's intra-op threads first.
    """
    import torch

    from infra.embedded.models import load_model, load_tokenizer, materialize

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = materialize(name, Path(tmp) / "base")
        return load_model(folder).eval(), load_tokenizer(folder)
