"""Dynamic sampling of the embedded backend: band / nonzero-std filters, refill, aborted samples."""

from __future__ import annotations

from infra.config import DynamicSamplingConfig
from infra.embedded.sampling import Group, Sample, collect_groups, group_filter
from rewards.contract import RewardResult

# Scores of each prompt's group, by prompt id; None marks an aborted sample.
SCORES = {
    0: [0.0, 0.0, 0.0, 0.0],  # mean 0: out of band (0, 0.8], zero signal
    1: [1.0, 0.0, 0.0, 0.0],  # mean 0.25: kept
    2: [1.0, 1.0, 1.0, 1.0],  # mean 1: out of band, zero signal
    3: [1.0, 1.0, 1.0, 0.0],  # mean 0.75: kept
    4: [1.0, 1.0, None, 1.0],  # aborted sample leaves; remaining all 1: dropped
    5: [1.0, 0.0, None, None],  # mean 0.5 after removing the aborted ones: kept
    6: [None, None, None, None],  # nothing left: empty
    7: [0.0, 1.0, 1.0, 1.0],  # kept
    8: [1.0, 0.0, 1.0, 0.0],  # in band
}


def fake_rollout(prompts: list[int], attempt: int) -> list[Group]:
    """Deterministic stand-in for model rollouts: each prompt's group has the scores in SCORES."""
    groups = []
    for p in prompts:
        samples = [
            Sample(
                [1],
                [0.0],
                "stop",
                RewardResult(score=0.0, aborted=True) if s is None else RewardResult(score=s),
            )
            for s in SCORES[p]
        ]
        groups.append(Group(p, [0], samples))
    return groups


def drawer():
    state = {"next": 0, "calls": []}

    def draw(n: int) -> list[int]:
        out = [(state["next"] + i) % len(SCORES) for i in range(n)]
        state["next"] += n
        state["calls"].append(n)
        return out

    return draw, state


def test_band_filter_keeps_exactly_in_band_groups_and_refills():
    draw, state = drawer()
    keep = group_filter(DynamicSamplingConfig(filter="band", band=(0.0, 0.8)))
    groups, report = collect_groups(4, draw, fake_rollout, keep, over_sampling_factor=1.5, filtering=True)
    assert [g.row for g in groups] == [1, 3, 5, 7]
    assert state["calls"] == [6, 2]  # ceil(4 × 1.5) prompts, then a refill for the 1 still missing
    assert report.attempts == 2 and report.refilled_groups == 1 and report.kept_groups == 4
    assert report.dropped_groups == 3  # prompts 0, 2, 4
    assert report.empty_groups == 1 and report.aborted_samples == 1 + 2 + 4
    assert report.surplus_groups == 0
    assert report.zero_signal_groups == 3  # prompts 0, 2 and 4 (after its aborted sample left)
    assert sorted(report.dropped_means) == [0.0, 1.0, 1.0]
    assert [len(g.samples) for g in groups] == [4, 4, 2, 4]
    assert report.as_metrics()["zero_signal_group_fraction"] == 3 / 8


def test_in_band_groups_beyond_the_batch_are_surplus():
    draw, state = drawer()
    keep = group_filter(DynamicSamplingConfig(filter="band", band=(0.0, 0.8)))
    groups, report = collect_groups(1, draw, fake_rollout, keep, over_sampling_factor=4.0, filtering=True)
    assert [g.row for g in groups] == [1] and state["calls"] == [4]
    assert report.surplus_groups == 1 and report.dropped_groups == 2  # 3 is surplus; 0 and 2 out of band


def test_nonzero_std_and_no_filter():
    draw, _ = drawer()
    keep = group_filter(DynamicSamplingConfig(filter="nonzero_std"))
    groups, report = collect_groups(2, draw, fake_rollout, keep, over_sampling_factor=1.0, filtering=True)
    assert [g.row for g in groups] == [1, 3] and report.dropped_groups == 2
    draw, state = drawer()
    groups, report = collect_groups(
        3, draw, fake_rollout, group_filter(DynamicSamplingConfig()), filtering=False
    )
    assert [g.row for g in groups] == [0, 1, 2] and state["calls"] == [3] and report.dropped_groups == 0


def test_bounded_attempts_report_a_shortfall():
    keep = group_filter(DynamicSamplingConfig(filter="band", band=(0.9, 1.0)))
    groups, report = collect_groups(
        3, lambda n: [0] * n, fake_rollout, keep, over_sampling_factor=2.0, filtering=True, max_attempts=3
    )
    assert (
        groups == [] and report.attempts == 3 and report.shortfall_groups == 3 and report.drawn_groups == 18
    )
