"""Lockstep batching of the local /generate server: one batch per round, deterministic whatever the timing."""

from __future__ import annotations

import random
import threading
import time

import pytest

from infra.agents.lockstep import LockstepBatcher
from infra.embedded.generation import Generation, RowRequest, generate_rows
from infra.embedded.models import build_micro


@pytest.fixture(scope="module")
def micro():
    model, tok = build_micro(seed=0)
    return model.eval(), tok


def _submit_all(batcher: LockstepBatcher, reqs: list[tuple[list[int], int]], jitter: int) -> list[Generation]:
    out: list[Generation | None] = [None] * len(reqs)
    rng = random.Random(jitter)

    def one(k: int) -> None:
        time.sleep(rng.random() * 0.05)  # arrival order differs from run to run
        ids, seed = reqs[k]
        kw = {"max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0, "stop_token_ids": []}
        out[k] = batcher.submit(ids, seed=seed, **kw)
        batcher.worker_done()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return [g for g in out if g is not None]


def test_one_batch_per_round_and_the_same_tokens_whatever_the_arrival_order(micro) -> None:
    model, tok = micro

    def run(rows, **kw):
        return generate_rows(model, tok, rows, **kw)

    reqs = [([5, 6, 7, 8][: 2 + k % 3], 100 + k) for k in range(6)]
    results = []
    for jitter in range(3):
        batcher = LockstepBatcher(run, workers=len(reqs))
        gens = _submit_all(batcher, reqs, jitter)
        batcher.close()
        assert batcher.batches == [len(reqs)]  # every worker waited, then one batch ran
        results.append([g.token_ids for g in gens])
    assert results[0] == results[1] == results[2] and all(len(t) == 6 for t in results[0])


def test_finished_workers_are_not_waited_for_and_errors_reach_every_request() -> None:
    def boom(rows, **kw):
        raise RuntimeError("backend down")

    batcher = LockstepBatcher(boom, workers=2)
    batcher.worker_done()  # one worker has nothing to play: the other must not wait for it
    with pytest.raises(RuntimeError, match="backend down"):
        batcher.submit([1, 2], max_new_tokens=2, temperature=1.0, top_p=1.0, stop_token_ids=[], seed=0)
    batcher.close()
    with pytest.raises(ValueError, match="at least one worker"):
        LockstepBatcher(boom, workers=0)


def test_generate_rows_keeps_each_rows_budget_stop_and_seed(micro) -> None:
    model, tok = micro
    rows = [RowRequest([3, 4, 5], 2, seed=1), RowRequest([3, 4], 7, seed=2), RowRequest([9], 5, seed=1)]
    gens = generate_rows(model, tok, rows, temperature=1.0)
    assert [len(g.token_ids) for g in gens] == [2, 7, 5] and all(g.finish_reason == "length" for g in gens)
    assert all(len(g.logprobs) == len(g.token_ids) and max(g.logprobs) <= 0 for g in gens)
    again = generate_rows(model, tok, rows, temperature=1.0)
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]  # each row's own seeded generator
    stop = gens[1].token_ids[0]
    stopped = generate_rows(model, tok, [rows[1]], temperature=1.0, stop_token_ids=[stop])[0]
    assert stopped.finish_reason == "stop" and stopped.token_ids == [stop]
    with pytest.raises(ValueError, match="at least one token"):
        generate_rows(model, tok, [RowRequest([], 3)], temperature=1.0)


def test_prefix_cache_reuses_earlier_tokens_and_changes_no_sample(micro) -> None:
    from infra.embedded.prefix_cache import PrefixKVCache

    model, tok = micro
    g = random.Random(0)
    prompts = [[g.randrange(len(tok)) for _ in range(n)] for n in (120, 90, 120)]
    prompts[2] = prompts[0][:100] + prompts[2][100:]  # shares 100 tokens with the first
    first = [len(p) for p in prompts]
    cache = PrefixKVCache()
    for turn in range(2):
        rows = [RowRequest(p, 8, seed=10 * turn + k) for k, p in enumerate(prompts)]
        plain = generate_rows(model, tok, rows, temperature=1.0)
        cached = generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache)
        assert [g.token_ids for g in cached] == [g.token_ids for g in plain]
        prompts = [p + g.token_ids + [3, 4] for p, g in zip(prompts, plain, strict=True)]  # the next turn
    # the second turn re-encodes only what is new to each row: its last sampled token and the two added
    assert cache.hits == sum(n + 8 - 1 for n in first) and cache.misses == sum(first) + 3 * 3
    # a later request sharing only part of a stored sequence reuses that part
    rows = [RowRequest(prompts[0][:100] + [7, 8, 9], 4, seed=1)]
    before = cache.hits
    generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache)
    assert cache.hits - before == 100
