"""Offline pass-rate filters (learnability, correctness, difficulty bands) for RL prompt sets.

Given prompt rows, a generation backend ``generate(prompts, n) -> list[list[str]]`` (the embedded
backend here, SGLang at scale, or a teacher endpoint) and the stage's reward from
:mod:`rewards.contract`, compute each prompt's pass rate and apply a band rule. Rules from the papers:

* Reasoning RL learnability: drop pass rate > 0.8 and drop zero observed success;
* Coding RL drop-all-pass: drop > 0.8 on 4 warm-up samples, keep zero-pass problems;
* teacher solvability / correctness: keep only if at least one sample passes;
* FireFlash: keep pass rate in [15%, 85%] measured on at least 4 samples;
* Search Agent: a tool-free pre-pass drops questions solved in any of 8 tool-free rollouts, then keep
  0 < correct < 4 of 8 tool rollouts.

Aborted rewards (infrastructure failures) never count as failures: they are left out of the
denominator, and a prompt with no scored sample is dropped as ``aborted``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from data_prep.schema import PromptRow
from rewards.contract import RewardFn, RewardRequest, safe_score

Generate = Callable[[list[list[dict]], int], list[list[str]]]


@dataclass(frozen=True)
class BandRule:
    """A keep/drop rule on pass counts; every drop has a named reason."""

    name: str
    n_samples: int
    drop_above: float | None = None  # drop if pass rate > this
    drop_zero: bool = False  # drop if no sample passed
    keep_rate: tuple[float, float] | None = None  # keep only if lo <= rate <= hi
    keep_count: tuple[int, int] | None = None  # keep only if lo < passes < hi (exclusive)
    drop_any_pass: bool = False  # pre-pass: drop if any sample passed
    min_samples: int = 1

    def decide(self, passes: int, scored: int) -> str | None:
        """Return the drop reason, or None to keep."""
        if scored == 0:
            return "aborted"
        if scored < self.min_samples:
            return "too_few_samples"
        rate = passes / scored
        if self.drop_any_pass and passes > 0:
            return "solved_without_tools"
        if self.drop_zero and passes == 0:
            return "zero_pass"
        if self.drop_above is not None and rate > self.drop_above:
            return "too_easy"
        if self.keep_rate is not None and not self.keep_rate[0] <= rate <= self.keep_rate[1]:
            return "outside_band"
        if self.keep_count is not None and not self.keep_count[0] < passes < self.keep_count[1]:
            return "outside_band"
        return None


def reasoning_learnability(n: int = 8) -> BandRule:
    """Reasoning RL: drop pass rate > 0.8 and zero observed success."""
    return BandRule("reasoning_learnability", n, drop_above=0.8, drop_zero=True)


def coding_drop_all_pass(n: int = 4, drop_above: float = 0.8, drop_zero: bool = False) -> BandRule:
    """Coding RL: drop problems solved above ``drop_above`` of ``n`` warm-up samples; zero-pass problems
    stay unless ``drop_zero`` (RA keeps them; an option for small policies)."""
    return BandRule("coding_drop_all_pass", n, drop_above=drop_above, drop_zero=drop_zero)


def teacher_solvability(n: int = 4) -> BandRule:
    """Correctness/quality screen: keep only if at least one teacher sample passes."""
    return BandRule("teacher_solvability", n, drop_zero=True)


def fireflash_band(n: int = 4) -> BandRule:
    """FireFlash: keep pass rate in [15%, 85%] with at least 4 samples."""
    return BandRule("fireflash_band", max(n, 4), keep_rate=(0.15, 0.85), min_samples=4)


def search_agent_prepass(n: int = 8) -> BandRule:
    """Search Agent pass 1: drop questions solved by any tool-free rollout."""
    return BandRule("search_agent_tool_free", n, drop_any_pass=True)


def search_agent_band(n: int = 8) -> BandRule:
    """Search Agent pass 2: keep 0 < correct < 4 of 8 tool rollouts."""
    return BandRule("search_agent_band", n, keep_count=(0, 4))


@dataclass
class FilterReport:
    """Kept rows, dropped ids per reason and each prompt's pass counts."""

    rule: str
    kept: list[PromptRow] = field(default_factory=list)
    dropped: dict[str, list[str]] = field(default_factory=dict)
    pass_counts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Kept count and dropped count per reason."""
        return {
            "kept": len(self.kept),
            **{f"dropped_{r}": len(ids) for r, ids in sorted(self.dropped.items())},
        }


def pass_counts(
    rows: Sequence[PromptRow], generate: Generate, reward: RewardFn, n: int
) -> list[tuple[int, int]]:
    """Return ``(passes, scored)`` per row from ``n`` generations each (aborted samples not scored)."""
    completions = generate([row.prompt for row in rows], n)
    if len(completions) != len(rows):
        raise ValueError(f"generate returned {len(completions)} groups for {len(rows)} prompts")
    out = []
    for row, group in zip(rows, completions, strict=True):
        results = [
            safe_score(
                reward, RewardRequest(prompt=row.prompt, response=c, label=row.label, metadata=row.metadata)
            )
            for c in group
        ]
        scored = [r for r in results if not r.aborted]
        out.append((sum(r.passed for r in scored), len(scored)))
    return out


def apply_rule(rows: Sequence[PromptRow], counts: Sequence[tuple[int, int]], rule: BandRule) -> FilterReport:
    """Split ``rows`` by ``rule`` given their pass counts."""
    report = FilterReport(rule.name)
    for row, (passes, scored) in zip(rows, counts, strict=True):
        report.pass_counts[row.id] = (passes, scored)
        reason = rule.decide(passes, scored)
        if reason is None:
            report.kept.append(row)
        else:
            report.dropped.setdefault(reason, []).append(row.id)
    return report


def filter_prompts(
    rows: Sequence[PromptRow], rule: BandRule, generate: Generate, reward: RewardFn
) -> FilterReport:
    """Generate, score and filter ``rows`` with one rule."""
    return apply_rule(rows, pass_counts(rows, generate, reward, rule.n_samples), rule)


def search_agent_filter(
    rows: Sequence[PromptRow],
    generate_tool_free: Generate,
    generate_with_tools: Generate,
    reward: RewardFn,
    n: int = 8,
) -> tuple[FilterReport, FilterReport]:
    """Run the Search Agent tool-free pre-pass, then the 0 < c < 4 of 8 band on what survived."""
    first = filter_prompts(rows, search_agent_prepass(n), generate_tool_free, reward)
    second = filter_prompts(first.kept, search_agent_band(n), generate_with_tools, reward)
    return first, second


def summarize(reports: Sequence[FilterReport]) -> dict[str, dict[str, int]]:
    """Counts per rule, for the manifest."""
    return {r.rule: dict(Counter(r.counts())) for r in reports}
