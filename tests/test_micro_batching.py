"""Token-budget micro-batching of an RL update (``rollout.train_max_tokens``)."""

from __future__ import annotations

from infra.embedded.micro_batching import micro_batches, padded_tokens

P1, P2 = [1, 2, 3, 4], [5, 6]
PROMPTS = [P1, P1, P1, P2, P2]
RESPONSES = [[7] * 3, [7] * 6, [7] * 2, [7] * 5, [7] * 1]


def test_padded_tokens_counts_the_longest_row_or_each_shared_prompt_once():
    assert padded_tokens(PROMPTS[:3], RESPONSES[:3], shared=False) == 3 * (4 + 6)
    assert padded_tokens(PROMPTS[:3], RESPONSES[:3], shared=True) == 4 + 3 * 6
    assert padded_tokens(PROMPTS[2:4], RESPONSES[2:4], shared=True) == 4 + 2 + 2 * 5  # two prompt runs
    assert padded_tokens([], [], shared=True) == 0


def test_no_cap_is_one_micro_batch_and_a_count_cap_slices():
    idx = list(range(5))
    assert micro_batches(idx, PROMPTS, RESPONSES) == [idx]
    assert micro_batches(idx, PROMPTS, RESPONSES, max_episodes=2) == [[0, 1], [2, 3], [4]]


def test_token_budget_fills_in_order_and_never_exceeds_it_but_for_a_lone_episode():
    idx = list(range(5))
    for shared in (False, True):
        for budget in (1, 8, 12, 20, 30, 1000):
            out = micro_batches(idx, PROMPTS, RESPONSES, max_tokens=budget, shared_prompt=shared)
            assert [i for mb in out for i in mb] == idx  # order kept, nothing lost or repeated
            for mb in out:
                cost = padded_tokens([PROMPTS[i] for i in mb], [RESPONSES[i] for i in mb], shared)
                assert cost <= budget or len(mb) == 1, (shared, budget, mb)
            # greedy: each micro-batch plus the next episode would have broken the budget
            for mb, nxt in zip(out, out[1:], strict=False):
                grown = [*mb, nxt[0]]
                cost = padded_tokens([PROMPTS[i] for i in grown], [RESPONSES[i] for i in grown], shared)
                assert cost > budget, (shared, budget, mb)
    # whole rows: 0+1 cost 2*(4+6)=20; adding 2 costs 30
    assert micro_batches(idx, PROMPTS, RESPONSES, max_tokens=20) == [[0, 1], [2, 3], [4]]
    # shared: 0,1,2 cost 4+3*6=22; adding 3 (new prompt) costs 4+2+4*6=30
    assert micro_batches(idx, PROMPTS, RESPONSES, max_tokens=22, shared_prompt=True) == [[0, 1, 2], [3, 4]]


def test_both_caps_apply():
    prompts, responses = [P2] * 5, [[7], [7], [7], [7] * 6, [7]]
    idx = list(range(5))
    assert micro_batches(idx, prompts, responses, max_tokens=5, shared_prompt=True) == [[0, 1, 2], [3], [4]]
    assert micro_batches(idx, prompts, responses, max_episodes=2) == [[0, 1], [2, 3], [4]]
    both = micro_batches(idx, prompts, responses, max_episodes=2, max_tokens=5, shared_prompt=True)
    assert both == [[0, 1], [2], [3], [4]]
