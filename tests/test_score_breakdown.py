"""Scores broken down by environment type: held-out avg@k per ``metadata.env_type`` and the RL step's
per-type reward, on hand-built groups (plain data, no model)."""

from __future__ import annotations

import pytest

from data_prep.schema import PromptRow
from infra.embedded.evaluate import aggregate_groups
from infra.embedded.rl import reward_by_type
from infra.environments import Episode, Group
from rewards.contract import RewardResult


def _group(i: int, scores: list[float | None], env_type: str | None) -> Group:
    meta = {"env_type": env_type} if env_type else {}
    row = PromptRow(id=f"r{i}", prompt=[{"role": "user", "content": "x"}], metadata=meta)
    samples = [
        Episode(
            token_ids=[1, 2],
            logprobs=[0.0, 0.0],
            finish_reason="stop",
            reward=RewardResult(score=0.0, aborted=True)
            if s is None
            else RewardResult(score=s, failure=None if s > 0 else "wrong"),
        )
        for s in scores
    ]
    return Group(row=row, prompt_ids=[0], samples=samples)


def test_heldout_score_is_broken_down_by_env_type() -> None:
    groups = [
        _group(0, [1.0, 0.5], "memo"),  # prompt mean 0.75
        _group(1, [0.0, 0.0], "memo"),  # 0.0
        _group(2, [None, 1.0], "ledger"),  # the aborted episode is left out: 1.0
        _group(3, [None, None], "ledger"),  # every episode aborted: the prompt is left out
    ]
    groups[1].samples[0].finish_reason = "length"  # a memo episode cut by its budget
    score, details = aggregate_groups(groups)
    assert score == pytest.approx((0.75 + 0.0 + 1.0) / 3)
    assert details["aborted"] == 3 and details["prompts"] == 3 and details["truncated"] == 1
    assert details["by_env_type"] == {
        "ledger": {"score": pytest.approx(1.0), "prompts": 1, "truncated": 0},
        "memo": {"score": pytest.approx(0.375), "prompts": 2, "truncated": 1},
    }


def test_rows_without_env_type_have_no_breakdown() -> None:
    score, details = aggregate_groups([_group(0, [1.0, 0.0], None)])
    assert score == pytest.approx(0.5)
    assert "by_env_type" not in details


def test_rl_step_reward_by_env_type() -> None:
    groups = [_group(0, [1.0, 0.0], "memo"), _group(1, [0.5, 0.5], "memo"), _group(2, [0.2, 0.4], "ledger")]
    groups.append(_group(3, [1.0, 1.0], None))  # a row without a type counts toward no type
    out = reward_by_type(groups)
    assert out == {
        "reward_mean/ledger": pytest.approx(0.3),
        "groups/ledger": 1.0,
        "reward_mean/memo": pytest.approx(0.5),
        "groups/memo": 2.0,
    }


def test_heldout_details_pool_tool_usage_of_scored_agent_episodes() -> None:
    group = _group(0, [1.0, 0.5, 0.0, None], None)
    usage = [(3, {"web_search": 2, "web_scrape": 2}), (1, {"web_search": 1}), (5, {"python": 6})]
    usage.append((9, {"x": 9}))  # the aborted episode
    for ep, (iters, calls) in zip(group.samples, usage, strict=True):
        ep.metrics = {"tool_iters": iters, "tool_calls_by_name": calls}
    _, details = aggregate_groups([group])
    # the aborted episode (9 iterations of "x") is left out; only the full reward counts as correct
    assert details["tool_usage"] == {
        "trajectories": 3,
        "correct": 1,
        "iters": pytest.approx(3.0),
        "calls": {"python": pytest.approx(2.0), "web_scrape": pytest.approx(2 / 3), "web_search": 1.0},
        "iters_correct": 3.0,
        "iters_wrong": pytest.approx(3.0),
    }
    assert "tool_usage" not in aggregate_groups([_group(1, [1.0], None)])[1]  # single-turn: no block
