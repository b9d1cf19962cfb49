"""slime custom generate function: run one agent episode and fill the slime ``Sample`` from its result.

A stage reaches it through its environment: ``rl.environment: {name: agent, options: {env: SPEC}}``
makes the plan pass ``--custom-generate-function-path infra.production.slime_hooks.generate`` and write
``agent_env: SPEC`` (and ``rufus_env_actors``) into the ``--custom-config-path`` YAML (slime sets every
key on ``args``); the hook builds the ``agent`` environment, which calls :func:`generate`. Per-sample
settings come from the data row (written by ``infra.environments.agent.task_row``): ``sample.prompt``
(chat messages or a string), ``sample.label`` (ground truth) and ``sample.metadata`` (``limits``,
``user_turns``, ``tools_enabled``, ``task_id``).

The sample is filled segment by segment with ``Sample.append_response_tokens``: model segments with
``trainable=True`` and their rollout logprobs, tool/user/environment segments with ``trainable=False``
(loss mask 0, logprob 0.0), so ``tokens``, ``response_length``, ``loss_mask`` and
``rollout_log_probs`` stay aligned by slime's own helper. ``status`` comes from the termination:
COMPLETED (final answer, tool error), TRUNCATED (budgets), ABORTED (infrastructure) or FAILED (model
backend error); an unscored sample gets ``remove_sample=True`` and ``metadata["aborted"]=True`` so the
group filter drops it before advantages, and the 0.0 left in its reward field is never trained on.
"""

from __future__ import annotations

import functools
from typing import Any

from infra.agents.contract import AgentTask, EpisodeLimits, RolloutResult, Termination

_STATUS = {
    Termination.FINAL_ANSWER: "COMPLETED",
    Termination.TOOL_ERROR: "COMPLETED",
    Termination.TOOL_BUDGET: "TRUNCATED",
    Termination.ITERATION_BUDGET: "TRUNCATED",
    Termination.MAX_TOKENS: "TRUNCATED",
    Termination.CONTEXT_OVERFLOW: "TRUNCATED",
    Termination.ABORTED: "ABORTED",
    Termination.MODEL_ERROR: "FAILED",
}


#: Row metadata keys that describe the episode rather than the task (see :func:`task_row_metadata`).
_EPISODE_KEYS = ("limits", "user_turns", "tools_enabled")


def task_row_metadata(task: AgentTask) -> dict[str, Any]:
    """Return the row ``metadata`` that carries ``task`` through a prompt row (and slime's ``Sample``)."""
    return {
        **task.metadata,
        "task_id": task.id,
        "limits": task.limits.model_dump(exclude_defaults=True),
        "user_turns": list(task.user_turns),
        "tools_enabled": task.tools,
    }


def task_from_parts(
    prompt: Any,
    label: Any,
    metadata: dict[str, Any] | None,
    default_id: Any,
    max_new_tokens: int | None = None,
) -> AgentTask:
    """Return the :class:`AgentTask` a prompt row (or slime sample) describes: messages, label, metadata."""
    meta = dict(metadata or {})
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    limits = dict(meta.get("limits") or {})
    if max_new_tokens is not None:
        limits.setdefault("max_new_tokens", max_new_tokens)
    return AgentTask(
        id=str(meta.get("task_id", default_id)),
        messages=messages,
        tools=meta.get("tools_enabled"),
        ground_truth=label,
        limits=EpisodeLimits(**limits),
        user_turns=list(meta.get("user_turns") or []),
        metadata={k: v for k, v in meta.items() if k not in _EPISODE_KEYS},
    )


def task_from_sample(sample: Any, max_new_tokens: int | None = None) -> AgentTask:
    """Return the :class:`AgentTask` described by a slime sample's prompt, label and metadata."""
    return task_from_parts(sample.prompt, sample.label, sample.metadata, sample.index, max_new_tokens)


def fill_sample(args: Any, sample: Any, result: RolloutResult, tokenizer: Any = None) -> Any:
    """Write ``result`` into ``sample`` with ``append_response_tokens`` and return the sample."""
    sample.tokens = list(result.prompt_ids)
    sample.response_length = 0
    sample.loss_mask = []
    sample.rollout_log_probs = []
    pos = 0
    for is_model, length in result.segments:
        ids = result.response_ids[pos : pos + length]
        if is_model:
            lps = result.rollout_logprobs[pos : pos + length]
            sample.append_response_tokens(args, tokens=ids, log_probs=lps, trainable=True)
        else:
            sample.append_response_tokens(args, tokens=ids, trainable=False)
        pos += length
    if tokenizer is not None:
        sample.response = tokenizer.decode(result.response_ids)
    status = _STATUS[result.termination]
    sample.status = getattr(type(sample).Status, status)
    unscored = result.reward is None
    sample.reward = 0.0 if unscored else result.reward
    if unscored:
        sample.remove_sample = True
    sample.metadata = {
        **(sample.metadata or {}),
        "termination": result.termination.value,
        "aborted": unscored,
        "agent_metrics": {k: v for k, v in result.metrics.items() if k != "calls"},
    }
    return sample


@functools.cache
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=True)


_ACTORS: dict[str, list[Any]] = {}


def _episode_actors(args: Any, spec: str, base_url: str, sampling: dict[str, Any]) -> list[Any]:
    """Return the stage's named Ray environment actors (``rufus_env_actors`` of them), creating them once."""
    from infra.agents.ray_actors import EpisodeActor

    n = int(getattr(args, "rufus_env_actors", 0) or 0)
    key = f"{getattr(args, 'rufus_stage', 'stage')}:{spec}"
    if key not in _ACTORS:
        _ACTORS[key] = [
            EpisodeActor.options(name=f"rufus-env-{key}-{i}", get_if_exists=True, lifetime="detached").remote(
                spec, base_url, args.hf_checkpoint, sampling
            )
            for i in range(n)
        ]
    return _ACTORS[key]


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime custom generate: run the episode of ``sample`` on the SGLang router and fill the sample.

    With ``rufus_env_actors: N`` in the hook YAML the episode runs in one of N named Ray actors (tools and
    verifiers off slime's rollout process), picked by the sample's index; otherwise it runs here.
    """
    from infra.agents.envs.base import load_environment
    from infra.agents.loop import ModelEndpoint, run_episode

    spec = getattr(args, "agent_env", None)
    if not spec:
        raise ValueError("slime args have no 'agent_env': set it in the --custom-config-path YAML")
    tokenizer = _tokenizer(args.hf_checkpoint)
    base_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    sampling = {
        "temperature": float(sampling_params.get("temperature", 1.0)),
        "top_p": float(sampling_params.get("top_p", 1.0)),
        "max_retries": 60,
        "timeout": None,
    }
    task = task_from_sample(sample, sampling_params.get("max_new_tokens"))
    actors = _episode_actors(args, spec, base_url, sampling) if getattr(args, "rufus_env_actors", 0) else []
    if actors:
        actor = actors[int(sample.index or 0) % len(actors)]
        reply = await actor.run.remote(task.model_dump_json(), None, sampling)
        result = RolloutResult.model_validate_json(reply)
    else:
        endpoint = ModelEndpoint(base_url=base_url, tokenizer=tokenizer, **sampling)
        result = await run_episode(load_environment(spec), task, endpoint)
    return fill_sample(args, sample, result, tokenizer)
