"""The calculator stage's own environment, tiny task family and held-out metric, registered on import.

This file is the worked example of "a stage brings its own environment": nothing shared is edited.

* ``calculator_tool`` (tiny task family): the tiny math word problems, each ending "Use the calculator."
  The reference solution calls the ``calculator`` tool on the problem's equation, then answers
  ``\\boxed{N}`` — the shape of the tool chats the SFT mix teaches (``data_prep.tiny_tasks.sft_sources``).
  Rows carry their episode in ``metadata`` (``task_id``, ``limits``, ``environment``), so evaluation rolls
  them out in the agent loop wherever they are scored.
* ``calculator_success`` (embedded metric): share of held-out episodes whose final ``\\boxed{}`` equals the
  answer (the ``agent_calculator`` reward of ``infra.agents.envs.calculator``).
* ``tiny_calculator`` (agent environment for ``rl.environment: {name: agent, options: {env: ...}}``): one
  ``calculator`` tool (the safe AST evaluator of the built-in calculator environment) and these tasks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from strands import tool
from strands.types.tools import AgentTool

from data_prep.tiny_tasks import TinyTask, generate, register_family, register_metric
from infra.agents.contract import AgentTask, EpisodeLimits
from infra.agents.envs.base import AgentEnvironment, register_agent_environment
from infra.agents.envs.calculator import calculator_reward, evaluate
from rewards.contract import RewardRequest, RewardResult

ENV = "tiny_calculator"
FAMILY = "calculator_tool"
METRIC = "calculator_success"
#: Budgets of one episode: a call, its result, an answer (two model turns), with room for one retry.
LIMITS = EpisodeLimits(
    max_tool_calls=2, max_iterations=2, max_context_tokens=512, tool_result_max_tokens=16, max_tool_errors=1
)


@tool(name="calculator")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * /.

    Args:
        expression: The expression to evaluate, for example "12 * 3".
    """
    value = evaluate(expression)
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def calculator_tasks(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` calculator tasks for ``split`` (a math stream of its own on the train split)."""
    stream = seed + 2_000_003 if split == "train" else seed  # held-out: the math held-out questions
    out = []
    for task in generate("math", n, stream, split):
        expr = task.reasoning.split("=")[0].strip()
        agent = AgentTask(
            id=task.id.replace("math", FAMILY, 1),
            messages=[{"role": "user", "content": f"{task.prompt[-1]['content']} Use the calculator."}],
            ground_truth=int(task.label),
            limits=LIMITS,
        )
        meta = _row_metadata(agent)
        out.append(
            replace(
                task,
                id=agent.id,
                prompt=agent.messages,
                label=agent.ground_truth,
                metadata={**meta, "family": FAMILY, "source": "tiny_tasks"},
                reasoning=f"I need {expr}.",
            )
        )
    return out


def _row_metadata(task: AgentTask) -> dict[str, Any]:
    from infra.environments.agent import AgentOptions, task_row

    return task_row(task, AgentOptions(env=ENV), reward="agent_calculator").metadata


@register_agent_environment(ENV)
class TinyCalculatorEnv(AgentEnvironment):
    """Tiny math problems solved with one ``calculator`` call; scored by ``agent_calculator``."""

    name = ENV

    def tools(self) -> list[AgentTool]:
        """Return the one ``calculator`` tool."""
        return [calculator]

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` training tasks (the family's train split)."""
        return [
            AgentTask(
                id=t.id, messages=t.prompt, ground_truth=t.label, limits=LIMITS, metadata={"family": FAMILY}
            )
            for t in calculator_tasks(n, seed)
        ]

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Score with the registered ``agent_calculator`` reward."""
        return calculator_reward(request)


register_family(FAMILY, calculator_tasks)
register_metric(
    METRIC,
    (FAMILY,),
    "Share of held-out calculator episodes (tool call, then \\boxed{N}) whose answer is right.",
)
