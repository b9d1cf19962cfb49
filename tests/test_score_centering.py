"""FireFlash score centering (SC) and the FireFlash objective's formulas on hand-computed groups.

Checked on tiny tensors against closed forms: the centred gradient is ``-A w r (onehot(a) - mu~)`` per
logit row (the policy's ``pi`` cancels), it is zero-mean under the sampler with full-vocabulary
candidates, it leaves every value (loss, ratios, TIS) unchanged, and centering off is today's objective.
The embedded sampler's top-k capture leaves sampled tokens untouched. The production hook runs on CPU
with doubles of slime's logits helpers (``get_log_probs_and_entropy``, ``get_responses``) and of
Megatron's tensor-parallel utilities (rank, ``VocabUtility``, ``reduce_from_tensor_model_parallel_region``),
which need GPUs and an initialised process group; everything else is the real code.
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from infra.config import PolicyConfig
from infra.objectives import fireflash_advantages, policy_loss
from infra.objectives.centering import (
    SAMPLER_TOP_IDS,
    SAMPLER_TOP_LOGPROBS,
    candidate_logprobs_from_logits,
    sampler_top_k,
    sampler_weights,
)

DT = torch.float64


def close(a: torch.Tensor | float, b: torch.Tensor | float | list, tol: float = 1e-10) -> None:
    a = torch.as_tensor(a, dtype=DT)
    b = torch.as_tensor(b, dtype=DT)
    assert torch.allclose(a, b, atol=tol, rtol=tol), (a, b)


def scatter_weights(
    top_ids: torch.Tensor, top_lp: torch.Tensor, vocab: int, keep: torch.Tensor
) -> torch.Tensor:
    """mu~ scattered onto the vocabulary [B, T, V] (hand-written: renormalised exp of finite entries)."""
    p = torch.where(torch.isfinite(top_lp), top_lp.exp(), torch.zeros_like(top_lp)).to(DT)
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-300)
    p = p * keep.unsqueeze(-1)
    return torch.zeros(*top_ids.shape[:2], vocab, dtype=DT).scatter_add(-1, top_ids, p)


def _ff_loss(logits, ids, old, adv, mask, rollout, top_ids=None, top_lp=None, **kw):
    """FireFlash per-attempt loss (GRPO, TIS [0.5, 2], floor) on logits, centred when top-k is given."""
    logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    sc = {}
    if top_ids is not None:
        sc = {
            "sampler_top_logprobs": top_lp,
            "candidate_logprobs": candidate_logprobs_from_logits(logits, top_ids),
        }
    return policy_loss(
        "grpo", logp, old, adv, mask, eps_clip=0.2, rollout_logprobs=rollout, tis_clip_low=0.5,
        tis_clip_high=2.0, reduction="attempt", **kw, **sc,
    )  # fmt: skip


def _tiny_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, T, V, K = 2, 3, 6, 3
    logits = torch.randn(B, T, V, generator=g, dtype=DT)
    stale = logits + 0.7 * torch.randn(B, T, V, generator=g, dtype=DT)  # the sampler's (stale) logits
    ids = torch.tensor([[1, 4, 0], [2, 5, 3]])
    top_lp, top_ids = torch.log_softmax(stale, -1).topk(K, dim=-1)
    top_lp = top_lp.clone()
    top_lp[0, 1, 2] = -torch.inf  # a missing candidate slot (padding)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.5, -0.8], dtype=DT)
    rollout = torch.log_softmax(stale, -1).gather(-1, ids[..., None]).squeeze(-1)
    return logits, ids, top_ids, top_lp, mask, adv, rollout


def test_centred_gradient_equals_closed_form_with_tis_floor_and_clip() -> None:
    logits, ids, top_ids, top_lp, mask, adv, rollout = _tiny_batch()
    B, T, V = logits.shape
    logp0 = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    old = logp0.clone()
    old[0, 2] -= 1.0  # ratio e > 1.2 with A > 0: PPO clips this token (no gradient, centring included)
    z = logits.clone().requires_grad_(True)
    loss, metrics = _ff_loss(z, ids, old, adv, mask, rollout, top_ids, top_lp, min_denominator=4)
    loss.backward()
    ratio = torch.exp(logp0 - old)
    active = ~((ratio > 1.2) & (adv[:, None] > 0) | (ratio < 0.8) & (adv[:, None] < 0))
    w = torch.exp(old - rollout).clamp(0.5, 2.0)  # TIS from old vs rollout, clipped to [0.5, 2]
    denom = mask.sum(-1).clamp_min(4).to(DT)  # per-attempt floor (4 here, 2048 in FF)
    coef = adv[:, None] * w * ratio * active * mask / (B * denom[:, None])
    onehot = torch.nn.functional.one_hot(ids, V).to(DT)
    mu = scatter_weights(top_ids, top_lp, V, mask.bool())
    close(z.grad, -coef[..., None] * (onehot - mu))
    assert not active[0, 2] and bool(active[0, :2].all())
    # Same values as without centering: loss, ratios and TIS are computed from logp(a) exactly.
    plain, plain_metrics = _ff_loss(logits, ids, old, adv, mask, rollout, min_denominator=4)
    assert torch.equal(loss.detach(), plain)
    assert {k: v for k, v in metrics.items() if not k.startswith("sc_")} == plain_metrics
    # Uncentred: the score is onehot(a) - pi.
    z2 = logits.clone().requires_grad_(True)
    _ff_loss(z2, ids, old, adv, mask, rollout, min_denominator=4)[0].backward()
    close(z2.grad, -coef[..., None] * (onehot - torch.softmax(logits, -1)))
    mass = torch.where(torch.isfinite(top_lp), top_lp.exp(), torch.zeros_like(top_lp)).sum(-1)
    close(metrics["sc_sampler_mass"], float((mass * mask).sum() / mask.sum()), 1e-9)


@pytest.mark.parametrize("kind", ["gspo", "cispo"])
def test_centring_replaces_the_score_in_gspo_and_cispo(kind: str) -> None:
    """Off-policy tokens: gradient = centred version of the same estimator's gradient, values unchanged."""
    logits, ids, top_ids, top_lp, mask, adv, _ = _tiny_batch(1)
    V = logits.shape[-1]
    old = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1) + 0.05
    grads, values = [], []
    for centred in (False, True):
        z = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(z, -1).gather(-1, ids[..., None]).squeeze(-1)
        sc = {}
        if centred:
            sc = {
                "sampler_top_logprobs": top_lp,
                "candidate_logprobs": candidate_logprobs_from_logits(z, top_ids),
            }
        loss, _ = policy_loss(kind, logp, old, adv, mask, eps_clip=0.2, **sc)
        loss.backward()
        grads.append(z.grad)
        values.append(loss.detach())
    assert torch.equal(values[0], values[1])
    # Per token, d loss / d logp(a) is the same scalar g; plain = g (onehot - pi), centred = g (onehot - mu~).
    onehot = torch.nn.functional.one_hot(ids, V).to(DT)
    pi = torch.softmax(logits, -1)
    g = (grads[0] * onehot).sum(-1) / (1 - (pi * onehot).sum(-1))
    close(grads[1], g[..., None] * (onehot - scatter_weights(top_ids, top_lp, V, mask.bool())))


def _expected_gradient(logits: torch.Tensor, sampler: torch.Tensor, k: int, centred: bool) -> torch.Tensor:
    """E_{a ~ sampler}[d loss / d logits] for one token (A = 1, on-policy ratio, no TIS), exactly."""
    V = logits.shape[-1]
    top_lp, top_ids = torch.log_softmax(sampler, -1).topk(k)
    total = torch.zeros(V, dtype=DT)
    for a in range(V):
        z = logits.clone().view(1, 1, V).requires_grad_(True)
        logp = torch.log_softmax(z, -1)[..., a]
        sc = {}
        if centred:
            sc = {
                "sampler_top_logprobs": top_lp.view(1, 1, k),
                "candidate_logprobs": candidate_logprobs_from_logits(z, top_ids.view(1, 1, k)),
            }
        loss, _ = policy_loss(
            "grpo", logp, logp.detach(), torch.ones(1, dtype=DT), torch.ones(1, 1), eps_clip=0.2, **sc
        )
        loss.backward()
        total += torch.softmax(sampler, -1)[a] * z.grad.view(V)
    return total


def test_full_vocabulary_centring_is_zero_mean_under_the_sampler() -> None:
    g = torch.Generator().manual_seed(3)
    V = 7
    logits = torch.randn(V, generator=g, dtype=DT)
    # Exact sampler (mu = pi), k = V: nothing to centre, the expected score is already zero.
    close(_expected_gradient(logits, logits, V, centred=True), torch.zeros(V))
    close(_expected_gradient(logits, logits, V, centred=False), torch.zeros(V))
    # A stale sampler: the plain score drifts by -(mu - pi) toward the sampler; the centred one does not.
    stale = logits + torch.randn(V, generator=g, dtype=DT)
    mu, pi = torch.softmax(stale, -1), torch.softmax(logits, -1)
    close(_expected_gradient(logits, stale, V, centred=False), -(mu - pi))
    close(_expected_gradient(logits, stale, V, centred=True), torch.zeros(V))
    # Top-k candidates only: what remains is mu - mu~ (the tail outside the sampler's top-k).
    k = 3
    top_lp, top_ids = torch.log_softmax(stale, -1).topk(k)
    mu_k = torch.zeros(V, dtype=DT).scatter(0, top_ids, torch.softmax(top_lp, -1))
    close(_expected_gradient(logits, stale, k, centred=True), -(mu - mu_k))


def test_sampler_weights_ignore_padding_and_untrained_tokens() -> None:
    lp = torch.tensor([[[math.log(0.2), math.log(0.3), -math.inf], [-math.inf] * 3]], dtype=DT)
    w = sampler_weights(lp, torch.tensor([[1.0, 1.0]]))
    close(w, [[[0.4, 0.6, 0.0], [0.0, 0.0, 0.0]]])
    assert torch.equal(sampler_weights(lp, torch.tensor([[0.0, 1.0]])), torch.zeros_like(lp))
    # Garbage at an untrained position never reaches the loss (no NaN).
    logp = torch.zeros(1, 2, dtype=DT, requires_grad=True)
    cand = torch.tensor([[[0.0, -1.0, float("nan")], [float("nan")] * 3]], dtype=DT, requires_grad=True)
    loss, _ = policy_loss(
        "grpo", logp, logp.detach(), torch.ones(1), torch.tensor([[1.0, 0.0]]), eps_clip=0.2,
        sampler_top_logprobs=lp, candidate_logprobs=cand,
    )  # fmt: skip
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(cand.grad).all() and torch.isfinite(logp.grad).all()
    close(cand.grad, [[[0.4, 0.6, 0.0], [0.0, 0.0, 0.0]]])  # d loss / d c = +A r w mu~ (one token)
    with pytest.raises(ValueError, match="needs both"):
        policy_loss(
            "grpo", logp, logp, torch.ones(1), torch.ones(1, 2), eps_clip=0.2, sampler_top_logprobs=lp
        )
    with pytest.raises(ValueError, match=r"must be \[B, T, K\]"):
        policy_loss(
            "grpo", logp, logp, torch.ones(1), torch.ones(1, 2), eps_clip=0.2,
            sampler_top_logprobs=lp[:, :1], candidate_logprobs=cand[:, :1],
        )  # fmt: skip


def test_policy_config_field_is_off_by_default_and_keeps_old_hashes() -> None:
    default = PolicyConfig(estimator="grpo")
    assert default.score_centering_top_k is None and "score_centering_top_k" not in default.model_dump()
    on = PolicyConfig(estimator="grpo", score_centering_top_k=32)
    assert (
        on.model_dump()["score_centering_top_k"] == 32 and PolicyConfig.model_validate(on.model_dump()) == on
    )
    with pytest.raises(ValueError):
        PolicyConfig(estimator="grpo", score_centering_top_k=0)


# ---- FireFlash objective on hand-computed groups (the cases test_objectives.py does not cover) --------


def test_fireflash_lone_success_among_twelve() -> None:
    # R' = [1.5, 0 x 11]: mean 0.125, population variance 2.25/12 - 0.125^2 = 0.171875; no length term.
    adv = fireflash_advantages(torch.tensor([1.0] + [0.0] * 11, dtype=DT), [True] + [False] * 11, [100] * 12)
    std = math.sqrt(0.171875)
    close(adv, [1.375 / (std + 1e-6)] + [-0.125 / (std + 1e-6)] * 11, 1e-9)


def test_fireflash_none_solved_counts_half_partial_credit() -> None:
    # R' = 0.5 R = [0.25, 0.1, 0, 0]: mean 0.0875, population variance 0.041875 / 4; b = 0 for everyone.
    adv = fireflash_advantages(torch.tensor([0.5, 0.2, 0.0, 0.0], dtype=DT), [False] * 4, [10, 5000, 20, 30])
    std = math.sqrt(0.041875 / 4)
    close(adv, [x / (std + 1e-6) for x in (0.1625, 0.0125, -0.0875, -0.0875)], 1e-9)
    close(fireflash_advantages([0.0] * 4, [False] * 4, [1, 2, 3, 4]), [0.0] * 4)  # no signal at all


def test_fireflash_all_solved_same_length_is_zero() -> None:
    close(fireflash_advantages([1.0] * 12, [True] * 12, [300] * 12), [0.0] * 12)


def test_fireflash_loss_on_a_hand_computed_group() -> None:
    """Two attempts: one of 3 tokens under the 2,048 floor, one of 2,500 tokens; TIS hits both bounds."""
    T = 2500
    mask = torch.zeros(2, T)
    mask[0, :3] = 1
    mask[1, :] = 1
    adv = torch.tensor([2.0, -1.0], dtype=DT)
    rollout = torch.zeros(2, T, dtype=DT)
    rollout[0, :3] = torch.tensor([math.log(3.0), math.log(0.25), 0.0])  # w = [1/3 -> 0.5, 4 -> 2, 1]
    logp = torch.zeros(2, T, dtype=DT, requires_grad=True)
    loss, metrics = policy_loss(
        "grpo", logp, logp.detach(), adv, mask, eps_clip=0.2, rollout_logprobs=rollout, tis_clip_low=0.5,
        tis_clip_high=2.0, reduction="attempt", min_denominator=2048,
    )  # fmt: skip
    # Attempt 0: -2 (0.5 + 2 + 1) / 2048; attempt 1: +1 * 2500 / 2500; mean over the two attempts.
    close(loss, (-2 * 3.5 / 2048 + 1.0) / 2)
    close(metrics["tis_clip_fraction"], 2 / 2503)
    loss.backward()
    close(logp.grad[0, :3], [-2 * w / 2048 / 2 for w in (0.5, 2.0, 1.0)])
    close(logp.grad[1, :2], [1 / 2500 / 2] * 2)


# ---- embedded: sampler capture and the trainer ------------------------------------------------------


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
    from embedded_jobs import micro_base

    from infra.embedded.models import load_model, load_tokenizer

    base = micro_base(tmp_path_factory.mktemp("sc"))
    return base, load_model(base, "cpu"), load_tokenizer(base)


def test_top_k_capture_changes_no_sampled_token(micro) -> None:
    from infra.embedded.generation import RowRequest, generate, generate_rows
    from infra.embedded.token_logprobs import build_batch, response_logits

    _, model, tok = micro
    prompts = [tok.encode("a b c", add_special_tokens=False), tok.encode("hello", add_special_tokens=False)]
    kw = {"max_new_tokens": 12, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    plain = generate(model, tok, prompts, **kw)
    captured = generate(model, tok, prompts, top_k=5, **kw)
    for p, c in zip(plain, captured, strict=True):
        assert (p.token_ids, p.logprobs, p.finish_reason) == (c.token_ids, c.logprobs, c.finish_reason)
        assert p.top_ids is None and len(c.top_ids) == len(c.top_logprobs) == len(c.token_ids)
        for row, lps, lp in zip(c.top_ids, c.top_logprobs, c.logprobs, strict=True):
            assert len(row) == 5 and lps == sorted(lps, reverse=True) and lp <= lps[0] + 1e-6
    rows = [RowRequest(p, 12, seed=3) for p in prompts]
    a = generate_rows(model, tok, rows, temperature=1.0)
    b = generate_rows(model, tok, rows, temperature=1.0, top_k=4)
    assert [g.token_ids for g in a] == [g.token_ids for g in b] and [g.logprobs for g in a] == [
        g.logprobs for g in b
    ]
    assert all(len(g.top_ids) == len(g.token_ids) and len(g.top_ids[0]) == 4 for g in b)
    # The trainer's re-derived top-k (rl.py) equal the captured ones up to KV-cache kernel rounding.
    g = captured[0]
    batch = build_batch([prompts[0]], [g.token_ids], tok.pad_token_id)
    with torch.no_grad():
        ids, lps = sampler_top_k(response_logits(model, batch, 1.0), 5)
    n = len(g.token_ids)
    assert ids[0, :n].tolist() == g.top_ids
    assert torch.allclose(lps[0, :n], torch.tensor(g.top_logprobs), atol=1e-4)
    greedy = generate(model, tok, prompts, max_new_tokens=6, temperature=0.0, top_k=3)
    assert all(t == top[0] for gen in greedy for t, top in zip(gen.token_ids, gen.top_ids, strict=True))


def _small_job(stage_dir: Path, base: Path, top_k: int | None, steps_per_rollout: int = 1):
    from embedded_jobs import toy_job

    job = toy_job("toy_rl", stage_dir, base)
    cfg = job.stage.config.rl
    cfg.rollout.num_rollouts = 2
    cfg.rollout.prompts_per_step = 4
    cfg.rollout.steps_per_rollout = steps_per_rollout
    cfg.policy.use_tis = True
    cfg.policy.tis_clip_low = 0.5
    cfg.policy.loss_reduction = "attempt"
    cfg.policy.min_attempt_tokens = 16
    cfg.policy.score_centering_top_k = top_k
    return job


def test_embedded_trainer_centres_without_changing_the_loss_value(tmp_path, micro) -> None:
    from embedded_jobs import metrics_without_timing, weights

    from infra.embedded import rl as rl_mod

    base = micro[0]
    plain, centred = _small_job(tmp_path / "plain", base, None), _small_job(tmp_path / "sc", base, 4)
    rl_mod.train_rl(plain)
    rl_mod.train_rl(centred)
    p, c = metrics_without_timing(plain.metrics_path), metrics_without_timing(centred.metrics_path)
    assert "sc_sampler_mass" not in p[0] and 0.0 < c[0]["sc_sampler_mass"] <= 1.0 + 1e-6
    assert c[0]["loss"] == p[0]["loss"] and c[0]["reward_mean"] == p[0]["reward_mean"]  # same rollout, value
    assert c[0]["grad_norm"] != p[0]["grad_norm"]  # ... but a different gradient
    a, b = weights(plain.export_dir), weights(centred.export_dir)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_sampler_top_k_from_the_training_forward_equals_a_separate_pass(tmp_path, micro, monkeypatch) -> None:
    """One optimizer step per rollout: top-k from the training forward's logits = a pre-update pass."""
    from embedded_jobs import metrics_without_timing, weights

    from infra.embedded import rl as rl_mod

    base = micro[0]
    reused, separate = _small_job(tmp_path / "reused", base, 4), _small_job(tmp_path / "separate", base, 4)
    rl_mod.train_rl(reused)
    real = rl_mod.RLTrainer._sampler_top
    monkeypatch.setattr(
        rl_mod.RLTrainer, "_sampler_top", lambda self, items, n, phase: real(self, items, 2, phase)
    )
    rl_mod.train_rl(separate)
    assert metrics_without_timing(reused.metrics_path) == metrics_without_timing(separate.metrics_path)
    a, b = weights(reused.export_dir), weights(separate.export_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---- production: the slime hook and the agent rollout side -----------------------------------------


def _install_doubles(monkeypatch, tp_rank: int = 0, tp_size: int = 1, reduce=lambda x: x) -> None:
    """Doubles of slime's logits helpers (context parallel 1) and Megatron's TP utilities (GPU-only)."""

    def _rows(total_lengths, response_lengths):
        end = 0
        for total, resp in zip(total_lengths, response_lengths, strict=True):
            end += total
            yield end - resp, end

    def get_responses(
        logits, *, args, unconcat_tokens, total_lengths, response_lengths, apply_temperature=True
    ):
        flat = logits.squeeze(0)
        if apply_temperature and args.rollout_temperature != 1.0:
            flat = flat / args.rollout_temperature
        for (start, end), tokens in zip(_rows(total_lengths, response_lengths), unconcat_tokens, strict=True):
            yield flat[start - 1 : end - 1], tokens[-(end - start) :]

    def get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths, **kw):
        out = []
        for chunk, tokens in get_responses(
            logits, args=args, unconcat_tokens=unconcat_tokens, total_lengths=total_lengths,
            response_lengths=response_lengths,
        ):  # fmt: skip
            out.append(torch.log_softmax(chunk, -1).gather(-1, tokens[:, None]).squeeze(-1))
        return torch.empty(0), {"log_probs": out}

    def vocab_range(per_partition, rank, world_size):
        return rank * per_partition, (rank + 1) * per_partition

    mods = {
        "slime": types.ModuleType("slime"),
        "slime.backends": types.ModuleType("slime.backends"),
        "slime.backends.megatron_utils": types.ModuleType("slime.backends.megatron_utils"),
        "slime.backends.megatron_utils.loss": types.ModuleType("slime.backends.megatron_utils.loss"),
        "megatron": types.ModuleType("megatron"),
        "megatron.core": types.ModuleType("megatron.core"),
        "megatron.core.tensor_parallel": types.ModuleType("megatron.core.tensor_parallel"),
        "megatron.core.tensor_parallel.mappings": types.ModuleType("megatron.core.tensor_parallel.mappings"),
        "megatron.core.tensor_parallel.utils": types.ModuleType("megatron.core.tensor_parallel.utils"),
    }
    mods["slime.backends.megatron_utils.loss"].get_responses = get_responses
    mods["slime.backends.megatron_utils.loss"].get_log_probs_and_entropy = get_log_probs_and_entropy
    mods["megatron.core"].mpu = SimpleNamespace(
        get_tensor_model_parallel_rank=lambda: tp_rank, get_tensor_model_parallel_world_size=lambda: tp_size
    )
    mods["megatron.core.tensor_parallel.mappings"].reduce_from_tensor_model_parallel_region = reduce
    mods["megatron.core.tensor_parallel.utils"].VocabUtility = SimpleNamespace(
        vocab_range_from_per_partition_vocab_size=vocab_range
    )
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)


def test_production_hook_centres_on_packed_logits(monkeypatch) -> None:
    from infra.production.fireflash_loss import fireflash_loss

    _install_doubles(monkeypatch)
    g = torch.Generator().manual_seed(5)
    V, K, temp = 8, 3, 0.7
    prompts, responses = [[1, 2], [3, 4, 5]], [[6, 0, 7], [2, 2]]
    seqs = [torch.tensor(p + r) for p, r in zip(prompts, responses, strict=True)]
    total = sum(len(s) for s in seqs)
    raw = torch.randn(1, total, V, generator=g)
    masks = [[1, 0, 1], [1, 1]]  # an environment token in the first attempt
    top_ids = [torch.randint(0, V, (len(r), K), generator=g) for r in responses]
    top_lps = [torch.log_softmax(torch.randn(len(r), K, generator=g), -1) for r in responses]
    top_lps[0][1] = -torch.inf  # the environment token has no candidates
    batch = {
        "unconcat_tokens": seqs,
        "total_lengths": [len(s) for s in seqs],
        "response_lengths": [len(r) for r in responses],
        "loss_masks": masks,
        "advantages": [torch.full((3,), 1.2), torch.full((2,), -0.6)],
        "metadata": [
            {SAMPLER_TOP_IDS: i, SAMPLER_TOP_LOGPROBS: lp} for i, lp in zip(top_ids, top_lps, strict=True)
        ],
    }
    args = SimpleNamespace(
        eps_clip=0.2, eps_clip_high=0.28, rollout_temperature=temp, rufus_min_attempt_tokens=4,
        rufus_score_centering_top_k=K,
    )  # fmt: skip
    logits = raw.clone().requires_grad_(True)
    with torch.no_grad():  # on-policy old log-probs (ratio 1); no rollout log-probs, so no TIS
        _, out = sys.modules["slime.backends.megatron_utils.loss"].get_log_probs_and_entropy(
            raw, args=args, unconcat_tokens=seqs, total_lengths=batch["total_lengths"],
            response_lengths=batch["response_lengths"],
        )  # fmt: skip
    batch["log_probs"] = out["log_probs"]
    loss, metrics = fireflash_loss(args, batch, logits, None)
    loss.backward()
    # Closed form on the packed rows: sum contract (x2 attempts) of mean over attempts of -A (onehot - mu~)
    # / max(tokens, 4), through the temperature (d scaled / d raw = 1 / temp).
    expected = torch.zeros(total, V, dtype=DT)
    end = 0
    for b, (seq, resp) in enumerate(zip(seqs, responses, strict=True)):
        end += len(seq)
        start = end - len(resp)
        a = float(batch["advantages"][b][0])
        denom = max(sum(masks[b]), 4)
        for t in range(len(resp)):
            if not masks[b][t]:
                continue
            mu = torch.zeros(V, dtype=DT).index_add(
                0, top_ids[b][t], torch.softmax(top_lps[b][t].double(), -1)
            )
            onehot = torch.nn.functional.one_hot(torch.tensor(resp[t]), V).to(DT)
            expected[start - 1 + t] = -a * (onehot - mu) / denom / 2 * 2 / temp
    close(logits.grad[0], expected, 1e-5)
    assert "sc_sampler_mass" in metrics
    batch.pop("metadata")
    with pytest.raises(ValueError, match="no 'metadata'"):
        fireflash_loss(args, batch, raw, None)


def test_vocab_parallel_candidate_logprobs_match_a_full_softmax() -> None:
    from infra.production.fireflash_loss import candidate_log_probs_vocab_parallel

    g = torch.Generator().manual_seed(9)
    R, V, K, temp = 4, 10, 3, 1.3
    raw = torch.randn(R, V, generator=g, dtype=DT)
    tokens = torch.randint(0, V, (R,), generator=g)
    top = torch.randint(0, V, (R, K), generator=g)
    full = torch.log_softmax(raw / temp, -1)
    want = full.gather(-1, top)
    # TP = 1: gradient = (onehot(k) - pi) / temp, as for a full log-softmax.
    z = raw.clone().requires_grad_(True)
    token_lp = torch.log_softmax(z / temp, -1).gather(-1, tokens[:, None]).squeeze(-1)
    got = candidate_log_probs_vocab_parallel(
        z, tokens, token_lp, top, vocab_start=0, temperature=temp, reduce=lambda x: x
    )
    close(got, want)
    got.sum().backward()
    z2 = raw.clone().requires_grad_(True)
    torch.log_softmax(z2 / temp, -1).gather(-1, top).sum().backward()
    close(z.grad, z2.grad)
    # TP = 2, simulated: each rank gathers the ids of its shard; the all-reduce double adds the other
    # rank's (detached) part, as Megatron's forward all-reduce with identity backward looks from one rank.
    # Rank r's gradient on its own shard must be that shard's columns of the TP = 1 gradient.
    half = V // 2
    shards = [raw[:, :half].clone().requires_grad_(True), raw[:, half:].clone().requires_grad_(True)]
    token_lp = torch.log_softmax(torch.cat(shards, -1) / temp, -1).gather(-1, tokens[:, None]).squeeze(-1)
    sent: dict[int, torch.Tensor] = {}

    def record(rank: int):
        return lambda x: sent.setdefault(rank, x)

    for rank, shard in enumerate(shards):  # pass 1: what each rank contributes to the all-reduce
        candidate_log_probs_vocab_parallel(
            shard.detach(), tokens, token_lp.detach(), top, vocab_start=rank * half, temperature=temp,
            reduce=record(rank),
        )  # fmt: skip
    grads = []
    for rank, shard in enumerate(shards):
        other = sent[1 - rank].detach()
        out = candidate_log_probs_vocab_parallel(
            shard, tokens, token_lp, top, vocab_start=rank * half, temperature=temp,
            reduce=lambda x, other=other: x + other,
        )  # fmt: skip
        close(out, want)
        (grad,) = torch.autograd.grad(out.sum(), shard, retain_graph=True)
        grads.append(grad)
    close(torch.cat(grads, -1), z2.grad)


def test_agent_rollout_top_k_aligns_with_model_segments() -> None:
    from infra.agents.slime_generate import fill_sample, sampler_top_rows

    segments = [(True, 2), (False, 3), (True, 1)]
    calls = [
        {
            "output_tokens": 2,
            "output_top_logprobs": [[[-0.1, 5, None], [-2.0, 9, None], [-3.0, 1, None]], [[-0.5, 4, None]]],
        },
        {"output_tokens": 0, "output_top_logprobs": []},  # a call that produced nothing has no segment
        {"output_tokens": 1, "output_top_logprobs": [[[-0.2, 7, "x"], [-1.7, 3, "y"]]]},
    ]
    ids, lps = sampler_top_rows(calls, segments, 6, 2)
    assert ids.tolist() == [[5, 9], [4, 0], [0, 0], [0, 0], [0, 0], [7, 3]]
    assert lps[0].tolist() == pytest.approx([-0.1, -2.0]) and lps[1, 1] == -math.inf
    assert torch.isinf(lps[2:5]).all() and lps[5].tolist() == pytest.approx([-0.2, -1.7])
    with pytest.raises(ValueError, match="no output_top_logprobs"):
        sampler_top_rows([{"output_tokens": 2}, calls[2]], segments, 6, 2)
    with pytest.raises(ValueError, match="model segments"):
        sampler_top_rows(calls[:1], segments, 6, 2)

    from infra.agents.contract import RolloutResult, Termination
    from tests.test_agents_slime import SlimeShapedSample

    result = RolloutResult(
        task_id="t", prompt_ids=[1], response_ids=[2, 3, 4, 5, 6, 7],
        rollout_logprobs=[-0.1, -0.5, 0, 0, 0, -0.2], loss_mask=[1, 1, 0, 0, 0, 1], reward=1.0,
        termination=Termination.FINAL_ANSWER, segments=segments,
    )  # fmt: skip
    sample = fill_sample(None, SlimeShapedSample(), result, sampler_top=(ids, lps))
    assert torch.equal(sample.train_metadata[SAMPLER_TOP_IDS], ids) and sample.response_length == 6
