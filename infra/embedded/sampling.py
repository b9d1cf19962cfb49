"""Rollout groups and DAPO-style dynamic sampling: over-sample, filter groups, refill until the batch is full.

Hand-written because neither TRL nor slime exposes this as a function over groups: slime implements it
inside its rollout manager (``--over-sampling-batch-size`` + ``--dynamic-sampling-filter-path``), TRL has
no refill at all. :func:`collect_groups` takes the prompt source and the rollout as callables, so the same
loop serves single-turn RL here and the agent rollouts, and it reports everything it dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from infra.config import DynamicSamplingConfig
from infra.environments.base import Episode, Group
from infra.objectives import band_keep, nonzero_std_keep, remove_aborted

#: One scored response (or multi-turn episode) of a group; the environment contract's :class:`Episode`.
Sample = Episode


@dataclass
class SamplingReport:
    """What dynamic sampling did in one rollout step."""

    attempts: int = 0
    drawn_groups: int = 0
    kept_groups: int = 0
    dropped_groups: int = 0
    refilled_groups: int = 0
    surplus_groups: int = 0
    empty_groups: int = 0
    zero_signal_groups: int = 0
    aborted_samples: int = 0
    shortfall_groups: int = 0
    dropped_means: list[float] = field(default_factory=list)

    def as_metrics(self) -> dict[str, float]:
        """Return the report as flat metrics (``zero_signal_group_fraction`` over drawn groups)."""
        drawn = max(self.drawn_groups, 1)
        out = {k: float(v) for k, v in self.__dict__.items() if k != "dropped_means"}
        out["zero_signal_group_fraction"] = self.zero_signal_groups / drawn
        return out


def _keep_all(scores: list[float]) -> bool:
    return True


_FILTERS: dict[str, Callable[[DynamicSamplingConfig], Callable[[list[float]], bool]]] = {
    "none": lambda cfg: _keep_all,
    "nonzero_std": lambda cfg: nonzero_std_keep,
    "band": lambda cfg: partial(band_keep, lo=cfg.band[0], hi=cfg.band[1]),
}


def group_filter(cfg: DynamicSamplingConfig) -> Callable[[list[float]], bool]:
    """Return the keep-predicate over a group's raw scores for the configured filter."""
    return _FILTERS[cfg.filter](cfg)


def drop_aborted(group: Group) -> Group:
    """Return ``group`` without its aborted samples (infrastructure failures are never scored 0)."""
    flags = [s.reward.aborted for s in group.samples]
    kept = remove_aborted(group.samples, flags)
    return Group(group.row, group.prompt_ids, kept, aborted=group.aborted + sum(flags))


def collect_groups(
    need: int,
    draw: Callable[[int], list[Any]],
    rollout: Callable[[list[Any], int], list[Group]],
    keep: Callable[[list[float]], bool],
    *,
    over_sampling_factor: float = 1.0,
    filtering: bool = False,
    max_attempts: int = 8,
) -> tuple[list[Group], SamplingReport]:
    """Return ``need`` kept groups (fewer only after ``max_attempts``) and the report.

    Each attempt draws ``ceil(missing × over_sampling_factor)`` prompts (exactly ``missing`` when no filter
    is on), rolls them out (``rollout(prompts, attempt)``), removes aborted samples and keeps the groups
    whose raw scores pass ``keep``; kept groups beyond ``need`` are surplus and dropped.
    """
    if need < 1:
        raise ValueError(f"collect_groups: need must be >= 1, got {need}")
    report = SamplingReport()
    kept: list[Group] = []
    factor = over_sampling_factor if filtering else 1.0
    while len(kept) < need and report.attempts < max_attempts:
        missing = need - len(kept)
        prompts = draw(max(math.ceil(missing * factor), missing))
        groups = [drop_aborted(g) for g in rollout(prompts, report.attempts)]
        for g in groups:
            report.drawn_groups += 1
            report.aborted_samples += g.aborted
            if not g.samples:
                report.empty_groups += 1
                continue
            scores = g.scores
            if all(x == scores[0] for x in scores):
                report.zero_signal_groups += 1
            if not keep(scores):
                report.dropped_groups += 1
                report.dropped_means.append(sum(scores) / len(scores))
            elif len(kept) >= need:
                report.surplus_groups += 1
            else:
                kept.append(g)
                report.refilled_groups += int(report.attempts > 0)
        report.attempts += 1
    report.kept_groups = len(kept)
    report.shortfall_groups = need - len(kept)
    return kept, report
