"""Tests of infra.objectives: every formula against values worked out by hand, gradients via autograd."""

from __future__ import annotations

import math

import pytest
import torch

from infra.objectives import (
    band_keep,
    entropy_from_logits,
    fireflash_advantages,
    group_advantages,
    grpo_advantages,
    kl_k3,
    mask_truncated,
    mean_only_advantages,
    nonzero_std_keep,
    policy_loss,
    positive_length_penalty,
    remove_aborted,
    shape_group,
    shortest_correct_length_penalty,
    ultramarine_shaping,
)

LN = math.log


def close(actual: torch.Tensor | float, expected: list[float] | float, tol: float = 1e-5) -> None:
    """Assert ``actual`` equals ``expected`` elementwise within ``tol``."""
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
        rtol=tol,
    )


def leaf(values: list[list[float]]) -> torch.Tensor:
    """Return a float64 leaf tensor that records gradients."""
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


# ---------------------------------------------------------------- advantages


@pytest.mark.parametrize("value", [0.0, 1.0, 0.3, -2.7])
def test_grpo_all_equal_group_gives_exact_zeros(value: float) -> None:
    adv = grpo_advantages([value] * 16)
    assert torch.isfinite(adv).all()
    assert torch.equal(adv, torch.zeros(16))
    assert torch.equal(mean_only_advantages([value] * 16), torch.zeros(16))


def test_grpo_lone_success_population_and_slime_std() -> None:
    # mean 0.25; population std sqrt(0.1875) = 0.4330127; Bessel std sqrt(0.75 / 3) = 0.5 (slime).
    close(
        grpo_advantages([1.0, 0.0, 0.0, 0.0], unbiased=False),
        [0.75 / 0.4330127, -0.25 / 0.4330127, -0.25 / 0.4330127, -0.25 / 0.4330127],
    )
    close(
        grpo_advantages([1.0, 0.0, 0.0, 0.0]),
        [0.75 / 0.5, -0.25 / 0.5, -0.25 / 0.5, -0.25 / 0.5],
    )
    close(grpo_advantages([1.0], unbiased=True), [0.0])


def test_mean_only_lone_success() -> None:
    close(mean_only_advantages([1.0, 0.0, 0.0, 0.0]), [0.75, -0.25, -0.25, -0.25])


def test_fireflash_success_offset_and_length_bonus() -> None:
    # R' = [1.5, 1.5, 0.25, 0]; mean 0.8125; population variance 0.48046875.
    adv = fireflash_advantages([1.0, 1.0, 0.5, 0.0], [True, True, False, False], [1000, 500, 800, 300])
    std = math.sqrt(0.48046875)
    reward_term = [0.6875 / std, 0.6875 / std, -0.5625 / std, -0.8125 / std]
    # b = 0.2 * (1 - tokens / 1000) for the two solved: [0, 0.1, 0, 0]; mean 0.025; divided by 0.5.
    length_term = [-0.05, 0.15, -0.05, -0.05]
    close(adv, [a + b for a, b in zip(reward_term, length_term, strict=True)])


def test_fireflash_no_length_bonus_with_one_solved() -> None:
    # R' = [1.5, 0.25, 0.1, 0]; the single solved attempt earns no length term.
    adv = fireflash_advantages([1.0, 0.5, 0.2, 0.0], [True, False, False, False], [9000, 10, 10, 10])
    shaped = torch.tensor([1.5, 0.25, 0.1, 0.0])
    close(adv, (shaped - shaped.mean()) / (shaped.std(unbiased=False) + 1e-6))


def test_fireflash_all_solved_ranks_by_length_only() -> None:
    adv = fireflash_advantages([1.0, 1.0], [True, True], [400, 200])
    # Reward term is zero (equal R'); b = [0, 0.1], centred [-0.05, 0.05], / 0.5.
    close(adv, [-0.1, 0.1])
    with pytest.raises(ValueError, match="same length"):
        fireflash_advantages([1.0, 0.0], [True], [1, 2])


def test_group_advantages_dispatch() -> None:
    close(group_advantages("mean_only", [2.0, 0.0]), [1.0, -1.0])
    close(group_advantages("grpo", [2.0, 0.0], eps=0.0, unbiased=False), [1.0, -1.0])
    close(group_advantages("grpo", [2.0, 0.0], eps=0.0), [2**-0.5, -(2**-0.5)])  # slime: Bessel std
    close(
        group_advantages("fireflash", [1.0, 0.0], solved=[True, False], num_tokens=[5, 5], eps=0.0),
        [1.0, -1.0],
    )
    with pytest.raises(ValueError, match="unknown advantage kind 'ppo'"):
        group_advantages("ppo", [1.0])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        grpo_advantages([])


def test_aborted_samples_leave_before_advantages() -> None:
    samples = ["a", "b", "c", "d"]
    rewards = [1.0, 0.0, 0.0, 0.0]
    aborted = [False, True, False, False]
    assert remove_aborted(samples, aborted) == ["a", "c", "d"]
    kept = remove_aborted(rewards, aborted)
    # Three samples left: mean 1/3, not the 1/4 a zero-scored abort would give.
    close(mean_only_advantages(kept), [2 / 3, -1 / 3, -1 / 3])
    with pytest.raises(ValueError, match="3 flags"):
        remove_aborted(samples, aborted[:3])


# ---------------------------------------------------------------- policy losses


def test_grpo_token_clipping_values_and_gradients() -> None:
    # Token ratios 1.5 (above 1.2), 0.9 and 1.0 with A = +1: only the first is clipped.
    old = torch.zeros(1, 3, dtype=torch.float64)
    logp = leaf([[LN(1.5), LN(0.9), 0.0]])
    loss, metrics = policy_loss("grpo", logp, old, torch.tensor([1.0]), torch.ones(1, 3), eps_clip=0.2)
    close(loss, -(1.2 + 0.9 + 1.0) / 3)
    close(metrics["clip_fraction"], 1 / 3)
    loss.backward()
    close(logp.grad, [[0.0, -0.9 / 3, -1.0 / 3]])


def test_grpo_negative_advantage_and_clip_higher() -> None:
    # A = -1: ratio 0.5 is below 1 - eps (pushing further down) -> no gradient; ratio 1.5 keeps it.
    logp = leaf([[LN(0.5), LN(1.5)]])
    loss, metrics = policy_loss(
        "grpo", logp, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2), eps_clip=0.2
    )
    close(loss, (0.8 + 1.5) / 2)
    close(metrics["clip_fraction"], 0.5)
    loss.backward()
    close(logp.grad, [[0.0, 1.5 / 2]])
    # Asymmetric clip (DAPO clip-higher): ratio 1.25 passes with eps_clip_high 0.28, not with 0.2.
    for high, grad in [(0.28, -1.25), (None, 0.0)]:
        logp = leaf([[LN(1.25)]])
        loss, _ = policy_loss(
            "grpo",
            logp,
            torch.zeros(1, 1),
            torch.tensor([1.0]),
            torch.ones(1, 1),
            eps_clip=0.2,
            eps_clip_high=high,
        )
        loss.backward()
        close(logp.grad, [[grad]])


def test_gspo_sequence_clip_zero_gradient_when_pushed_further() -> None:
    eps, high = 1e-3, 2e-3  # RA §3.2
    old = torch.zeros(3, 2, dtype=torch.float64)
    # seq 0: mean log-ratio 0.005 -> ratio 1.005 > 1.002 with A > 0: clipped, no gradient, although its
    #        first token alone (ratio 1.0) is inside the band.
    # seq 1: mean 0.0005 -> ratio inside: gradient -A * s / |y| per token, / B for the sequence mean.
    # seq 2: mean -0.01 -> ratio below 0.999 with A < 0: clipped, no gradient.
    logp = leaf([[0.0, 0.01], [0.0, 0.001], [-0.01, -0.01]])
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, metrics = policy_loss(
        "gspo", logp, old, adv, torch.ones(3, 2), eps_clip=eps, eps_clip_high=high, reduction="sequence"
    )
    s1 = math.exp(0.0005)
    close(loss, (-(1 + high) - s1 + (1 - eps)) / 3)
    close(metrics["clip_fraction"], 2 / 3)
    loss.backward()
    close(logp.grad, [[0.0, 0.0], [-s1 / 2 / 3, -s1 / 2 / 3], [0.0, 0.0]])
    # The token-level objective on the same batch does move seq 0's first token.
    logp_tok = leaf([[0.0, 0.01]])
    loss_tok, _ = policy_loss(
        "grpo", logp_tok, old[:1], adv[:1], torch.ones(1, 2), eps_clip=eps, eps_clip_high=high
    )
    loss_tok.backward()
    assert logp_tok.grad[0, 0] != 0 and logp_tok.grad[0, 1] == 0


def test_gspo_pushing_back_keeps_gradient_and_ignores_padding() -> None:
    # Ratio above the band with A < 0 is not clipped (the objective pulls it back).
    logp = leaf([[0.05, 0.05]])
    loss, _ = policy_loss(
        "gspo", logp, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2), eps_clip=1e-3
    )
    loss.backward()
    close(logp.grad, [[math.exp(0.05) / 2] * 2])  # token mean of s, ds/dlogp_t = s / |y|
    # Padding with absurd values changes nothing and produces no NaN.
    mask = torch.tensor([[1.0, 0.0]])
    logp = leaf([[0.0005, 1e4]])
    loss, metrics = policy_loss("gspo", logp, torch.zeros(1, 2), torch.tensor([1.0]), mask, eps_clip=1e-3)
    close(loss, -math.exp(0.0005))
    loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0
    close(metrics["ratio_mean"], math.exp(0.0005))


def test_cispo_weight_clipping_keeps_gradient() -> None:
    # Ratios 1.5 and 0.5 with bounds [0.8, 1.28]: weights 1.28 and 0.8, both clipped and detached.
    logp = leaf([[-1.0, -2.0]])
    old = torch.tensor([[-1.0 - LN(1.5), -2.0 - LN(0.5)]], dtype=torch.float64)
    loss, metrics = policy_loss(
        "cispo", logp, old, torch.tensor([1.0]), torch.ones(1, 2), eps_clip=0.2, eps_clip_high=0.28
    )
    close(loss, -(1.28 * -1.0 + 0.8 * -2.0) / 2)
    close(metrics["clip_fraction"], 1.0)
    loss.backward()
    close(logp.grad, [[-1.28 / 2, -0.8 / 2]])  # grad flows through logp only, even when clipped


@pytest.mark.parametrize("kind", ["grpo", "gspo"])
@pytest.mark.parametrize("reduction", ["token", "sequence", "attempt"])
def test_policy_loss_gradcheck_inside_clip_band(kind: str, reduction: str) -> None:
    """Finite differences agree with autograd where no ratio sits on a clip boundary."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=gen, dtype=torch.float64)
    logp = (old + 0.01 * torch.randn(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1.0] * 5, [1.0, 1, 1, 0, 0], [1.0, 0, 0, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return policy_loss(kind, x, old, adv, mask, eps_clip=0.5, reduction=reduction, min_denominator=4)[0]

    assert torch.autograd.gradcheck(fn, (logp,))


def test_policy_loss_token_advantages_and_bf16() -> None:
    zeros = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    per_seq, _ = policy_loss("grpo", zeros, zeros, torch.tensor([1.0, -2.0]), mask, eps_clip=0.2)
    per_tok, _ = policy_loss("grpo", zeros, zeros, torch.tensor([[1.0] * 3, [-2.0] * 3]), mask, eps_clip=0.2)
    close(per_tok, float(per_seq))
    loss, _ = policy_loss(
        "cispo", zeros.bfloat16(), zeros.bfloat16(), torch.tensor([1.0, -2.0]), mask, eps_clip=0.2
    )
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_tis_bounds_slime_default_and_fireflash() -> None:
    # On-policy trainer (ratio 1), A = 1: per-token loss -1 times w = clamp(exp(old - rollout)).
    old = torch.zeros(1, 3, dtype=torch.float64)
    rollout = -torch.tensor([[LN(3.0), LN(0.2), LN(1.5)]], dtype=torch.float64)
    for low, high, weights, clipped in [
        (0.0, 2.0, [2.0, 0.2, 1.5], 1 / 3),
        (0.5, 2.0, [2.0, 0.5, 1.5], 2 / 3),
    ]:
        logp = leaf([[0.0, 0.0, 0.0]])
        loss, metrics = policy_loss(
            "grpo",
            logp,
            old,
            torch.tensor([1.0]),
            torch.ones(1, 3),
            eps_clip=0.2,
            rollout_logprobs=rollout,
            tis_clip_low=low,
            tis_clip_high=high,
        )
        close(loss, -sum(weights) / 3)
        close(metrics["tis_weight_mean"], sum(weights) / 3)
        close(metrics["tis_clip_fraction"], clipped)
        loss.backward()
        close(logp.grad, [[-w / 3 for w in weights]])
    # Without an upper bound TIS is off, even with rollout log-probs.
    loss, metrics = policy_loss(
        "grpo", old, old, torch.tensor([1.0]), torch.ones(1, 3), eps_clip=0.2, rollout_logprobs=rollout
    )
    close(loss, -1.0)
    assert "tis_weight_mean" not in metrics


def test_reductions_token_sequence_attempt_floor() -> None:
    # On-policy, per-token loss = -A: row 0 has 4 tokens with A=1, row 1 has 1 token with A=3.
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([1.0, 3.0])
    zeros = torch.zeros(2, 4)
    expected = {"token": -7 / 5, "sequence": (-1 - 3) / 2}
    for reduction, value in expected.items():
        loss, _ = policy_loss("grpo", zeros, zeros, adv, mask, eps_clip=0.2, reduction=reduction)
        close(loss, value)
    loss, _ = policy_loss("grpo", zeros, zeros, adv, mask, eps_clip=0.2, reduction="attempt")
    close(loss, (-1 - 3) / 2)  # no floor: same as "sequence"
    logp = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    loss, _ = policy_loss(
        "grpo", logp, zeros, adv, mask, eps_clip=0.2, reduction="attempt", min_denominator=2048
    )
    close(loss, (-4 / 2048 - 3 / 2048) / 2)
    loss.backward()
    close(logp.grad, [[-1 / 2048 / 2] * 4, [-3 / 2048 / 2, 0, 0, 0]])
    # An attempt longer than the floor is normalised by its own length.
    long_mask = torch.ones(1, 3000)
    loss, _ = policy_loss(
        "grpo", long_mask * 0, long_mask * 0, torch.tensor([1.0]), long_mask, eps_clip=0.2,
        reduction="attempt", min_denominator=2048,
    )  # fmt: skip
    close(loss, -1.0)
    with pytest.raises(ValueError, match="unknown loss reduction"):
        policy_loss("grpo", zeros, zeros, adv, mask, eps_clip=0.2, reduction="mean")
    with pytest.raises(ValueError, match="unknown policy loss kind"):
        policy_loss("ppo", zeros, zeros, adv, mask, eps_clip=0.2)
    with pytest.raises(ValueError, match="old_logprobs has shape"):
        policy_loss("grpo", zeros, zeros[:1], adv, mask, eps_clip=0.2)


def test_mask_truncated_removes_rows_from_loss() -> None:
    mask = torch.ones(3, 2)
    truncated = torch.tensor([False, True, False])
    out = mask_truncated(mask, truncated)
    assert out.tolist() == [[1, 1], [0, 0], [1, 1]] and out.dtype == mask.dtype
    assert mask_truncated(mask.bool(), truncated).tolist() == [[True, True], [False, False], [True, True]]
    logp = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    loss, _ = policy_loss("grpo", logp, torch.zeros(3, 2), torch.tensor([1.0, 5.0, 1.0]), out, eps_clip=0.2)
    close(loss, -1.0)  # the truncated row's A = 5 never enters
    loss.backward()
    assert logp.grad[1].abs().sum() == 0
    with pytest.raises(ValueError, match="truncated must be"):
        mask_truncated(mask, torch.tensor([True]))


# ---------------------------------------------------------------- KL and entropy


def test_kl_k3_zero_at_equality_positive_otherwise() -> None:
    ref = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert kl_k3(ref.clone(), ref, mask).item() == 0.0
    logp = leaf([[-1.5, -2.5, 100.0]])  # ref - logp = 0.5 on trained tokens; padding ignored
    kl = kl_k3(logp, ref, mask)
    close(kl, math.exp(0.5) - 0.5 - 1.0)
    assert kl > 0
    kl.backward()
    close(logp.grad, [[(1 - math.exp(0.5)) / 2, (1 - math.exp(0.5)) / 2, 0.0]])


def test_entropy_from_logits() -> None:
    logits = torch.zeros(1, 3, 4)
    logits[0, 1] = torch.tensor([50.0, 0.0, 0.0, 0.0])  # near-deterministic token
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    close(entropy_from_logits(logits, mask), math.log(4) / 2, tol=1e-4)
    with pytest.raises(ValueError, match=r"\[B, T, V\]"):
        entropy_from_logits(logits[0], mask)


# ---------------------------------------------------------------- shaping


def test_shortest_correct_length_penalty() -> None:
    # Lmin = 100 (the 50-token wrong answer does not count); span 900; capped beyond max_len.
    out = shortest_correct_length_penalty(
        [1.0, 1.0, 1.0, 1.0, 0.0], [100, 400, 1000, 1200, 50], [True, True, True, True, False], 1000, 0.5
    )
    close(out, [1.0, 1.0 - 0.5 * 300 / 900, 0.5, 0.5, 0.0])
    assert shortest_correct_length_penalty([0.0, 0.0], [10, 900], [False, False], 1000, 0.5) == [0.0, 0.0]
    with pytest.raises(ValueError, match="lengths has 1 entries"):
        shortest_correct_length_penalty([1.0, 0.0], [10], [True, False], 1000, 0.5)


def test_positive_length_penalty_only_on_positive_rewards() -> None:
    out = positive_length_penalty([2.0, -1.0, 0.0, 3.0], [500, 1000, 1000, 2000], 1000, 1.0)
    close(out, [1.5, -1.0, 0.0, 2.0])
    close(positive_length_penalty([2.0], [600], 1000, 1.0, start_len=200), [1.5])


ULTRA = {
    "n0": 10, "nmax": 20, "lam": 0.1, "c_tool": 0.3, "B": 1000, "alpha": 0.2, "L": 1000,
    "c_out": 0.25, "B_tail": 3000, "L_tail": 1000, "eta": 0.5,
}  # fmt: skip


def test_ultramarine_fade_tool_cap_and_gated_output_penalties() -> None:
    out = ultramarine_shaping(
        rewards=[1.0, 1.0, 0.0, 0.6],
        output_tokens=[500, 2000, 4000, 3500],
        turns=[5, 15, 30, 25],
        invalid_tool_calls=[0, 2, 5, 0],
        params=ULTRA,
    )
    # faded [1, 0.5, 0, 0] (mean > 0: gate on); tool [0, 0.2, 0.3 cap, 0];
    # output [0, 0.2, 0.25 cap, 0.25 cap]; tail [0, 0, 0.5 cap, 0.25].
    close(out, [1.0, 0.1, -1.05, -0.5])


def test_ultramarine_gate_uses_faded_mean() -> None:
    # Raw mean is positive, but after the fade (20 turns = nmax) every reward is 0: gate off, so only the
    # tool penalty applies and the long output is not penalised.
    out = ultramarine_shaping([1.0, 0.0], [5000, 500], [20, 1], [0, 1], ULTRA)
    close(out, [0.0, -0.1])
    # Negative rewards are not faded.
    close(ultramarine_shaping([-0.4, 1.0], [0, 0], [20, 1], [0, 0], ULTRA), [-0.4, 1.0])
    with pytest.raises(ValueError, match=r"missing \['eta'\]"):
        ultramarine_shaping([1.0], [1], [1], [0], {k: v for k, v in ULTRA.items() if k != "eta"})


def test_shape_group_dispatch() -> None:
    assert shape_group("none", [1, 0.5]) == [1.0, 0.5]
    close(shape_group("positive_length", [2.0], lengths=[500], max_len=1000, coef=1.0), [1.5])
    close(
        shape_group(
            "ultramarine", [1.0], output_tokens=[0], turns=[15], invalid_tool_calls=[0], params=ULTRA
        ),
        [0.5],
    )
    with pytest.raises(ValueError, match="unknown shaping kind"):
        shape_group("kimi", [1.0])


# ---------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("rewards", "kept"),
    [
        ([0.0, 0.0, 0.0, 0.0], False),  # mean exactly 0: dropped (open lower end)
        ([1.0, 1.0, 1.0, 1.0, 0.0], True),  # mean exactly 0.8: kept (closed upper end)
        ([0.8, 0.8, 0.8], True),  # float sum would give 0.8000000000000002
        ([1.0] * 13 + [0.0] * 3, False),  # 0.8125
        ([1.0] + [0.0] * 15, True),  # 0.0625
        ([1.0] * 4, False),
    ],
)
def test_band_keep_edges(rewards: list[float], kept: bool) -> None:
    assert band_keep(rewards, 0.0, 0.8) is kept


def test_nonzero_std_keep() -> None:
    assert nonzero_std_keep([1.0, 0.0]) is True
    assert nonzero_std_keep([0.3] * 8) is False
    assert nonzero_std_keep([0.5]) is False
    with pytest.raises(ValueError, match="empty group"):
        nonzero_std_keep([])
