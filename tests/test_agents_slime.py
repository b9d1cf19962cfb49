"""The slime adapter turns rollout results into correctly masked slime Samples.

slime cannot be installed here, so :class:`SlimeShapedSample` re-implements the parts of
``slime.utils.types.Sample`` the adapter touches (fields, ``Status``, ``append_response_tokens`` as
documented in shared/reference/slime-interfaces.md §1.3); the episode itself is real, with the
scripted ``/generate`` double of ``tests/agents_scripted.py``.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from agents_scripted import ScriptedBackend, micro_tokenizer, tool_call

from infra.agents.contract import Termination
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.agents.slime_generate import fill_sample, task_from_sample


@dataclass
class SlimeShapedSample:
    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    index: int = 0
    prompt: Any = ""
    label: Any = None
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    reward: Any = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)

    def append_response_tokens(self, args=None, *, tokens=None, log_probs=None, trainable=True, **kw):  # noqa: ANN001
        if trainable and log_probs is None:
            raise ValueError("trainable tokens need log_probs")
        if not trainable and log_probs is not None:
            raise ValueError("non-trainable tokens take no log_probs")
        self.tokens = self.tokens + list(tokens)
        self.response_length += len(tokens)
        self.loss_mask = (self.loss_mask or []) + [int(trainable)] * len(tokens)
        self.rollout_log_probs = (self.rollout_log_probs or []) + (
            list(log_probs) if trainable else [0.0] * len(tokens)
        )


def _episode(turns: list, sample: SlimeShapedSample):  # noqa: ANN202
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        task = task_from_sample(sample, max_new_tokens=128)
        return asyncio.run(run_episode(CalculatorEnv(), task, ModelEndpoint(server.url, tok)))


def test_fill_sample_masks_tool_tokens_and_sets_status() -> None:
    sample = SlimeShapedSample(
        prompt="Compute 12 * 3. Answer as \\boxed{N}.", label="36", metadata={"task_id": "a"}
    )
    turns = [(tool_call("12 * 3"), "<|observation|>"), ("\\boxed{36}", "<|endoftext|>")]
    result = _episode(turns, sample)
    fill_sample(None, sample, result, micro_tokenizer())
    assert sample.tokens == result.tokens and sample.response_length == result.response_length
    assert sample.loss_mask == result.loss_mask and 0 in sample.loss_mask and 1 in sample.loss_mask
    assert sample.rollout_log_probs == result.rollout_logprobs
    assert all(lp == 0.0 for lp, m in zip(sample.rollout_log_probs, sample.loss_mask, strict=True) if m == 0)
    assert sample.status is SlimeShapedSample.Status.COMPLETED and sample.reward == 1.0
    assert not sample.remove_sample and sample.metadata["termination"] == "final_answer"


def test_truncated_and_aborted_samples() -> None:
    sample = SlimeShapedSample(prompt="Compute 1 + 1.", label="2", metadata={"limits": {"max_iterations": 1}})
    result = _episode([(tool_call("1+1"), "<|observation|>")] * 2, sample)
    fill_sample(None, sample, result)
    assert sample.status is SlimeShapedSample.Status.TRUNCATED and not sample.remove_sample
    aborted = result.model_copy(update={"termination": Termination.ABORTED, "reward": None})
    fresh = SlimeShapedSample(prompt="x")
    fill_sample(None, fresh, aborted)
    assert (
        fresh.status is SlimeShapedSample.Status.ABORTED and fresh.remove_sample and fresh.metadata["aborted"]
    )


#: What ``infra.environments.agent.task_row`` writes into a calculator row's metadata (slime copies it to
#: ``sample.metadata``): the row names its environment, which the generate hook plays it in.
CALC_ROW = {"environment": "agent", "environment_options": {"env": "calculator"}}


def hook_args(server_url: str, actors: int = 0) -> Any:
    """The ``args`` slime hands the hooks of a calculator agent stage: hook-YAML keys + router address."""
    from types import SimpleNamespace

    from infra.agents.local_server import micro_model_dir

    host, port = server_url.removeprefix("http://").rsplit(":", 1)
    options = {"env": "calculator", **({"ray_actors": actors} if actors else {})}
    return SimpleNamespace(
        rufus_stage="calc",
        rufus_environment={"name": "agent", "options": options},
        rufus_reward="agent_calculator",
        agent_env="calculator",
        rufus_env_actors=actors,
        hf_checkpoint=str(micro_model_dir()),
        sglang_router_ip=host,
        sglang_router_port=int(port),
    )


def test_slime_generate_hook_runs_the_stage_environment() -> None:
    """slime's --custom-generate-function-path hook builds the stage's environment from the hook YAML keys."""
    from types import SimpleNamespace

    from agents_scripted import oracle_backend

    from infra.production import slime_hooks

    tok = micro_tokenizer()
    with GenerateServer(oracle_backend(tok), tok, max_context_tokens=4096) as server:
        prompt = [{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}]
        sample = SlimeShapedSample(prompt=prompt, label=36, metadata={"task_id": "a", **CALC_ROW})
        params = {"max_new_tokens": 64, "temperature": 1.0}
        out = asyncio.run(slime_hooks.generate(hook_args(server.url), sample, params))
    assert out.reward == 1.0 and out.status is SlimeShapedSample.Status.COMPLETED
    assert 0 in out.loss_mask and out.metadata["termination"] == "final_answer"
    single = SimpleNamespace(rufus_environment={"name": "single_turn", "options": {}}, rufus_reward="math")
    try:
        asyncio.run(slime_hooks.generate(single, SlimeShapedSample(prompt="x"), {}))
    except ValueError as exc:
        assert "single-turn" in str(exc)
    else:
        raise AssertionError("a single-turn stage must not route slime's generate through the hook")


def test_slime_generate_hook_plays_another_environments_row_in_that_environment() -> None:
    """An AWM stage's evaluation holds a calculator row (a guardrail of another agent stage): the hook plays
    it in the calculator environment, where it succeeds; in the AWM world its task does not exist."""
    from agents_scripted import oracle_backend

    from infra.production import slime_hooks

    tok = micro_tokenizer()
    with GenerateServer(oracle_backend(tok), tok, max_context_tokens=4096) as server:
        args = hook_args(server.url)
        args.rufus_environment = {"name": "agent", "options": {"env": "awm_tiny"}}
        args.agent_env, args.rufus_reward = "awm_tiny", "awm_tiny"
        prompt = [{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}]
        sample = SlimeShapedSample(prompt=prompt, label=36, metadata={"task_id": "a", **CALC_ROW})
        out = asyncio.run(slime_hooks.generate(args, sample, {"max_new_tokens": 64}))
    assert out.status is SlimeShapedSample.Status.COMPLETED and out.reward == 1.0
    assert not out.remove_sample and out.metadata["termination"] == "final_answer"


def test_slime_generate_hook_hands_a_single_turn_row_to_slimes_own_generate(monkeypatch) -> None:
    """A single-turn guardrail row (no ``environment`` in its metadata) in an agent stage's evaluation goes to
    ``slime.rollout.sglang_rollout.generate``. slime needs CUDA and SGLang, so that module is a stand-in
    that records the call (the boundary); the hook's choice is what is tested."""
    import sys
    import types

    from infra.production import slime_hooks

    calls: list[tuple] = []

    async def slime_generate(args, sample, sampling_params):  # noqa: ANN001, ANN202
        calls.append((args, sample, sampling_params))
        sample.response = "slime's own"
        return sample

    module = types.ModuleType("slime.rollout.sglang_rollout")
    module.generate = slime_generate
    for name in ("slime", "slime.rollout"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.rollout.sglang_rollout", module)
    args = hook_args("http://127.0.0.1:9")  # nothing listens: an agent episode could not run
    row = SlimeShapedSample(prompt="Write two words.", label=None, metadata={"reward": "ifeval_strict"})
    out = asyncio.run(slime_hooks.generate(args, row, {"max_new_tokens": 8}, evaluation=True))
    assert out is row and out.response == "slime's own" and calls == [(args, row, {"max_new_tokens": 8})]
