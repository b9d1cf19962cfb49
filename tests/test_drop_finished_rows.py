"""``drop_finished_rows``: a lockstep sampling batch drops a row once it stops, changing no sample.

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
from infra.embedded.generation import RowRequest, generate_rows  # noqa: E402
from infra.embedded.models import build_micro, load_model, load_tokenizer  # noqa: E402
from infra.embedded.prefix_cache import PrefixKVCache  # noqa: E402
from infra.environments import Policy, Sampling, build_environment  # noqa: E402


@pytest.fixture(scope="module")
def micro():
    torch.set_num_threads(1)
    model, tok = build_micro(seed=0)
    return model.eval(), tok


def _decode_batch_sizes(model, monkeypatch) -> list[int]:
    """Record the batch size of every one-token (decoding) forward of ``model``."""
    sizes: list[int] = []
    real = model.forward

    @functools.wraps(real)  # keeps forward's signature, which the sampler reads for its cache keyword
    def spy(*args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1:
            sizes.append(int(ids.shape[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    return sizes


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

    sizes = _decode_batch_sizes(model, monkeypatch)
    padded, padded_cache = turns(False)
    padded_sizes, sizes[:] = list(sizes), []
    dropped, dropped_cache = turns(True)
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


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("drop"))


def test_an_agent_rollout_hands_the_setting_to_its_lockstep_batches(base, monkeypatch):
    env = build_environment("agent", {"env": "calculator", "concurrency": 2}, reward="agent_calculator")
    policy = Policy(load_model(base, "cpu"), load_tokenizer(base))
    seen: list[bool] = []
    real = generation.generate_rows

    def spy(*args, **kwargs):
        seen.append(kwargs["drop_finished"])
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "generate_rows", spy)
    for drop in (True, False):
        groups = env.rollout(policy, env.task_rows(2, seed=3), 2, Sampling(24, 1.0, 1, drop_finished=drop))
        assert [len(g.samples) for g in groups] == [2, 2]
        assert seen and set(seen) == {drop}
        seen.clear()


def test_the_trainer_and_the_evaluations_pass_their_setting(tmp_path, base, monkeypatch):
    job = toy_job("toy_rl", tmp_path / "run", base)
    job.stage.config.rl.rollout.num_rollouts = 1
    job.stage.config.rl.dynamic_sampling.filter = "none"
    job.stage.config.rl.rollout.drop_finished_rows = True
    made: list[bool] = []

    def sampling(*args, **kwargs):
        made.append(kwargs.get("drop_finished", False))
        return Sampling(*args, **kwargs)

    monkeypatch.setattr(rl_mod, "Sampling", sampling)
    monkeypatch.setattr(eval_mod, "Sampling", sampling)
    rl_mod.train_rl(job)
    assert made and set(made) == {True}
    made.clear()
    eval_mod.evaluate_stage(job, base)
    assert made and set(made) == {False}  # eval.drop_finished_rows is its own setting
    job.stage.config.eval.drop_finished_rows = True
    made.clear()
    eval_mod.evaluate_stage(job, base)
    assert made and set(made) == {True}


def test_the_setting_is_left_out_of_older_configs():
    from infra.config import EvalConfig, RolloutConfig

    base = {"prompts_per_step": 2, "samples_per_prompt": 2, "max_response_tokens": 8, "num_rollouts": 1}
    assert "drop_finished_rows" not in RolloutConfig.model_validate(base).model_dump()  # old hashes hold
    assert RolloutConfig.model_validate({**base, "drop_finished_rows": True}).drop_finished_rows
    assert "drop_finished_rows" not in EvalConfig.model_validate({"targets": ["x"]}).model_dump()
    assert EvalConfig.model_validate({"targets": ["x"], "drop_finished_rows": True}).drop_finished_rows
