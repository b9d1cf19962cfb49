"""The environment interface every agent environment implements, the simulated user, and env lookup.

An environment owns its tools (Strands ``AgentTool`` objects), its task generator, its verifier and its
lifecycle (``reset`` before and ``cleanup`` after each episode, e.g. to boot and tear down a sandbox).
The shape follows strands-env's ``Environment`` (tools, hooks, reset/cleanup, reward function); the
episode itself is run by :func:`infra.agents.loop.run_episode`, which adds what strands-env's
``Environment.rollout`` lacks (sequential tools, continuation, token budgets, typed aborts).
Rewards use the recipe's one contract (:mod:`rewards.contract`), so an environment failure found while
scoring is ``aborted``, never 0.
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from strands.types.tools import AgentTool

from infra.agents.contract import AgentTask
from rewards.contract import RewardRequest, RewardResult

_Item = TypeVar("_Item")


def repeat_id(task: AgentTask, i: int, pool_size: int) -> AgentTask:
    """``task`` as draw ``i`` of a cycled pool: past the end its id gets a ``-rK`` suffix (K-th repeat)."""
    if i < pool_size:
        return task
    return task.model_copy(update={"id": f"{task.id}-r{i // pool_size}"})


def cycled_tasks(
    pool: Sequence[_Item], n: int, seed: int, task_of: Callable[[_Item], AgentTask], empty: str
) -> list[AgentTask]:
    """``n`` tasks drawn from ``pool`` in a seeded order, cycling (``-rK`` ids) past the end.

    ``empty`` is the error message when the pool holds nothing runnable.
    """
    order = list(pool)
    if not order:
        raise ValueError(empty)
    random.Random(seed).shuffle(order)
    return [repeat_id(task_of(order[i % len(order)]), i, len(order)) for i in range(n)]


#: Built-in environments by short name (``module:Class``), resolved lazily.
ENVIRONMENTS: dict[str, str] = {
    "calculator": "infra.agents.envs.calculator:CalculatorEnv",
    "awm": "infra.agents.awm.env:AwmEnv",
    "harbor": "infra.agents.harbor.env:HarborEnv",
    "awm_tiny": "data_prep.tiny_tasks.awm_env:TinyAwmEnv",  # the embedded scale's generated release
    "harbor_tiny": "data_prep.tiny_tasks.harbor_env:TinyHarborEnv",  # the embedded scale's terminal tasks
    "search": "infra.agents.search.env:SearchEnv",
    "search_tiny": "data_prep.tiny_tasks.search_env:TinySearchEnv",  # the embedded scale's offline world
    "kw": "infra.agents.kw.env:KwEnv",  # stage 08: knowledge-work tasks in Feather, graded by their rubric
    "kw_tiny": "infra.agents.kw.tiny:TinyKwEnv",  # the embedded scale's generated knowledge-work tasks
}
#: Environments registered at run time (a stage folder's ``env.py``), by short name.
_REGISTERED: dict[str, type[AgentEnvironment]] = {}


class SimulatedUser:
    """A user who answers each time the model ends its turn, with replies given in advance.

    Returns None when it has nothing more to say, which ends the episode with a final answer.
    """

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.turn = 0

    def reply(self, transcript: list[dict[str, Any]]) -> str | None:
        """Return the next user message, or None when the dialogue is over."""
        if self.turn >= len(self.replies):
            return None
        self.turn += 1
        return self.replies[self.turn - 1]


class AgentEnvironment(ABC):
    """An agent environment: tools, tasks, a verifier, a simulated user and a reset/cleanup lifecycle."""

    name: ClassVar[str] = "env"
    system_prompt: str | None = None

    @abstractmethod
    def tools(self) -> list[AgentTool]:
        """Return the tools of the current episode (fresh objects after ``reset``)."""

    @abstractmethod
    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        """Return ``n`` tasks generated deterministically from ``seed``."""

    @abstractmethod
    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        """Return the reward of a finished episode (``request.response`` is the final answer text)."""

    def simulated_user(self, task: AgentTask) -> SimulatedUser | None:
        """Return the user who continues the dialogue after each final answer (None: single turn)."""
        return SimulatedUser(task.user_turns) if task.user_turns else None

    def hooks(self) -> list[Any]:
        """Return extra Strands hooks for the episode."""
        return []

    def episode_capacity(self) -> int | None:
        """How many episodes can hold their resources at once (None: no limit).

        An episode that waits for a resource another one holds would stall a lockstep rollout, which runs
        a model batch only once every worker has asked; the rollout refuses more workers than this.
        """
        return None

    def preflight(self) -> str | None:
        """Why this environment cannot run episodes on this host (a backend, a key), or None when it can."""
        return None

    async def reset(self, task: AgentTask) -> None:  # noqa: B027 - optional hook, no-op by default
        """Prepare the environment for ``task`` (boot sandboxes, open sessions)."""

    async def cleanup(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release what ``reset`` acquired."""


def register_agent_environment(name: str):  # noqa: ANN201 - decorator
    """Class decorator: make an :class:`AgentEnvironment` loadable by ``name`` (from a stage's ``env.py``)."""

    def deco(cls: type[AgentEnvironment]) -> type[AgentEnvironment]:
        if name in ENVIRONMENTS:
            raise ValueError(f"agent environment {name!r} is a built-in name; choose another")
        known = _REGISTERED.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"agent environment {name!r} is already registered by {known.__module__}")
        _REGISTERED[name] = cls
        return cls

    return deco


def parse_env_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``NAME[:key=value,...]`` into the name and keyword arguments (ints/floats converted)."""
    name, _, opts = spec.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (o.strip() for o in opts.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"env spec {spec!r}: option {item!r} is not key=value")
        for cast in (int, float):
            try:
                kwargs[key] = cast(value)
                break
            except ValueError:
                continue
        else:
            kwargs[key] = {"true": True, "false": False}.get(value.lower(), value)
    return name, kwargs


def load_environment(spec: str) -> AgentEnvironment:
    """Build the environment named by ``spec``: a built-in or registered name or ``pkg.module.Class``,
    plus ``:key=value`` options."""
    name, kwargs = parse_env_spec(spec)
    cls = _REGISTERED.get(name)
    if cls is None:
        target = ENVIRONMENTS.get(name)
        if target is None:
            if "." not in name:
                known = ", ".join(sorted(set(ENVIRONMENTS) | set(_REGISTERED)))
                raise KeyError(f"unknown environment {name!r}; known: {known}")
            module, _, attr = name.rpartition(".")
        else:
            module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    env = cls(**kwargs)
    if not isinstance(env, AgentEnvironment):
        raise TypeError(f"env spec {spec!r} built {type(env).__name__}, not an AgentEnvironment")
    return env
