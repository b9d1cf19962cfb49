"""A built-in calculator tool environment with a verifiable goal, for tests, the CLI and the tiny recipe.

Tasks ask for an integer expression to be evaluated with the ``calculate`` tool and the result given as
``\\boxed{N}``; with ``turns > 1`` a simulated user asks follow-ups on the previous result ("now multiply
that by 7"), so one episode is a multi-turn dialogue. The reward (registered as ``agent_calculator``)
is 1 when the final ``\\boxed{}`` equals the ground truth, else 0, and fails closed.

The tool evaluates with a whitelist over Python's ``ast`` rather than strands-agents-tools'
``calculator`` (sympy ``parse_expr``, which ``eval``s its input and prints through ``rich``): RL feeds
it arbitrary sampled text, so only integer/float literals and + - * / // % ** with bounded exponents run.
"""

from __future__ import annotations

import ast
import operator
import random
import re

from strands import tool
from strands.types.tools import AgentTool

from infra.agents.contract import AgentTask, EpisodeLimits
from infra.agents.envs.base import AgentEnvironment
from rewards.contract import RewardRequest, RewardResult, register_reward

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def evaluate(expression: str) -> int | float:
    """Return the value of an arithmetic ``expression``; raise ``ValueError`` on anything else."""
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent larger than 64")
            return _BINARY[type(node.op)](left, right)
        raise ValueError(f"unsupported syntax: {type(node).__name__}")

    try:
        return walk(tree.body)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses.

    Args:
        expression: The expression to evaluate, for example "12 * (3 + 4)".
    """
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


@register_reward("agent_calculator")
def calculator_reward(request: RewardRequest) -> RewardResult:
    """Return 1 when the last ``\\boxed{N}`` of the final answer equals the integer ground truth."""
    try:
        gold = int(request.label)
    except (TypeError, ValueError):
        return RewardResult(score=0.0, failure="bad_label", details={"label": repr(request.label)[:80]})
    found = _BOXED.findall(request.response)
    if not found:
        return RewardResult(score=0.0, failure="no_answer")
    try:
        answer = int(found[-1])
    except ValueError:  # more digits than int() converts (4,300): no gold of int() is that long
        return RewardResult(
            score=0.0, parsed=found[-1][:80], failure="wrong", details={"digits": len(found[-1])}
        )
    ok = answer == gold
    return RewardResult(score=float(ok), parsed=str(answer), failure=None if ok else "wrong")


_FOLLOW_UPS = (("add", "+"), ("subtract", "-"), ("multiply the result by", "*"))


class CalculatorEnv(AgentEnvironment):
    """Arithmetic with a ``calculate`` tool: ``turns`` user turns per episode, operands <= ``max_operand``."""

    name = "calculator"
    system_prompt = "You are a careful assistant. Use the calculate tool, then answer as \\boxed{N}."

    def __init__(self, turns: int = 1, max_operand: int = 99, **limits: int) -> None:
        if turns < 1 or max_operand < 2:
            raise ValueError(
                f"calculator env: turns ({turns}) must be >= 1 and max_operand ({max_operand}) >= 2"
            )
        self.turns = turns
        self.max_operand = max_operand
        self.limits = EpisodeLimits(**limits)

    def tools(self) -> list[AgentTool]:
        """Return the one ``calculate`` tool."""
        return [calculate]

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` deterministic multi-turn arithmetic tasks."""
        rng = random.Random(seed)
        out = []
        for i in range(n):
            a, b = rng.randint(2, self.max_operand), rng.randint(2, self.max_operand)
            op = rng.choice("+-*")
            value = evaluate(f"{a} {op} {b}")
            values = [value]
            follow_ups = []
            for _ in range(self.turns - 1):
                word, sym = rng.choice(_FOLLOW_UPS)
                c = rng.randint(2, self.max_operand)
                value = evaluate(f"{value} {sym} {c}")
                values.append(value)
                phrase = (
                    f"Now {word} {c}."
                    if sym == "*"
                    else f"Now {word} {c} {'to' if sym == '+' else 'from'} it."
                )
                follow_ups.append(f"{phrase} Answer as \\boxed{{N}}.")
            out.append(
                AgentTask(
                    id=f"calculator-{seed}-{i}",
                    messages=[{"role": "user", "content": f"Compute {a} {op} {b}. Answer as \\boxed{{N}}."}],
                    ground_truth=int(value),
                    limits=self.limits,
                    user_turns=follow_ups,
                    metadata={"env": self.name, "intermediate": values},
                )
            )
        return out

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Score with the registered ``agent_calculator`` reward."""
        return calculator_reward(request)
