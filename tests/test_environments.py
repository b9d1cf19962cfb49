"""The environment contract: single-turn wiring, agent episodes through the RL update, config errors.

The model, tokenizer, agent loop, tools, local ``/generate`` server and trainer are real. The agent
episodes use ``tests/agents_scripted.py``'s oracle as the generation backend (the boundary double the
agent-loop tests use: a randomly initialised model cannot be steered into tool calls).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from agents_scripted import oracle_backend

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "embedded"))
from embedded_jobs import micro_base, toy_job  # noqa: E402

from data_prep.schema import PromptRow  # noqa: E402
from infra.embedded.chat_format import render_prompt_ids, stop_token_ids  # noqa: E402
from infra.embedded.generation import generate  # noqa: E402
from infra.embedded.models import load_model, load_tokenizer  # noqa: E402
from infra.embedded.rl import RLTrainer  # noqa: E402
from infra.embedded.runtime import read_rows  # noqa: E402
from infra.environments import (  # noqa: E402
    Environment,
    Episode,
    Group,
    Policy,
    Sampling,
    build_environment,
    register_environment,
)
from infra.layering import ConfigError  # noqa: E402
from infra.recipe import resolve_stage  # noqa: E402
from rewards.contract import RewardResult  # noqa: E402

TOY = Path(__file__).parent / "fixtures" / "embedded" / "toy_rl"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return micro_base(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def policy(base):
    return Policy(load_model(base, "cpu"), load_tokenizer(base))


def test_single_turn_rollout_is_one_batched_generation_scored_by_the_row_reward(tmp_path, base, policy):
    job = toy_job("toy_rl", tmp_path / "run", base)
    rows = read_rows(job.data_dir / "train.jsonl", PromptRow)[:3]
    env = job.stage.environment()
    assert env.name == "single_turn" and not env.multi_turn
    groups = env.rollout(policy, rows, 2, Sampling(max_new_tokens=6, temperature=1.0, seed=7))
    tok = policy.tokenizer
    prompts = [render_prompt_ids(tok, r.prompt, r.tools) for r in rows for _ in range(2)]
    gens = generate(
        policy.model,
        tok,
        prompts,
        max_new_tokens=6,
        temperature=1.0,
        stop_token_ids=stop_token_ids(tok),
        seed=7,
    )
    assert [e.token_ids for g in groups for e in g.samples] == [g.token_ids for g in gens]
    assert [e.logprobs for g in groups for e in g.samples] == [g.logprobs for g in gens]
    for group in groups:
        for ep in group.samples:
            assert ep.loss_mask is None and ep.trained_tokens == len(ep.token_ids)
            assert ep.reward == env.score(group.row, ep.text)


def _calculator_env() -> Environment:
    return build_environment("agent", {"env": "calculator", "concurrency": 2}, reward="agent_calculator")


def test_agent_episodes_are_masked_token_trajectories(policy):
    env = _calculator_env()
    assert env.multi_turn and env.slime_settings() == {"agent_env": "calculator", "rufus_env_actors": 0}
    rows = env.task_rows(2, seed=3)
    assert rows[0].metadata["environment"] == "agent" and rows[0].metadata["task_id"] == rows[0].id
    oracle = Policy(policy.model, policy.tokenizer, backend=oracle_backend(policy.tokenizer))
    ended: list[int] = []  # on_episode: a caller's progress bar ticks once per finished episode
    sampling = Sampling(max_new_tokens=64, temperature=1.0, seed=1)
    groups = env.rollout(oracle, rows, 2, sampling, on_episode=lambda: ended.append(1))
    assert [len(g.samples) for g in groups] == [2, 2] and len(ended) == 4
    for group in groups:
        assert group.prompt_ids and group.scores == [1.0, 1.0]
        for ep in group.samples:
            mask = ep.loss_mask
            assert len(mask) == len(ep.token_ids) == len(ep.logprobs)
            assert 0 in mask and 1 in mask  # the tool result sits between two sampled model turns
            assert all(lp == 0.0 for lp, m in zip(ep.logprobs, mask, strict=True) if m == 0)
            assert ep.metrics["turns"] == 2 and ep.metrics["tool_calls"] == 1 and not ep.truncated
            # Table 19's columns from the transcript: one turn called a tool, once, by name
            assert ep.metrics["tool_iters"] == 1 and ep.metrics["tool_calls_by_name"] == {"calculate": 1}
            assert ep.prompt_ids == group.prompt_ids


def test_unscored_agent_episode_is_aborted_and_leaves_its_group():
    from infra.agents.contract import RolloutResult, Termination
    from infra.embedded.sampling import drop_aborted
    from infra.environments.agent import episode_of

    broken = RolloutResult(
        task_id="t",
        prompt_ids=[],
        response_ids=[],
        rollout_logprobs=[],
        loss_mask=[],
        reward=None,
        termination=Termination.ABORTED,
        error="EnvironmentFailure: sandbox died",
    )
    ep = episode_of(broken)
    assert (
        ep.reward.aborted and ep.reward.failure == "aborted" and "sandbox died" in ep.reward.details["error"]
    )
    kept = drop_aborted(Group("row", [1, 2], [ep]))
    assert kept.samples == [] and kept.aborted == 1


def test_agent_groups_train_through_the_single_turn_update(tmp_path, base, policy):
    job = toy_job("toy_rl", tmp_path / "run", base)
    trainer = RLTrainer(job)
    env = _calculator_env()
    oracle = Policy(trainer.model, trainer.tokenizer, backend=oracle_backend(trainer.tokenizer))
    groups = env.rollout(
        oracle, env.task_rows(2, seed=5), 2, Sampling(max_new_tokens=64, temperature=1.0, seed=2)
    )
    # one solved and one failed episode per group, so the advantages are non-zero
    for g in groups:
        g.samples[1].reward = RewardResult(score=0.0, failure="wrong")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.update(groups, trainer.plan[0])
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert metrics["advantage_abs_mean"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_environment_tokens_carry_no_loss(tmp_path, base):
    """Tokens under loss mask 0 at the end of a response change nothing in the policy-gradient loss."""
    job = toy_job("toy_rl", tmp_path / "run", base)
    trainer = RLTrainer(job)
    row = read_rows(job.data_dir / "train.jsonl", PromptRow)[0]
    prompt = render_prompt_ids(trainer.tokenizer, row.prompt, row.tools)

    def grads(tail: list[int]) -> list[torch.Tensor]:
        trainer.model.zero_grad(set_to_none=True)
        eps = [
            Episode(
                [5, 6, 7, *tail],
                [-1.0, -1.0, -1.0, 0.0, 0.0],
                "stop",
                RewardResult(score=s),
                loss_mask=[1, 1, 1, 0, 0],
            )
            for s in (1.0, 0.0)
        ]
        items = [
            (prompt, e.token_ids, e.logprobs, a, False, e.loss_mask)
            for e, a in zip(eps, (1.0, -1.0), strict=True)
        ]
        old = [e.logprobs for e in eps]
        trainer._micro_step(items, [0, 1], old, None, trainer.plan[0], 1.0)
        return [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    first, second = grads([8, 9]), grads([40, 41])
    assert all(torch.allclose(a, b) for a, b in zip(first, second, strict=True))


def test_stage_config_names_a_registered_environment_with_valid_options(tmp_path):
    with pytest.raises(ConfigError, match=r"rl\.environment\.name: unknown environment 'nope'"):
        resolve_stage(TOY, "embedded", sets={"rl.environment.name": "nope"})
    with pytest.raises(ConfigError, match=r"rl\.environment\.options\.env"):
        resolve_stage(
            TOY, "embedded", sets={"rl.environment": {"name": "agent", "options": {"env": "no_such_env"}}}
        )
    with pytest.raises(ConfigError, match=r"rl\.environment\.options\.turns"):
        resolve_stage(TOY, "embedded", sets={"rl.environment.options": {"turns": 2}})
    stage = resolve_stage(
        TOY, "embedded", sets={"rl.environment": {"name": "agent", "options": {"env": "calculator"}}}
    )
    assert stage.environment().options.env == "calculator"


def test_register_environment_rejects_taken_and_builtin_names():
    @register_environment("test_echo_env")
    class Echo(Environment):
        def rollout(self, policy, rows, n, sampling):  # noqa: ANN001, ANN201
            return [Group(r, [1], []) for r in rows]

    assert build_environment("test_echo_env").name == "test_echo_env"
    with pytest.raises(ValueError, match="already registered"):

        @register_environment("test_echo_env")
        class Other(Environment):
            def rollout(self, policy, rows, n, sampling):  # noqa: ANN001, ANN201
                return []

    with pytest.raises(ValueError, match="built-in"):
        register_environment("single_turn")(Echo)
