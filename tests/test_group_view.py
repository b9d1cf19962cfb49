"""One sample→objective adapter for both backends: identical groups get identical advantages.

The same episodes are built twice: as embedded ``infra.embedded.sampling.Sample`` groups, run through
``infra.embedded.rl.group_advantage_values`` (the shaping + advantage part of ``RLTrainer.update``, no
model needed), and as slime-shaped samples run through ``slime_hooks.post_process_rewards``. slime itself
is not importable here (it needs CUDA, SGLang and Megatron), so ``SlimeSample`` is a small dataclass
double with only the fields the hook reads (``reward``, ``response_length``, ``loss_mask``, ``status``,
``metadata``, ``remove_sample``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from infra.config import RLConfig
from infra.embedded import rl as rl_mod
from infra.embedded.sampling import Group, Sample, drop_aborted
from infra.objectives import group_advantages, shape_group
from infra.objectives.group_view import (
    GroupView,
    SampleView,
    advantage_kwargs,
    shaping_kwargs,
    view_from_embedded,
    view_from_slime,
)
from infra.production import slime_hooks
from rewards.contract import RewardResult


class Status(enum.Enum):
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"


@dataclass
class SlimeSample:
    """Double of slime's ``Sample``: only what ``post_process_rewards`` reads and writes."""

    reward: Any = None
    response_length: int = 0
    loss_mask: list[int] | None = None
    status: Status = Status.COMPLETED
    metadata: dict = field(default_factory=dict)
    remove_sample: bool = False

    def get_reward_value(self, args: Any) -> Any:
        return self.reward


@dataclass
class Episode:
    """One response, described once and rendered for both backends."""

    score: float
    length: int
    failure: str | None = None
    loss_mask: list[int] | None = None
    turns: int | None = None
    invalid_tool_calls: int | None = None
    solved: bool | None = None
    aborted: bool = False

    def facts(self) -> dict[str, Any]:
        keys = ("turns", "invalid_tool_calls", "solved")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def embedded(self) -> Sample:
        reward = RewardResult(score=self.score, failure=self.failure, aborted=self.aborted)
        return Sample(
            token_ids=list(range(self.length)),
            logprobs=[0.0] * self.length,
            finish_reason="stop",
            reward=reward,
            loss_mask=self.loss_mask,
            metrics=self.facts(),
        )

    def slime(self) -> SlimeSample:
        if self.aborted:
            return SlimeSample(reward=None, response_length=self.length, status=Status.ABORTED)
        meta = {"reward_failure": self.failure, "reward_components": {}, **self.facts()}
        return SlimeSample(self.score, self.length, self.loss_mask, metadata=meta)


MAX_LEN = 16
ULTRA = {
    "n0": 2, "nmax": 6, "lam": 0.1, "c_tool": 0.3, "B": 4, "alpha": 0.2, "L": 8,
    "c_out": 0.25, "B_tail": 10, "L_tail": 6, "eta": 0.5,
}  # fmt: skip
SHAPINGS = {
    "none": {"kind": "none"},
    "shortest_correct_length": {"kind": "shortest_correct_length", "coef": 0.5},
    "positive_length": {"kind": "positive_length", "coef": 0.3, "params": {"start_len": 4}},
    "ultramarine": {"kind": "ultramarine", "params": ULTRA},
}
ADVANTAGES = ("grpo", "mean_only", "fireflash")

# Four prompts of four episodes: partial credit with and without a failure, loss masks with zeros,
# multi-turn facts, explicit solved flags (both ways), negative (reward-model) scores.
GROUPS = [
    [
        Episode(1.0, 5),
        Episode(1.0, 12, turns=3, invalid_tool_calls=1),
        Episode(0.0, 8, failure="wrong"),
        Episode(0.5, 16, failure="partial"),
    ],
    [
        Episode(1.0, 14, loss_mask=[1] * 6 + [0] * 4 + [1] * 4, turns=4, invalid_tool_calls=2),
        Episode(0.5, 9, loss_mask=[1, 1, 0, 0, 0, 1, 1, 1, 1], turns=2),
        Episode(1.0, 3, solved=False),
        Episode(0.25, 11, solved=True, turns=7, invalid_tool_calls=5),
    ],
    [
        Episode(2.5, 10),
        Episode(-1.0, 4),
        Episode(0.7, 15, loss_mask=[1] * 5 + [0] * 10, turns=5),
        Episode(1.8, 6, invalid_tool_calls=1),
    ],
    [Episode(0.0, 7, failure="no_answer"), Episode(0.0, 9, failure="wrong")] * 2,
]


def rl_config(shaping: dict[str, Any], advantage: str, group_size: int) -> tuple[RLConfig, rl_mod.Phase]:
    rl = RLConfig.model_validate(
        {
            "rollout": {
                "prompts_per_step": 1,
                "samples_per_prompt": group_size,
                "max_response_tokens": MAX_LEN,
                "num_rollouts": 1,
            },
            "policy": {"estimator": "grpo", "advantage": advantage},
            "shaping": shaping,
        }
    )
    return rl, rl_mod.Phase(0, rl.rollout, rl.policy)


def slime_args(shaping: dict[str, Any], advantage: str, group_size: int) -> SimpleNamespace:
    return SimpleNamespace(
        n_samples_per_prompt=group_size,
        rollout_max_response_len=MAX_LEN,
        rufus_advantage=advantage,
        rufus_mask_truncated=False,
        rufus_shaping=shaping,
    )


def embedded_advantages(groups: list[list[Episode]], shaping: dict, advantage: str) -> list[list[float]]:
    """Per group, the advantages of the embedded trainer (aborted samples dropped as collect_groups does)."""
    out = []
    for episodes in groups:
        rl, phase = rl_config(shaping, advantage, len(episodes))
        group = drop_aborted(Group(None, [0], [e.embedded() for e in episodes]))
        out.append(rl_mod.group_advantage_values(group, rl, phase)[1])
    return out


@pytest.mark.parametrize("advantage", ADVANTAGES)
@pytest.mark.parametrize("shaping", sorted(SHAPINGS))
def test_both_backends_give_identical_advantages(shaping: str, advantage: str) -> None:
    cfg = SHAPINGS[shaping]
    expected = embedded_advantages(GROUPS, cfg, advantage)
    flat = [e.slime() for episodes in GROUPS for e in episodes]
    raw, adv = slime_hooks.post_process_rewards(slime_args(cfg, advantage, 4), flat)
    assert [adv[i : i + 4] for i in range(0, len(adv), 4)] == expected  # exact, not approx
    assert raw == [e.score for episodes in GROUPS for e in episodes]
    assert not any(s.remove_sample for s in flat)
    assert any(a != 0.0 for group in expected for a in group)


@pytest.mark.parametrize("advantage", ADVANTAGES)
@pytest.mark.parametrize("shaping", sorted(SHAPINGS))
def test_aborted_samples_leave_the_group_in_both(shaping: str, advantage: str) -> None:
    """slime sees aborted samples in place; the embedded trainer drops them before (``drop_aborted``)."""
    cfg = SHAPINGS[shaping]
    groups = [
        [GROUPS[0][0], Episode(0.0, 4, aborted=True), *GROUPS[0][1:]],
        [*GROUPS[1][:2], Episode(0.0, 2, aborted=True), *GROUPS[1][2:]],
    ]
    expected = embedded_advantages(groups, cfg, advantage)
    flat = [e.slime() for episodes in groups for e in episodes]
    raw, adv = slime_hooks.post_process_rewards(slime_args(cfg, advantage, 5), flat)
    aborted = [i for i, s in enumerate(flat) if s.status is Status.ABORTED]
    assert aborted == [1, 7]
    assert all(adv[i] == 0.0 and flat[i].remove_sample for i in aborted)
    kept = [a for i, a in enumerate(adv) if i not in aborted]
    assert [kept[:4], kept[4:]] == expected
    assert raw[1] == pytest.approx(sum(e.score for e in GROUPS[0]) / 4)


def test_stage_01_to_03_embedded_numbers_are_unchanged() -> None:
    """Single-turn groups (no loss mask, no episode facts): the rules the embedded chain used before.

    Stage 01 shapes with ``shortest_correct_length`` (correct = ``reward.passed``, lengths = all response
    tokens, max_len = the rollout budget); 02 and 03 use no shaping; all three use GRPO advantages.
    """
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        scores = [float(x) for x in torch.randint(0, 3, (n,), generator=gen) / 2]
        lengths = [int(x) for x in torch.randint(1, MAX_LEN + 1, (n,), generator=gen)]
        failures = [None if s == 1.0 else "partial" if s else "wrong" for s in scores]
        episodes = [Episode(s, n_tok, f) for s, n_tok, f in zip(scores, lengths, failures, strict=True)]
        group = Group(None, [0], [e.embedded() for e in episodes])
        correct = [s.reward.passed for s in group.samples]
        for cfg, kw in (
            ({"kind": "none"}, {}),
            (
                {"kind": "shortest_correct_length", "coef": 0.5},
                {"lengths": lengths, "correct": correct, "max_len": MAX_LEN, "coef": 0.5},
            ),
        ):
            shaped = shape_group(cfg["kind"], group.scores, **kw)
            before = group_advantages("grpo", torch.tensor(shaped)).tolist()
            rl, phase = rl_config(cfg, "grpo", n)
            assert rl_mod.group_advantage_values(group, rl, phase) == (shaped, before)


def test_rules_are_decided_once() -> None:
    view = GroupView(
        (
            SampleView(1.0, True, response_tokens=10, trained_tokens=4, turns=3, invalid_tool_calls=1),
            SampleView(0.5, False, response_tokens=6, trained_tokens=6, solved=True),
            SampleView(0.0, False, response_tokens=2, trained_tokens=2),
        ),
        max_len=12,
    )
    scl = shaping_kwargs("shortest_correct_length", view, 0.5, {})
    assert scl == {"lengths": [10, 6, 2], "correct": [True, False, False], "max_len": 12, "coef": 0.5}
    assert shaping_kwargs("positive_length", view, 0.3, {"start_len": 4.0})["start_len"] == 4.0
    ultra = shaping_kwargs("ultramarine", view, 0.0, ULTRA)
    assert ultra["output_tokens"] == [4, 6, 2] and ultra["turns"] == [3, 1, 1]
    assert ultra["invalid_tool_calls"] == [1, 0, 0]
    assert shaping_kwargs("none", view, 0.0, {}) == {} and advantage_kwargs("grpo", view) == {}
    assert advantage_kwargs("fireflash", view) == {"solved": [True, True, False], "num_tokens": [10, 6, 2]}
    with pytest.raises(ValueError, match="unknown shaping kind"):
        shaping_kwargs("kimi", view, 0.0, {})


def test_views_from_both_backends_agree_and_read_their_sources() -> None:
    episodes = [e for group in GROUPS for e in group]
    emb = view_from_embedded([e.embedded() for e in episodes], MAX_LEN)
    slime = view_from_slime(
        SimpleNamespace(rollout_max_response_len=MAX_LEN),
        [e.slime() for e in episodes],
        [e.score for e in episodes],
    )
    assert emb == slime
    # embedded: metrics first, then reward.details, then the defaults
    s = Episode(1.0, 3).embedded()
    s.reward = RewardResult(score=1.0, details={"turns": 4, "invalid_tool_calls": 2, "solved": False})
    s.metrics = {"turns": 6}
    (v,) = view_from_embedded([s], MAX_LEN).samples
    assert (v.turns, v.invalid_tool_calls, v.solved, v.passed) == (6, 2, False, True)
    (d,) = view_from_embedded([Episode(0.0, 3).embedded()], MAX_LEN).samples
    assert (d.turns, d.invalid_tool_calls, d.solved) == (1, 0, None)
    # slime: failure in metadata makes a positive reward incorrect; max_len falls back to the longest
    fail = SlimeSample(0.5, 7, metadata={"reward_failure": "partial"})
    ok = SlimeSample(0.5, 9, loss_mask=[1, 0, 1, 1, 0, 0, 1, 1, 1])
    view = view_from_slime(SimpleNamespace(), [fail, ok], [0.5, 0.5])
    assert [v.passed for v in view.samples] == [False, True] and view.max_len == 9
    assert [v.trained_tokens for v in view.samples] == [7, 6]
