"""Per-seed statistics of a stage's metric: the rise verdict and the 'mean (min – max)' cells.

Verdict for a target metric: a one-sided one-sample t-test of the per-seed changes against zero
(``scipy.stats.ttest_1samp``, ``alternative="greater"``). "rise" when p < 0.05 — the mean change stands
out from the seed-to-seed spread of the changes; "within spread" when the mean change is positive but
p ≥ 0.05; "no rise" otherwise; "too few seeds" when fewer than two seeds measured it. Guardrail rows carry
"guardrail" instead of a verdict. Used by the seed report (:mod:`eval.seeds`) and its per-type tables
(:mod:`eval.seed_breakdown`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: One-sided significance level of the rise verdict.
ALPHA = 0.05


@dataclass
class SeedRow:
    """One stage × metric across seeds; lists hold one entry per run (None where it was not measured)."""

    stage: str
    metric: str
    role: str
    inputs: list[float | None] = field(default_factory=list)
    outputs: list[float | None] = field(default_factory=list)

    @property
    def changes(self) -> list[float | None]:
        """Return output − input per seed (None where either is missing)."""
        return [
            None if a is None or b is None else b - a for a, b in zip(self.inputs, self.outputs, strict=True)
        ]

    @property
    def seeds(self) -> int:
        """Return how many seeds measured both input and output."""
        return sum(c is not None for c in self.changes)

    @property
    def p_value(self) -> float | None:
        """Return the one-sided t-test p-value of "mean change > 0" (None with fewer than two seeds)."""
        changes = [c for c in self.changes if c is not None]
        if len(changes) < 2:
            return None
        if max(changes) - min(changes) <= 1e-12:  # no spread (up to rounding): undefined, the sign decides
            return 0.0 if changes[0] > 0 else 1.0
        from scipy import stats  # imported here: the CLI loads this module, scipy is an extra

        return float(stats.ttest_1samp(changes, 0.0, alternative="greater").pvalue)

    @property
    def verdict(self) -> str:
        """Return the rise verdict for a target (see the module docstring) or "guardrail"."""
        if self.role != "target":
            return "guardrail"
        p = self.p_value
        if p is None:
            return "too few seeds"
        if p < ALPHA:
            return "rise"
        changes = [c for c in self.changes if c is not None]
        return "within spread" if sum(changes) > 0 else "no rise"


def fmt_stat(values: list[float | None], signed: bool = False, raw: bool = False) -> str:
    """Return 'mean (min – max)' in percent with one decimal ('–' when nothing was measured); a ``raw``
    metric (an unbounded score, ``eval.registry.RAW_METRICS``) as is, with two decimals."""
    vals = [(1 if raw else 100) * v for v in values if v is not None]
    if not vals:
        return "–"
    spec = ("+" if signed else "") + (".2f" if raw else ".1f")
    return f"{sum(vals) / len(vals):{spec}} ({min(vals):{spec}} – {max(vals):{spec}})"
