"""Opt-in speed-ups of agent sampling: ``drop_finished_rows`` (a lockstep batch drops a row once it stops)
and ``eager_decode`` (decoding forwards in eager attention); neither changes a sample beyond float rounding.

The model, sampler, prefix cache, agent loop, local ``/generate`` server and trainer are real (the micro
model). The agent rollout below is sampled by that model, not a scripted backend.
"""

from __future__ import annotations

import functools
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base, toy_job  # noqa: E402

from infra.embedded import evaluate as eval_mod  # noqa: E402
from infra.embedded import generation  # noqa: E402
from infra.embedded import rl as rl_mod  # noqa: E402
from infra.embedded.decode_attention import NAME as DECODE_ATTENTION  # noqa: E402
from infra.embedded.generation import RowRequest, generate_rows  # noqa: E402
from infra.embedded.models import build_micro, load_model, load_tokenizer  # noqa: E402
from infra.embedded.prefix_cache import PrefixKVCache  # noqa: E402
from infra.environments import Policy, Sampling, build_environment  # noqa: E402


@pytest.fixture(scope="module")
def micro():
    torch.set_num_threads(1)
    model, tok = build_micro(seed=0)
    return model.eval(), tok


def _forwards(model, monkeypatch) -> list[tuple[int, int, str]]:
    """Record ``(rows, tokens, attention implementation)`` of every forward of ``model``."""
    calls: list[tuple[int, int, str]] = []
    real = model.forward

    @functools.wraps(real)  # keeps forward's signature, which the sampler reads for its cache keyword
    def spy(*args, **kwargs):
        ids = kwargs["input_ids"]
        calls.append((int(ids.shape[0]), int(ids.shape[1]), model.config._attn_implementation))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    return calls


def test_dropping_finished_rows_shrinks_the_batch_and_keeps_every_sample(micro, monkeypatch):
    model, tok = micro
    g = random.Random(0)
    prompts = [[g.randrange(len(tok)) for _ in range(n)] for n in (40, 75, 20, 60, 33)]
    budgets = [3, 30, 9, 17, 30]
    stops = list(range(3, 3 + len(tok) // 25))  # ~4% a token: some rows stop early, some run out

    def turns(drop: bool) -> tuple[list, PrefixKVCache]:
        cache, ids, out = PrefixKVCache(), [list(p) for p in prompts], []
        for turn in range(3):  # each turn extends the last, so later prefills come from the cache
            rows = [RowRequest(p, budgets[(k + turn) % 5], seed=10 * turn + k) for k, p in enumerate(ids)]
            gens = generate_rows(
                model, tok, rows, temperature=1.0, stop_token_ids=stops, prefix_cache=cache,
                top_k=2, drop_finished=drop,
            )  # fmt: skip
            out.append(gens)
            ids = [p + x.token_ids + [5, 6] for p, x in zip(ids, gens, strict=True)]
        return out, cache

    calls = _forwards(model, monkeypatch)
    padded, padded_cache = turns(False)
    padded_sizes = [rows for rows, tokens, _ in calls if tokens == 1]
    calls.clear()
    dropped, dropped_cache = turns(True)
    sizes = [rows for rows, tokens, _ in calls if tokens == 1]
    assert set(padded_sizes) == {5}  # the padded batch decodes every row until the longest ends
    assert min(sizes) < 5 and len(sizes) == len(padded_sizes)  # rows left as they stopped
    reasons = {x.finish_reason for gens in dropped for x in gens}
    assert reasons == {"stop", "length"}  # both ways out of the batch were exercised
    for a_gens, b_gens in zip(padded, dropped, strict=True):
        for a, b in zip(a_gens, b_gens, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)  # other batch shapes: float rounding
            assert a.top_ids == b.top_ids
    # the prefix cache got every row's sequence and the same keys/values (a dropped row's taken as it left)
    assert (dropped_cache.hits, dropped_cache.misses) == (padded_cache.hits, padded_cache.misses)
    a_entries, b_entries = list(padded_cache._entries.values()), list(dropped_cache._entries.values())
    assert [s.tolist() for s, _ in a_entries] == [s.tolist() for s, _ in b_entries]
    for (_, a_kv), (_, b_kv) in zip(a_entries, b_entries, strict=True):
        for (ak, av), (bk, bv) in zip(a_kv, b_kv, strict=True):
            assert torch.allclose(ak, bk, atol=1e-5) and torch.allclose(av, bv, atol=1e-5)


def test_a_dropped_row_keeps_its_own_keys_and_values_not_the_batch_buffer(micro, monkeypatch):
    """A row that leaves the batch keeps a copy of its keys/values until the call ends, not views.

    Each drop replaces the batch's buffers (every row, with spare room); views of the old ones pinned them
    all, one per drop. Found on SmolLM2 (stage 08, 16 rows of ~2K tokens): an evaluation held 16 GB and
    the first RL step was killed for memory at 23.4 GB.
    """
    model, tok = micro
    handed: list[tuple[int, bool]] = []  # (tokens, owns only its own data) per row handed to the cache
    real_put = PrefixKVCache.put

    def put(self, ids, kv, *args, **kwargs):
        own = all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for pair in kv for t in pair)
        handed.append((len(ids), own))
        real_put(self, ids, kv, *args, **kwargs)

    monkeypatch.setattr(PrefixKVCache, "put", put)
    g = random.Random(1)
    rows = [
        RowRequest([g.randrange(len(tok)) for _ in range(30 + 7 * k)], max_new_tokens=2 + 3 * k, seed=k)
        for k in range(6)
    ]  # budgets 2, 5, …, 17: rows 0-4 leave the batch one by one, row 5 is decoded to the end
    cache = PrefixKVCache()
    gens = generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache, drop_finished=True)
    assert [x.finish_reason for x in gens] == ["length"] * 6
    assert [own for _, own in handed[:5]] == [True] * 5  # before the fix: views of buffers 2-25x their size
    for (seq, kv), r, x in zip(cache._entries.values(), rows, gens, strict=True):  # every row was cached
        assert seq.tolist() == r.ids + x.token_ids[:-1] and kv[0][0].shape[2] == len(seq)
        assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for p in kv for t in p)


def test_eager_decode_decodes_in_eager_attention_and_gives_the_model_back(micro, monkeypatch):
    model, tok = micro
    g = random.Random(1)
    rows = [RowRequest([g.randrange(len(tok)) for _ in range(n)], 12, seed=n) for n in (30, 55, 8)]
    cache = PrefixKVCache()
    generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache)  # the next calls prefill from it
    assert model.config._attn_implementation == "sdpa"
    calls = _forwards(model, monkeypatch)
    plain = generate_rows(model, tok, rows, temperature=1.0, top_k=3)
    assert {impl for *_, impl in calls} == {"sdpa"}
    calls.clear()
    eager = generate_rows(model, tok, rows, temperature=1.0, top_k=3, eager_decode=True)
    assert [impl for _, tokens, impl in calls if tokens > 1] == ["sdpa"]  # the prefill keeps the model's
    assert {impl for _, tokens, impl in calls if tokens == 1} == {DECODE_ATTENTION} and len(calls) == 12
    assert model.config._attn_implementation == "sdpa"  # restored
    for a, b in zip(plain, eager, strict=True):
        assert a.token_ids == b.token_ids and a.top_ids == b.top_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)  # the same function, other rounding
    calls.clear()
    cached = generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache, eager_decode=True)
    assert [g.token_ids for g in cached] == [g.token_ids for g in eager]
    # one prefill per row past its cached prefix (here one token each), then the batch decodes
    assert [impl for *_, impl in calls] == ["sdpa"] * 3 + [DECODE_ATTENTION] * 11
    assert model.config._attn_implementation == "sdpa"


OPTIONS = [("drop_finished", "drop_finished_rows"), ("eager_decode", "eager_decode")]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("drop"))


@pytest.mark.parametrize("option", [sampling for sampling, _ in OPTIONS])
def test_an_agent_rollout_hands_the_setting_to_its_lockstep_batches(base, monkeypatch, option):
    env = build_environment("agent", {"env": "calculator", "concurrency": 2}, reward="agent_calculator")
    policy = Policy(load_model(base, "cpu"), load_tokenizer(base))
    seen: list[bool] = []
    real = generation.generate_rows

    def spy(*args, **kwargs):
        seen.append(kwargs[option])
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "generate_rows", spy)
    for on in (True, False):
        groups = env.rollout(policy, env.task_rows(2, seed=3), 2, Sampling(24, 1.0, 1, **{option: on}))
        assert [len(g.samples) for g in groups] == [2, 2]
        assert seen and set(seen) == {on}
        seen.clear()


@pytest.mark.parametrize("option,field", OPTIONS)
def test_the_trainer_and_the_evaluations_pass_their_setting(tmp_path, base, monkeypatch, option, field):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.rl.rollout.num_rollouts = 1
    job.stage.config.rl.dynamic_sampling.filter = "none"
    setattr(job.stage.config.rl.rollout, field, True)
    made: list[bool] = []

    def sampling(*args, **kwargs):
        made.append(kwargs.get(option, False))
        return Sampling(*args, **kwargs)

    monkeypatch.setattr(rl_mod, "Sampling", sampling)
    monkeypatch.setattr(eval_mod, "Sampling", sampling)
    rl_mod.train_rl(job)
    assert made and set(made) == {True}
    made.clear()
    eval_mod.evaluate_stage(job, base)
    assert made and set(made) == {False}  # the eval section's is its own setting
    setattr(job.stage.config.eval, field, True)
    made.clear()
    eval_mod.evaluate_stage(job, base)
    assert made and set(made) == {True}


@pytest.mark.parametrize("field", [field for _, field in OPTIONS])
def test_the_setting_is_left_out_of_older_configs(field):
    from infra.config import EvalConfig, RolloutConfig

    base = {"prompts_per_step": 2, "samples_per_prompt": 2, "max_response_tokens": 8, "num_rollouts": 1}
    assert field not in RolloutConfig.model_validate(base).model_dump()  # old hashes hold
    assert getattr(RolloutConfig.model_validate({**base, field: True}), field)
    assert field not in EvalConfig.model_validate({"targets": ["x"]}).model_dump()
    assert getattr(EvalConfig.model_validate({"targets": ["x"], field: True}), field)
