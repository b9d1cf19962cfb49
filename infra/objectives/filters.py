"""Group sampling filters (DAPO-style dynamic sampling): decide, one group at a time, whether to keep it."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction


def band_keep(rewards: Sequence[float], lo: float, hi: float) -> bool:
    """Return True iff the group's mean reward lies in the half-open band ``(lo, hi]`` (RA §3.2: (0, 0.8]).

    The mean is computed exactly with ``fractions.Fraction`` so a group sitting on a boundary is decided
    by the band, not by rounding: three rewards of 0.8 average to 0.8000000000000002 in floats and would
    be dropped, while their exact mean equals the bound 0.8 and is kept.
    """
    if not rewards:
        raise ValueError("band_keep: empty group")
    if lo >= hi:
        raise ValueError(f"band_keep: need lo < hi, got ({lo}, {hi}]")
    mean = sum((Fraction(float(r)) for r in rewards), Fraction(0)) / len(rewards)
    return Fraction(lo) < mean <= Fraction(hi)


def nonzero_std_keep(rewards: Sequence[float]) -> bool:
    """Return True iff the rewards are not all equal (an all-equal group has zero advantage everywhere)."""
    if not rewards:
        raise ValueError("nonzero_std_keep: empty group")
    first = float(rewards[0])
    return any(float(r) != first for r in rewards)
