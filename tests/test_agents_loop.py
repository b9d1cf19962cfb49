"""Agent loop tests: token fidelity, budgets, retry, truncation, aborts and continuation.

The loop, tool layer, strands-sglang provider/client and the local HTTP server are real; the model
behind ``/generate`` is a scripted double (``tests/agents_scripted.py``) so turns are deterministic.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer, oracle_backend, tool_call
from strands import tool

from infra.agents.contract import (
    AgentTask,
    EnvironmentFailure,
    EpisodeLimits,
    Termination,
    ToolNotStartedError,
)
from infra.agents.envs.base import AgentEnvironment
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from rewards.contract import RewardRequest, RewardResult

OBS, EOS, USER = "<|observation|>", "<|endoftext|>", "<|user|>"


def _run(backend: Any, env: AgentEnvironment, task: AgentTask, **endpoint: Any):
    tok = micro_tokenizer()
    with GenerateServer(backend, tok, max_context_tokens=4096) as server:
        ep = ModelEndpoint(server.url, tok, retry_delay=0.01, **endpoint)
        result = asyncio.run(run_episode(env, task, ep))
        return result, list(server.requests)


def _task(limits: dict | None = None, **kw: Any) -> AgentTask:
    return AgentTask(
        id="t",
        messages=[{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}],
        ground_truth=36,
        limits=EpisodeLimits(**(limits or {})),
        **kw,
    )


def test_trajectory_is_concatenation_of_what_each_call_sent_and_received() -> None:
    backend = ScriptedBackend(
        micro_tokenizer(), [(tool_call("12 * 3"), OBS), ("The answer is \\boxed{36}.", EOS)]
    )
    result, reqs = _run(backend, CalculatorEnv(), _task())
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0
    assert len(reqs) == 2
    # each call's input extends the previous input + output unchanged: history is never re-rendered
    prev = reqs[0]["input_ids"] + reqs[0]["output_ids"]
    assert reqs[1]["input_ids"][: len(prev)] == prev
    assert result.tokens == reqs[1]["input_ids"] + reqs[1]["output_ids"]
    assert result.prompt_ids == reqs[0]["input_ids"]
    # mask is 1 exactly on sampled ids, with their logprobs; 0/0.0 on the tool segment
    n0, n1 = len(reqs[0]["output_ids"]), len(reqs[1]["output_ids"])
    tool_len = result.response_length - n0 - n1
    assert result.loss_mask == [1] * n0 + [0] * tool_len + [1] * n1
    assert result.rollout_logprobs[:n0] == pytest.approx([-0.1 - 0.01 * i for i in range(n0)])
    assert result.rollout_logprobs[n0 : n0 + tool_len] == [0.0] * tool_len
    text = micro_tokenizer().decode(result.response_ids)
    # the sampled <|observation|> ends the turn and is not rendered twice
    assert text.count(OBS) == 1 and "<tool_response>36</tool_response><|assistant|>" in text
    assert result.metrics["dropped_duplicate_markers"] == 1
    assert [e["role"] for e in result.transcript] == ["system", "user", "assistant", "tool", "assistant"]


def test_malformed_call_is_returned_as_error_and_never_executed_or_repaired() -> None:
    bad = "<tool_call>calculate<arg_key>expression</arg_key>12*3</tool_call>"
    backend = ScriptedBackend(micro_tokenizer(), [(bad, OBS), ("\\boxed{36}", EOS)])
    result, reqs = _run(backend, CalculatorEnv(), _task())
    assert result.termination is Termination.FINAL_ANSWER
    assert result.metrics["malformed_tool_calls"] == 1 and result.metrics["tools_executed"] == 0
    tool_entry = next(e for e in result.transcript if e["role"] == "tool")
    assert tool_entry["status"] == "error" and "malformed tool call" in tool_entry["content"]
    n0 = len(reqs[0]["output_ids"])
    assert result.response_ids[:n0] == reqs[0]["output_ids"]  # the sampled text is kept as sampled


@pytest.mark.parametrize(
    ("limits", "turns", "expected"),
    [
        (
            {"max_tool_calls": 1, "max_iterations": None},
            [(tool_call("1+1"), OBS)] * 3,
            Termination.TOOL_BUDGET,
        ),
        (
            {"max_tool_calls": None, "max_iterations": 1},
            [(tool_call("1+1"), OBS)] * 3,
            Termination.ITERATION_BUDGET,
        ),
        ({"max_new_tokens": 8}, [("a b c d e f g h i j k l m n o p", "length")], Termination.MAX_TOKENS),
        ({"max_context_tokens": 330}, [(tool_call("1+1"), OBS)] * 3, Termination.CONTEXT_OVERFLOW),
        ({"max_tool_errors": 0}, [(tool_call("1/0"), OBS)] * 3, Termination.TOOL_ERROR),
    ],
)
def test_budgets_end_the_episode_with_the_right_reason(
    limits: dict, turns: list, expected: Termination
) -> None:
    result, reqs = _run(ScriptedBackend(micro_tokenizer(), turns), CalculatorEnv(), _task(limits))
    assert result.termination is expected, result.error
    assert result.reward is not None  # budgets are the policy's doing: scored, not aborted
    assert result.tokens[: len(reqs[-1]["input_ids"])] == reqs[-1]["input_ids"]
    if expected is Termination.CONTEXT_OVERFLOW:
        assert sum(len(r["input_ids"]) + len(r["output_ids"]) for r in reqs[-1:]) <= 330


class _ToolEnv(AgentEnvironment):
    """An environment whose single tool is given by the test."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def tools(self) -> list:
        return [self.fn]

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        return [_task()] * n

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        return RewardResult(score=float("\\boxed{36}" in request.response))


def _probe_turns() -> list[tuple[str, str]]:
    return [
        ("<tool_call>probe<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>", OBS),
        ("\\boxed{36}", EOS),
    ]


def test_only_calls_that_never_started_are_retried() -> None:
    starts: list[int] = []

    @tool
    def probe(x: int) -> str:
        """Flaky tool.

        Args:
            x: anything.
        """
        if len(starts) < 2:
            starts.append(0)
            raise ToolNotStartedError("sandbox refused the connection")
        starts.append(1)
        return "ok"

    result, _ = _run(ScriptedBackend(micro_tokenizer(), _probe_turns()), _ToolEnv(probe), _task())
    assert result.termination is Termination.FINAL_ANSWER and result.metrics["tool_retries"] == 2
    assert starts == [0, 0, 1]

    runs: list[int] = []

    @tool
    def probe(x: int) -> str:  # noqa: F811 - a second tool under the same name
        """Tool that fails after it started.

        Args:
            x: anything.
        """
        runs.append(x)
        raise ValueError("failed half-way")

    result, _ = _run(ScriptedBackend(micro_tokenizer(), _probe_turns()), _ToolEnv(probe), _task())
    assert runs == [1] and result.metrics["tool_retries"] == 0 and result.metrics["tool_errors"] == 1
    assert result.termination is Termination.FINAL_ANSWER


def test_environment_failure_is_tagged_aborted_and_not_scored() -> None:
    @tool
    def probe(x: int) -> str:
        """Tool whose sandbox dies.

        Args:
            x: anything.
        """
        raise EnvironmentFailure("sandbox died")

    result, _ = _run(ScriptedBackend(micro_tokenizer(), _probe_turns()), _ToolEnv(probe), _task())
    assert result.termination is Termination.ABORTED and result.reward is None


def test_tool_results_are_truncated_to_the_token_budget() -> None:
    @tool
    def probe(x: int) -> str:
        """Verbose tool.

        Args:
            x: anything.
        """
        return "the answer is long " * 200

    result, reqs = _run(
        ScriptedBackend(micro_tokenizer(), _probe_turns()),
        _ToolEnv(probe),
        _task({"tool_result_max_tokens": 40}),
    )
    tool_entry = next(e for e in result.transcript if e["role"] == "tool")
    assert "[truncated" in tool_entry["content"] and result.metrics["truncated_tool_results"] == 1
    assert len(micro_tokenizer().encode(tool_entry["content"], add_special_tokens=False)) <= 40
    segment = len(reqs[1]["input_ids"]) - len(reqs[0]["input_ids"]) - len(reqs[0]["output_ids"])
    assert segment <= 40 + 8  # the result plus its <tool_response> wrapping and the assistant prompt


def test_continuation_with_simulated_user_keeps_one_episode() -> None:
    env = CalculatorEnv(turns=3)
    task = env.tasks(1, seed=5)[0]
    result, reqs = _run(oracle_backend(micro_tokenizer()), env, task)
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0
    assert result.metrics["continuations"] == 2 and len(reqs) == 6
    for before, after in zip(reqs, reqs[1:], strict=False):
        assert after["input_ids"][: len(before["input_ids"]) + len(before["output_ids"])] == (
            before["input_ids"] + before["output_ids"]
        )
    text = micro_tokenizer().decode(result.response_ids)
    for reply in task.user_turns:
        assert reply in text
    assert sum(result.loss_mask) == sum(len(r["output_ids"]) for r in reqs)
    assert [e["role"] for e in result.transcript].count("user") == 3


def test_backend_failures_are_model_error_or_aborted() -> None:
    def broken(ids: list[int], **kw: Any):
        raise RuntimeError("CUDA error")

    result, _ = _run(broken, CalculatorEnv(), _task(), max_retries=1)
    assert result.termination is Termination.MODEL_ERROR and result.reward is None
    server = GenerateServer(broken, micro_tokenizer(), max_context_tokens=64).start()
    url = server.url
    server.stop()
    ep = ModelEndpoint(url, micro_tokenizer(), max_retries=1, retry_delay=0.01)
    result = asyncio.run(run_episode(CalculatorEnv(), _task(), ep))
    assert result.termination is Termination.ABORTED and result.reward is None
