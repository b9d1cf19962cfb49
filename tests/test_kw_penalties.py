"""Stage 08's group penalties (rewards.kw_penalties) on hand-computed groups, and their plug-in point.

Every expected value below is worked out by hand from the paper's prose with the constants ``P``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infra.config import ShapingConfig
from infra.objectives import shape_group
from infra.objectives.group_view import GroupView, SampleView, shaping_kwargs
from infra.objectives.shaping import ULTRAMARINE_KEYS
from rewards.kw_penalties import EpisodeStats, KWPenaltyParams, apply_penalties

P = KWPenaltyParams(
    n0=10,
    nmax=20,
    lam=0.1,
    c_tool=0.3,
    B=1000,
    alpha=0.2,
    L=1000,
    c_out=0.25,
    B_tail=3000,
    L_tail=1000,
    eta=0.5,
)


def ep(reward: float, tokens: int = 0, turns: int = 1, invalid: int = 0) -> EpisodeStats:
    return EpisodeStats(reward=reward, output_tokens=tokens, turns=turns, invalid_tool_calls=invalid)


def close(got: list[float], want: list[float]) -> None:
    assert got == pytest.approx(want, abs=1e-12), (got, want)


def test_positive_faded_mean_turns_length_penalties_on() -> None:
    group = [ep(1.0, 1500, 5), ep(0.5, 2500, 15, 1), ep(0.0, 3500, 3)]
    # faded: 1.0, 0.5 * (1 - 0.5) = 0.25, 0.0 -> mean > 0, gate on
    # 1: output 0.2 * 500/1000 = 0.1                  -> 0.9
    # 2: tool 0.1, output min(0.2 * 1.5, 0.25) = 0.25 -> 0.25 - 0.1 - 0.25 = -0.1
    # 3: output cap 0.25, tail 0.5 * 500/1000 = 0.25  -> -0.5
    close(apply_penalties(group, P), [0.9, -0.1, -0.5])


def test_non_positive_faded_mean_leaves_length_alone_but_still_charges_invalid_calls() -> None:
    # raw mean 0.4 > 0, but the fade takes episode 1 to 0 at nmax: faded mean 0, gate off
    group = [ep(0.8, 5000, 20), ep(0.0, 4000, 2, 5)]
    close(apply_penalties(group, P), [0.0, -0.3])
    # a failed group is not pushed to be shorter
    close(apply_penalties([ep(0.0, 9000), ep(-0.2, 9000, 40)], P), [0.0, -0.2])


@pytest.mark.parametrize(
    ("turns", "want"),
    [(3, 1.0), (10, 1.0), (15, 0.5), (18, 0.2), (20, 0.0), (35, 0.0)],
)
def test_turn_fade_at_n0_midway_nmax_and_beyond(turns: int, want: float) -> None:
    close(apply_penalties([ep(1.0, 0, turns)], P), [want])


def test_turn_fade_touches_only_positive_rewards() -> None:
    close(apply_penalties([ep(1.0, 0, 15), ep(-0.4, 0, 35)], P), [0.5, -0.4])


def test_invalid_tool_call_penalty_is_capped() -> None:
    group = [ep(1.0, 0, 1, m) for m in range(6)]
    close(apply_penalties(group, P), [1.0, 0.9, 0.8, 0.7, 0.7, 0.7])


def test_output_and_tail_caps() -> None:
    tokens = [1000, 1250, 2250, 3000, 3500, 4000, 10_000]
    # output: 0, 0.05, 0.25 (cap reached), then capped; tail: 0 up to 3000, 0.25, 0.5, capped at 0.5
    close(apply_penalties([ep(1.0, t) for t in tokens], P), [1.0, 0.95, 0.75, 0.75, 0.5, 0.25, 0.25])


def test_defaults_hand_computed() -> None:
    d = KWPenaltyParams()
    # turn 70 of fade 40..100 halves the reward; 16K tokens past the 32K allowance cost 0.1 * 0.5
    close(apply_penalties([ep(1.0, 32_768 + 16_384, 70)], d), [0.5 - 0.05])
    # far past the tail: output cap 0.2 + tail cap 0.3
    close(apply_penalties([ep(1.0, 500_000, 1)], d), [0.5])


def test_params_are_strict_and_ordered() -> None:
    with pytest.raises(ValidationError, match="gamma"):
        KWPenaltyParams(gamma=1.0)
    with pytest.raises(ValidationError, match="nmax"):
        KWPenaltyParams(n0=50, nmax=50)
    with pytest.raises(ValidationError, match="B_tail"):
        KWPenaltyParams(B=10_000, B_tail=5_000)
    with pytest.raises(ValidationError):
        KWPenaltyParams(lam=-0.1)
    with pytest.raises(ValueError, match="empty group"):
        apply_penalties([], P)


def test_plugs_into_the_recipe_shaping_and_the_backends_group_view() -> None:
    """The recipe block validates as ``rl.shaping`` and the trainers' path gives the same numbers."""
    block = ShapingConfig.model_validate(P.shaping())
    assert block.kind == "ultramarine" and sorted(block.params) == sorted(ULTRAMARINE_KEYS)
    group = [ep(1.0, 1500, 5), ep(0.5, 2500, 15, 1), ep(0.0, 3500, 3)]
    view = GroupView(
        tuple(
            SampleView(
                score=e.reward,
                passed=e.reward > 0,
                response_tokens=e.output_tokens + 777,  # tool output tokens: not charged
                trained_tokens=e.output_tokens,
                turns=e.turns,
                invalid_tool_calls=e.invalid_tool_calls,
            )
            for e in group
        ),
        max_len=8192,
    )
    kwargs = shaping_kwargs(block.kind, view, block.coef, block.params)
    close(shape_group(block.kind, view.scores, **kwargs), apply_penalties(group, P))
