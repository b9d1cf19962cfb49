"""Environment actors distributed with Ray: episodes (tool execution, rewards) run off the trainer process.

Each :class:`EpisodeActor` is an async Ray actor holding one environment instance and a tokenizer; it
runs :func:`infra.agents.loop.run_episode` against a ``/generate`` endpoint and returns the result as
JSON. :func:`run_episodes` spreads tasks round-robin over a few actors and keeps task order.

strands-env ships an ``EnvironmentActorPool`` with the same idea, but it round-trips strands-env's own
``RolloutResult`` schema (not this contract) and its ``shutdown`` runs ``ray stop --force`` on every
node, which would kill a shared training cluster; this module is the small piece needed instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from infra.agents.contract import AgentTask, RolloutResult


@ray.remote
class EpisodeActor:
    """A Ray actor that runs agent episodes of one environment against one ``/generate`` endpoint."""

    def __init__(self, env_spec: str, base_url: str, tokenizer_path: str, sampling: dict[str, Any]) -> None:
        from transformers import AutoTokenizer

        from infra.agents.envs.base import load_environment
        from infra.agents.loop import ModelEndpoint

        self.env = load_environment(env_spec)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        self.endpoint = ModelEndpoint(base_url=base_url, tokenizer=tokenizer, **sampling)
        self.lock = asyncio.Lock()  # one environment instance: its episodes run one after another

    async def run(self, task_json: str, seed: int | None, sampling: dict[str, Any] | None = None) -> str:
        """Run the task (``AgentTask`` JSON) and return the ``RolloutResult`` JSON.

        ``sampling`` overrides the actor's endpoint settings for this episode (e.g. evaluation's
        temperature, which differs from training's).
        """
        import dataclasses

        from infra.agents.loop import run_episode

        task = AgentTask.model_validate_json(task_json)
        endpoint = dataclasses.replace(self.endpoint, seed=seed, **(sampling or {}))
        async with self.lock:
            result = await run_episode(self.env, task, endpoint)
        return result.model_dump_json()

    def pid(self) -> int:
        """Return the actor's process id (tests check that episodes ran in separate processes)."""
        import os

        return os.getpid()


def start_actors(
    env_spec: str, base_url: str, tokenizer_path: str, n_actors: int, **sampling: Any
) -> list[ray.actor.ActorHandle]:
    """Start ``n_actors`` episode actors (call ``ray.init`` first)."""
    if n_actors < 1:
        raise ValueError(f"n_actors must be >= 1, got {n_actors}")
    return [EpisodeActor.remote(env_spec, base_url, tokenizer_path, sampling) for _ in range(n_actors)]


def run_episodes(
    actors: list[ray.actor.ActorHandle], tasks: list[AgentTask], seed: int | None = None
) -> list[RolloutResult]:
    """Run ``tasks`` round-robin on ``actors`` in parallel and return the results in task order."""
    refs = [
        actors[i % len(actors)].run.remote(task.model_dump_json(), None if seed is None else seed + i)
        for i, task in enumerate(tasks)
    ]
    return [RolloutResult.model_validate_json(js) for js in ray.get(refs)]
