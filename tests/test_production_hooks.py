"""slime hooks on CPU with slime-shaped Sample objects built here (slime itself cannot be installed:
it needs CUDA, SGLang and Megatron). The doubles copy only the fields and the Status enum the hooks use.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from infra.production import slime_hooks
from rewards.contract import RewardResult, register_reward


class Status(enum.Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class Sample:
    prompt: Any = ""
    response: str = ""
    label: Any = None
    reward: Any = None
    response_length: int = 0
    loss_mask: list[int] | None = None
    remove_sample: bool = False
    status: Status = Status.COMPLETED
    metadata: dict = field(default_factory=dict)
    Status = Status

    def get_reward_value(self, args):
        return self.reward


@register_reward("test_prod_hooks")
def _toy(req):
    if req.response == "infra":
        return RewardResult(score=0.0, aborted=True, failure="sandbox_boot")
    if req.response == "boom":
        raise RuntimeError("verifier crashed")
    return RewardResult(score=1.0 if req.response == req.label else 0.0)


def test_reward_scores_aborts_and_fails_closed():
    args = SimpleNamespace(rufus_reward="test_prod_hooks")
    ok = Sample(prompt=[{"role": "user", "content": "q"}], response="7", label="7")
    assert asyncio.run(slime_hooks.reward(args, ok)) == 1.0
    infra = Sample(response="infra", label="7")
    # a float (slime sums and rounds rewards), flagged so post-process and filters drop it
    assert asyncio.run(slime_hooks.reward(args, infra)) == 0.0 and infra.metadata["rufus_aborted"]
    crash = Sample(response="boom", label="7")
    assert asyncio.run(slime_hooks.reward(args, crash)) == 0.0
    assert crash.metadata["reward_failure"] == "verifier_error"
    named = Sample(response="7", label="7", metadata={"reward": "missing_reward"})
    with pytest.raises(KeyError):
        asyncio.run(slime_hooks.reward(args, named))


def test_post_process_drops_aborted_shapes_and_masks_truncated():
    args = SimpleNamespace(
        n_samples_per_prompt=4,
        rollout_max_response_len=100,
        rufus_advantage="grpo",
        rufus_mask_truncated=True,
        rufus_shaping={"kind": "shortest_correct_length", "coef": 0.5},
    )
    g = [
        Sample(reward=1.0, response_length=10),
        Sample(reward=1.0, response_length=100),
        Sample(reward=0.0, response_length=50, status=Status.TRUNCATED),
        Sample(reward=None, status=Status.ABORTED),
    ]
    raw, adv = slime_hooks.post_process_rewards(args, g)
    assert adv[3] == 0.0 and g[3].remove_sample and raw[3] == pytest.approx(2 / 3)
    assert g[2].remove_sample and not g[0].remove_sample
    assert adv[0] > adv[1] > adv[2]  # the long correct answer is penalised to 0.5, still above the wrong one
    assert sum(adv[:3]) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        slime_hooks.post_process_rewards(args, g[:3])


def test_band_filter_ignores_aborted_and_drops_small_groups():
    args = SimpleNamespace(rufus_band=[0.0, 0.8])
    keep = slime_hooks.band_filter(
        args, [Sample(reward=1.0), Sample(reward=0.0), Sample(status=Status.ABORTED)]
    )
    assert getattr(keep, "keep", keep) is True
    all_right = slime_hooks.band_filter(args, [Sample(reward=1.0)] * 4)
    assert getattr(all_right, "keep", all_right) is False
    lone = slime_hooks.band_filter(args, [Sample(reward=1.0), Sample(status=Status.ABORTED)])
    assert getattr(lone, "keep", lone) is False


def test_fireflash_loss_from_log_probs_uses_attempt_normalisation():
    import torch

    from infra.production.fireflash_loss import fireflash_loss_from_log_probs

    args = SimpleNamespace(eps_clip=0.2, eps_clip_high=0.28, rufus_min_attempt_tokens=4)
    lp = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    batch = {
        "log_probs": [torch.zeros(2), torch.zeros(3)],
        "loss_masks": [[1, 1], [1, 1, 1]],
        "advantages": [torch.ones(2), -torch.ones(3)],
        "rollout_log_probs": [torch.zeros(2), torch.zeros(3)],
    }
    loss, metrics = fireflash_loss_from_log_probs(args, batch, lp)
    # per attempt: -A * tokens / max(tokens, 4), summed (slime's custom-loss contract): -2/4 + 3/4 = 0.25
    assert float(loss.detach()) == pytest.approx(0.25)
    loss.backward()
    assert lp[0].grad is not None and "tis_weight_mean" in metrics


def test_aborted_reward_leaves_training_through_post_process():
    """A fully aborted group: floats everywhere, every sample removed, zero advantages."""
    args = SimpleNamespace(n_samples_per_prompt=2, rufus_advantage="grpo", rufus_reward="test_prod_hooks")
    g = [Sample(response="infra", label="7"), Sample(response="infra", label="7")]
    for s in g:
        s.reward = asyncio.run(slime_hooks.reward(args, s))
    raw, adv = slime_hooks.post_process_rewards(args, g)
    assert raw == [0.0, 0.0] and adv == [0.0, 0.0] and all(s.remove_sample for s in g)


def test_rendered_glm_prompt_is_given_to_the_judge_as_messages():
    text = (
        "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think></think>\nHello"
        "<|user|>\nAgain<|assistant|>"
    )
    assert slime_hooks.prompt_messages(text) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Again"},
    ]
    assert slime_hooks.prompt_messages("plain") == [{"role": "user", "content": "plain"}]


def test_hook_yaml_writes_tis_bounds_only_for_the_custom_loss():
    from infra.production.render import hook_settings
    from infra.recipe import load_recipe
    from tests.test_production_plan import RECIPE

    stage = load_recipe(RECIPE, profile="production").stages[1]
    assert "rufus_tis_clip_low" not in hook_settings(stage.id, stage.config)
    cfg = stage.config.model_copy(deep=True)
    cfg.rl.policy.loss_reduction = "attempt"
    settings = hook_settings(stage.id, cfg)
    assert settings["rufus_tis_clip_high"] == 2.0 and "rufus_tis_clip_low" not in settings
