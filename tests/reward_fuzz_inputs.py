"""Hostile model outputs every registered reward must survive, shared by the fuzz test and its benchmark.

Model output is arbitrary. Every reward in the table below must, for any response: return a
:class:`~rewards.contract.RewardResult` whose score lies in ``[0, 1]``, never raise, finish in bounded
time (linear in the response, or under a documented cap or timeout) and give the same verdict twice.
``tests/test_reward_fuzz.py`` checks this with hypothesis at CI size; ``benchmarks/bench_reward_fuzz.py``
runs 10^5 responses per reward from :func:`random_response` and reports throughput and the slowest call.

Use::

    request = fuzz_request("math", response)      # the reward's realistic label and metadata
    check_result(get_reward("math")(request))     # raises AssertionError naming what is wrong
"""

from __future__ import annotations

import math
import random
from functools import cache
from typing import Any

from rewards.contract import RewardRequest, RewardResult

#: Registered rewards and the tiny-task family whose row gives each its label and metadata.
FUZZED_REWARDS: dict[str, str] = {
    "sft_format": "math",
    "reasoning": "science",
    "math": "math",
    "puzzle": "puzzle",
    "science": "science",
    "code": "code",
    "if_rubrics": "if_multi_constraint",
    "agent_calculator": "math",
}

#: Short pieces responses are built from: markup fragments, unbalanced brackets, every kind of line
#: break and blank, lone surrogates (text that was not UTF-8), control characters, overflowing numbers.
FRAGMENTS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "\\boxed{",
    "\\fbox {",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "```python\n",
    "```",
    "Answer:",
    "**Final answer**: ",
    "answer",
    "\n",
    " ",
    "\t",
    "\r\n",
    "\u00a0",
    "\u2028",
    "\ud800",
    "\udcff",
    "\x00",
    "\x1b[31m",
    "9" * 40,
    "-1e999",
    "nan",
    "28",
    "206",
    "\\frac{1}{2}",
    "\\text{",
    "<b>",
    "</",
    "<!--",
    "&amp;",
    '{"a": [',
    "def value(x):\n    return x * x + 14\n",
    "*",
    "- ",
    "# ",
    '"',
    "é",
    "😀",
    "零",
    "star",
)

#: Patterns that are pathological when repeated: whitespace runs with line breaks, thousands of
#: unclosed boxes, brackets or fences, bullet lists, answer markers, huge numbers.
RUNS: tuple[str, ...] = (
    "\n",
    " ",
    "x\n",
    " \n",
    "\\boxed{",
    "[",
    "{",
    "}",
    "(",
    "* a\n",
    "answer:\n",
    "Answer: 1\n",
    "<think>",
    "\\text{",
    "9",
    "```python\n",
    "**",
    '{"a":',
)

#: Longest generated response, in characters (the benchmark's and the fuzz test's huge inputs).
MAX_CHARS = 100_000


def build_response(pieces: list[str], run: str = "", repeat: int = 0, tail: str = "") -> str:
    """Join ``pieces``, ``run`` repeated ``repeat`` times (capped at :data:`MAX_CHARS`) and ``tail``."""
    if run:
        repeat = min(repeat, MAX_CHARS // len(run))
    return "".join(pieces) + run * repeat + tail


def random_response(rng: random.Random) -> str:
    """A response drawn like the fuzz test's: fragments, and one time in four a long pathological run."""
    pieces = [rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 24))]
    if rng.random() < 0.25:
        run, repeat = rng.choice(RUNS), rng.choice((10, 1000, 20_000, MAX_CHARS))
        tail = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 3)))
        return build_response(pieces, run, repeat, tail)
    return build_response(pieces)


@cache
def _template(family: str) -> tuple[Any, ...]:
    from data_prep.tiny_tasks import GENERATORS

    task = GENERATORS[family](1, seed=0, split="heldout")[0]
    return task.prompt, task.label, task.metadata


def fuzz_request(reward: str, response: str) -> RewardRequest:
    """A request for ``reward`` with a real tiny-task label and metadata and the given response."""
    prompt, label, metadata = _template(FUZZED_REWARDS[reward])
    if reward == "agent_calculator":
        label = 28
    return RewardRequest(prompt=list(prompt), response=response, label=label, metadata=dict(metadata))


def check_result(result: object) -> RewardResult:
    """Return ``result`` if it is a RewardResult with a finite score in [0, 1], else raise AssertionError."""
    if not isinstance(result, RewardResult):
        raise AssertionError(f"reward returned {type(result).__name__}, not RewardResult")
    if not (math.isfinite(result.score) and 0.0 <= result.score <= 1.0):
        raise AssertionError(f"score {result.score!r} outside [0, 1] (failure {result.failure!r})")
    return result


def verdict(result: RewardResult) -> tuple[float, str | None, bool]:
    """What must not change between two calls on one input: score, failure kind, aborted."""
    return result.score, result.failure, result.aborted
