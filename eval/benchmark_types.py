"""The record types of the benchmark registry (``eval.registry``): a benchmark and where its release lives.

Kept apart so that the registry's entry tables (``eval.registry``, ``eval.registry_agentic``) can share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Harness = Literal["lm_eval", "native", "agent", "judge"]


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark's public release lives (an HF hub id, or a git repository when not on the hub)."""

    hub_id: str
    revision: str | None
    files: tuple[str, ...]
    license: str
    scorer_repo: str = ""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: source, loader, scorer, sampling, aggregation and its embedded stand-in."""

    name: str
    title: str
    column: str
    source: HubSource
    loader: str
    harness: Harness
    scorer: str
    k: int
    metrics: tuple[str, ...]
    max_gen_tokens: int
    embedded_metric: str
    lm_eval_task: str | None = None
    lm_eval_metric: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    strip_thinking: bool = True
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def aggregation(self) -> str:
        """Return the headline aggregation, e.g. 'avg@4' or 'pass@1'."""
        return self.metrics[0]


__all__ = ["Benchmark", "Harness", "HubSource"]
