"""Multi-turn tool environments: an ``infra.agents`` environment (tools, tasks, verifier) as an RL stage.

The episode is the Strands agent loop of :func:`infra.agents.loop.run_episode`, token-in/token-out
against a ``/generate`` endpoint: model turns are sampled (loss mask 1, rollout logprobs kept), tool
results and simulated-user turns are rendered by the chat template (loss mask 0). The reward is the agent
environment's verifier; an episode the infrastructure broke is ``aborted`` and leaves its group.

* **embedded**: the endpoint is the local ``/generate`` server (:mod:`infra.agents.local_server`) over
  the very model being trained, served on 127.0.0.1 for the duration of one rollout.
* **production**: slime's custom generate hook calls :func:`infra.agents.slime_generate.generate` per
  sample against the SGLang router; the hook YAML carries ``agent_env`` (the spec) and
  ``rufus_env_actors`` (run the episodes in that many Ray environment actors, 0 = in slime's rollout
  process).

Rows are written with :func:`task_row` (the task rides in ``metadata``: ``task_id``, ``limits``,
``user_turns``, ``tools_enabled``), which is exactly what the slime hook reads back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data_prep.schema import PromptRow
from infra.agents.contract import AgentTask, RolloutResult
from infra.embedded.runtime import derive_seed
from infra.environments.base import Environment, Episode, Group, Policy, Sampling
from infra.layering import ConfigError
from rewards.contract import RewardResult

AGENT = "agent"


class AgentOptions(BaseModel):
    """Options of the ``agent`` environment."""

    model_config = ConfigDict(extra="forbid")

    env: str = Field(
        description="infra.agents environment spec, e.g. 'calculator:turns=2' or a registered name."
    )
    concurrency: int = Field(default=4, ge=1, description="Episodes in flight at once (embedded).")
    ray_actors: int = Field(
        default=0, ge=0, description="Production: run episodes in N Ray environment actors (0: in-process)."
    )

    @field_validator("env")
    @classmethod
    def _loads(cls, spec: str) -> str:
        from infra.agents.envs.base import load_environment

        try:
            load_environment(spec)
        except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
            raise ValueError(f"agent environment {spec!r} does not load: {exc}") from None
        return spec


def task_row(task: AgentTask, options: AgentOptions, **metadata: Any) -> PromptRow:
    """Return the prompt row that carries ``task`` run with ``options`` (``metadata`` entries are added)."""
    from infra.agents.slime_generate import task_row_metadata

    env = {"environment": AGENT, "environment_options": options.model_dump()}
    meta = {**task_row_metadata(task), **env, **metadata}
    return PromptRow(id=task.id, prompt=task.messages, label=task.ground_truth, metadata=meta)


def episode_of(result: RolloutResult) -> Episode:
    """Return the trainer's :class:`Episode` of one agent rollout (unscored episodes are ``aborted``)."""
    if result.reward is None:
        reward = RewardResult(
            score=0.0, aborted=True, failure=result.termination.value, details={"error": result.error}
        )
    else:
        reward = RewardResult.model_validate(result.reward_details)
    m = result.metrics
    from infra.agents.loop import final_answer_text
    from infra.agents.tool_usage import tool_call_counts

    iters, calls = tool_call_counts(result.transcript)

    return Episode(
        token_ids=list(result.response_ids),
        logprobs=list(result.rollout_logprobs),
        finish_reason="length" if result.termination.is_truncation else "stop",
        reward=reward,
        text=final_answer_text(result.transcript),
        loss_mask=list(result.loss_mask),
        prompt_ids=list(result.prompt_ids),
        metrics={
            "turns": int(m.get("model_calls", 1)),
            "tool_calls": int(m.get("tool_calls", 0)),
            "invalid_tool_calls": int(m.get("malformed_tool_calls", 0)) + int(m.get("tool_errors", 0)),
            "termination": result.termination.value,
            "tool_iters": iters,  # RA Table 19's columns, pooled by the held-out evaluation
            "tool_calls_by_name": dict(calls),
        },
    )


@contextmanager
def quiet_episode_logs() -> Iterator[None]:
    """Silence the per-episode log lines of strands / strands-env while an embedded rollout runs.

    A budget stop (max tokens, tool iterations) is an ordinary end of an RL episode, which Strands logs
    as an error: it is recorded as the episode's termination and counted in the step metrics
    (``episodes_<termination>``), not printed once per episode.
    """
    loggers = [logging.getLogger(name) for name in ("strands", "strands_env", "strands_sglang")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


class AgentToolEnvironment(Environment):
    """An ``infra.agents`` environment run through the Strands agent loop."""

    name = AGENT
    Options = AgentOptions
    multi_turn = True

    def serves(self, metadata: Mapping[str, Any]) -> bool:
        """Also the same ``infra.agents`` environment: a terminal task is not played in the search world.

        The spec's options (``kw_tiny:servers=16``) may differ; the stage's own then hold.
        """
        from infra.agents.envs.base import parse_env_spec

        if not super().serves(metadata):
            return False
        spec = (metadata.get("environment_options") or {}).get("env")
        return spec is None or parse_env_spec(str(spec))[0] == parse_env_spec(self.options.env)[0]

    def agent_env(self) -> Any:
        """Return a fresh agent environment (environments keep per-episode state)."""
        from infra.agents.envs.base import load_environment

        return load_environment(self.options.env)

    def task_rows(self, n: int, seed: int, **metadata: Any) -> list[PromptRow]:
        """Return ``n`` task rows generated by the agent environment from ``seed``."""
        return [task_row(t, self.options, **metadata) for t in self.agent_env().tasks(n, seed)]

    def worker_slots(self, episodes: int) -> int:
        """Lockstep workers for ``episodes``; a ConfigError if the environment cannot hold that many."""
        slots = max(1, min(self.options.concurrency, episodes))
        capacity = self.agent_env().episode_capacity()
        if capacity is not None and slots > capacity:
            raise ConfigError(
                f"rl.environment.options.concurrency={self.options.concurrency}: environment "
                f"{self.options.env!r} holds only {capacity} episodes at once; lower the concurrency or "
                "raise the environment's capacity (kw: servers=)"
            )
        return slots

    def rollout(
        self,
        policy: Policy,
        rows: list[PromptRow],
        n: int,
        sampling: Sampling,
        on_episode: Callable[[], None] | None = None,
    ) -> list[Group]:
        """Run ``n`` episodes per row against a local ``/generate`` server over ``policy``.

        ``on_episode`` is called as each episode ends (a caller's progress bar).
        """
        from infra.agents.local_server import GenerateServer, embedded_backend, embedded_batch_backend
        from infra.agents.lockstep import LockstepBatcher
        from infra.agents.loop import ModelEndpoint
        from infra.agents.slime_generate import task_from_parts

        tok = policy.tokenizer
        context = sampling.max_context_tokens or int(policy.model.config.max_position_embeddings)
        tasks = [task_from_parts(r.prompt, r.label, r.metadata, r.id, sampling.max_new_tokens) for r in rows]
        backend = policy.backend or embedded_backend(policy.model, tok)
        slots = self.worker_slots(len(tasks) * n)
        # The trained model is served in lockstep batches (one per round of the workers' requests); a
        # test's scripted backend is called one request at a time.
        batch = None
        if not policy.backend:
            batch = embedded_batch_backend(policy.model, tok, sampling.drop_finished, sampling.eager_decode)
        batcher = LockstepBatcher(batch, slots) if batch else None
        server = GenerateServer(backend, tok, max_context_tokens=context, batcher=batcher)
        with server, quiet_episode_logs():
            endpoint = ModelEndpoint(
                base_url=server.url,
                tokenizer=tok,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_retries=0,
            )
            try:
                done = batcher.worker_done if batcher else None
                results = asyncio.run(
                    self._episodes(endpoint, tasks, n, sampling.seed, slots, done, on_episode)
                )
            finally:
                if batcher is not None:
                    batcher.close()
        groups = []
        for i, row in enumerate(rows):
            mine = results[i * n : (i + 1) * n]
            prompt = next((r.prompt_ids for r in mine if r.prompt_ids), [])  # an aborted one may have none
            groups.append(Group(row, list(prompt), [episode_of(r) for r in mine]))
        return groups

    async def _episodes(
        self,
        endpoint: Any,
        tasks: list[AgentTask],
        n: int,
        seed: int,
        slots: int | None = None,
        worker_done: Any = None,
        on_episode: Callable[[], None] | None = None,
    ) -> list[RolloutResult]:
        """Play ``n`` episodes per task with ``slots`` workers, each a fixed share of the episodes in turn.

        Sample-major order: the episodes in flight belong to different tasks, so an environment that keeps
        a warm server per task (AWM: one per scenario, reset between episodes) reuses it sample after
        sample. ``worker_done`` is called as each worker finishes (the lockstep batcher stops waiting for it),
        ``on_episode`` as each episode ends.
        """
        import dataclasses

        from infra.agents.loop import run_episode

        order = [(i, j) for j in range(n) for i in range(len(tasks))]
        slots = max(1, min(slots or self.options.concurrency, len(order)))
        done: dict[tuple[int, int], RolloutResult] = {}

        async def worker(k: int) -> None:
            try:
                for i, j in order[k::slots]:
                    ep = dataclasses.replace(endpoint, seed=derive_seed(seed, i, j) % 2**31)
                    done[(i, j)] = await run_episode(self.agent_env(), tasks[i], ep)
                    if on_episode is not None:
                        on_episode()
            finally:
                if worker_done is not None:
                    worker_done()

        await asyncio.gather(*(worker(k) for k in range(slots)))
        return [done[(i, j)] for i in range(len(tasks)) for j in range(n)]

    def slime_settings(self) -> dict[str, Any]:
        """``agent_env`` for :func:`infra.agents.slime_generate.generate`, and the actor count."""
        return {"agent_env": self.options.env, "rufus_env_actors": self.options.ray_actors}

    async def slime_generate(
        self, args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
    ) -> Any:
        """Run the sample's episode on the SGLang router (or in a Ray environment actor)."""
        from infra.agents.slime_generate import generate

        return await generate(args, sample, sampling_params, evaluation, spec=self.options.env)
