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

Score centering (FireFlash SC, ``rufus_score_centering_top_k: k`` in the hook YAML): the episode's
``ModelEndpoint.top_logprobs_num`` is ``k``, so every model call asks SGLang for ``top_logprobs_num: k``
(with ``return_logprob``), whose ``meta_info.output_top_logprobs`` lists, per output token, ``k`` entries
``(logprob, token_id, text)``; the loop keeps them in its per-call records (``metrics["calls"][i]``).
:func:`trained_calls` keeps the calls of the context the trajectory holds (with context compression,
only the last one), :func:`sampler_top_rows` aligns them with the response (model segment i = the i-th
call that produced tokens; environment tokens get empty rows: id 0, log-prob ``-inf``, weight 0) and
:func:`fill_sample` stores the ``[R, k]`` ids and log-probs in ``sample.train_metadata`` (keys
``infra.objectives.centering.SAMPLER_TOP_IDS`` / ``SAMPLER_TOP_LOGPROBS``), the slime field meant for
train-side per-sample data, read by ``infra.production.fireflash_loss``. A server that sends no top-k
makes :func:`sampler_top_rows` raise rather than train without centering.
"""

from __future__ import annotations

import functools
from typing import Any

from infra.agents.contract import AgentTask, EpisodeLimits, RolloutResult, Termination
from infra.objectives.centering import SAMPLER_TOP_IDS, SAMPLER_TOP_LOGPROBS

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


def trained_calls(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the loop's call records (``metrics["calls"]``) that sampled the episode's token trajectory.

    With context compression the trajectory is the last context only: the calls whose ``context`` is
    ``metrics["last_context"]`` (records without either key all count, as one context).
    """
    last = metrics.get("last_context", 0)
    return [c for c in metrics.get("calls", []) if c.get("context", 0) == last]


def sampler_top_rows(
    calls: list[dict[str, Any]], segments: list[tuple[bool, int]], response_length: int, k: int
) -> tuple[Any, Any]:
    """Return the sampler's top-k ``(ids int64 [R, k], log-probs float32 [R, k])`` aligned with the response.

    ``calls`` are the loop's per-call records in order, each with ``output_tokens`` and SGLang's
    ``output_top_logprobs`` (per output token, entries ``(logprob, token_id, text)``, most likely first);
    calls that produced no token have no segment and are skipped. Entries beyond ``k`` are dropped;
    missing ones and environment tokens are padding (id 0, ``-inf``: weight 0). Raises ValueError when a
    call has no top-k or the calls do not match the model segments.
    """
    import torch

    ids = torch.zeros(response_length, k, dtype=torch.long)
    lps = torch.full((response_length, k), -torch.inf, dtype=torch.float32)
    produced = [c for c in calls if int(c.get("output_tokens") or 0) > 0]
    model_segments = [
        (pos, n) for pos, (is_model, n) in zip(_starts(segments), segments, strict=True) if is_model
    ]
    if len(produced) != len(model_segments):
        raise ValueError(
            f"score centering: {len(produced)} model calls produced tokens but the response has "
            f"{len(model_segments)} model segments"
        )
    for (pos, n), call in zip(model_segments, produced, strict=True):
        rows = call.get("output_top_logprobs")
        if rows is None or len(rows) != n:
            got = "no output_top_logprobs" if rows is None else f"{len(rows)} top-k rows"
            raise ValueError(f"score centering: a model call returned {got} for its {n} tokens")
        for t, entries in enumerate(rows):
            for j, entry in enumerate([e for e in entries or [] if e is not None][:k]):
                lps[pos + t, j], ids[pos + t, j] = float(entry[0]), int(entry[1])
    return ids, lps


def _starts(segments: list[tuple[bool, int]]) -> list[int]:
    """Start offset of each segment in the response."""
    out, pos = [], 0
    for _, n in segments:
        out.append(pos)
        pos += n
    return out


def fill_sample(
    args: Any,
    sample: Any,
    result: RolloutResult,
    tokenizer: Any = None,
    sampler_top: tuple[Any, Any] | None = None,
) -> Any:
    """Write ``result`` into ``sample`` with ``append_response_tokens`` and return the sample.

    ``sampler_top`` (from :func:`sampler_top_rows`) goes to ``sample.train_metadata`` for score centering.
    """
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
    if sampler_top is not None:
        ids, lps = sampler_top
        sample.train_metadata = {
            **(getattr(sample, "train_metadata", None) or {}),
            SAMPLER_TOP_IDS: ids,
            SAMPLER_TOP_LOGPROBS: lps,
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


async def generate(
    args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False, spec: str | None = None
) -> Any:
    """slime custom generate: run the episode of ``sample`` on the SGLang router and fill the sample.

    The episode runs in the agent environment ``spec`` (default: the stage's ``agent_env``; an evaluation
    row of another agent environment names its own). With ``rufus_env_actors: N`` in the hook YAML it runs
    in one of N named Ray actors (tools and verifiers off slime's rollout process), picked by the sample's
    index; otherwise it runs here.
    """
    from infra.agents.envs.base import load_environment
    from infra.agents.loop import ModelEndpoint, run_episode

    spec = spec or getattr(args, "agent_env", None)
    if not spec:
        raise ValueError("slime args have no 'agent_env': set it in the --custom-config-path YAML")
    top_k = getattr(args, "rufus_score_centering_top_k", None) or None
    tokenizer = _tokenizer(args.hf_checkpoint)
    base_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    sampling = {
        "temperature": float(sampling_params.get("temperature", 1.0)),
        "top_p": float(sampling_params.get("top_p", 1.0)),
        "max_retries": 60,
        "timeout": None,
        **({"top_logprobs_num": int(top_k)} if top_k is not None else {}),
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
    sampler_top = None
    if top_k is not None:
        calls = trained_calls(result.metrics)
        sampler_top = sampler_top_rows(calls, result.segments, result.response_length, int(top_k))
    return fill_sample(args, sample, result, tokenizer, sampler_top)
