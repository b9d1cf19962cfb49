"""slime hooks pointing into this repository, loaded by dotted path inside the Ray actors.

* ``infra.production.slime_hooks.reward`` — ``--custom-rm-path``: the shared reward contract
  (``rewards.contract``) as slime's awaited reward function. An infrastructure failure
  (``RewardResult.aborted``) is marked ``metadata["rufus_aborted"]`` and returns 0.0, a float, because
  slime's filters and metrics do arithmetic on every reward (``sum``, ``round``); the post-process hook
  then removes it from its group and its loss (``remove_sample``), the band filter ignores it. Held-out
  evals count it as a failure (slime's eval has no removal); ``reward_failure`` names why.
* ``infra.production.slime_hooks.post_process_rewards`` — ``--custom-reward-post-process-path``: drops
  aborted samples from their group, applies the stage's group-aware shaping (``infra.objectives``, with
  the per-sample facts of ``infra.objectives.group_view``, shared with the embedded trainer), computes
  the stage's advantages and zeroes the loss of truncated samples when the stage asks for it.
* ``infra.production.slime_hooks.band_filter`` — ``--dynamic-sampling-filter-path``: keeps groups whose
  mean reward lies in the stage's band (RA §3.2: (0, 0.8]).
* ``infra.production.slime_hooks.fireflash_loss`` — ``--custom-loss-function-path`` for FireFlash.
* ``infra.production.slime_hooks.generate`` — ``--custom-generate-function-path`` for stages whose
  environment is multi-turn (``rl.environment``, see ``infra.environments``): the environment runs the
  episode (the ``agent`` one: the Strands loop against the SGLang router, optionally in Ray actors).

Stage settings reach the hooks through the ``--custom-config-path`` YAML that the renderer writes: slime
sets each top-level key as an attribute of ``args`` (keys ``rufus_*``). slime types are imported lazily
so the module imports (and is tested) without slime installed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from pathlib import Path
from typing import Any

from infra.objectives import band_keep, group_advantages, shape_group
from infra.objectives.group_view import advantage_kwargs, shaping_kwargs, view_from_slime
from rewards.contract import RewardRequest, get_reward, safe_score


def _reward_name(args: Any, sample: Any) -> str:
    """The reward name of ``sample``: ``metadata['reward']`` first, then the stage's ``rufus_reward``."""
    name = (sample.metadata or {}).get("reward") or getattr(args, "rufus_reward", None)
    if not name:
        raise ValueError(
            "no reward name: set metadata['reward'] in the prompt rows "
            "or rufus_reward in --custom-config-path"
        )
    return str(name)


_GLM_TURN = re.compile(r"<\|(system|user|assistant|observation)\|>")


def prompt_messages(prompt: Any) -> list[dict[str, Any]]:
    """The chat messages of ``sample.prompt``: the list itself, or the turns of a rendered GLM prompt.

    With ``--apply-chat-template`` slime hands the hooks the rendered template string; a judge must see
    the conversation, not ``[gMASK]<sop><|user|>…`` markup. A string with no GLM role marker is one user
    turn. The trailing generation prompt (an empty assistant turn) is dropped, and assistant history
    loses its ``<think></think>`` wrapper.
    """
    if isinstance(prompt, list):
        return prompt
    text = str(prompt)
    parts = _GLM_TURN.split(text)
    if len(parts) == 1:
        return [{"role": "user", "content": text}]
    messages = []
    for role, body in zip(parts[1::2], parts[2::2], strict=True):
        content = body.strip()
        if role == "assistant":
            content = re.sub(r"^<think>.*?</think>", "", content, flags=re.DOTALL).strip()
        messages.append({"role": "tool" if role == "observation" else role, "content": content})
    if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()
    return messages


def _request(sample: Any) -> RewardRequest:
    """Build the reward request of one slime sample (prompt messages, response text, label, metadata)."""
    prompt = prompt_messages(sample.prompt)
    metadata = dict(sample.metadata or {})
    return RewardRequest(
        prompt=prompt,
        response=sample.response or "",
        label=sample.label,
        metadata=metadata,
        transcript=metadata.get("transcript"),
    )


ABORTED_KEY = "rufus_aborted"


def score_sample(args: Any, sample: Any) -> float:
    """Score one sample with the shared contract; an infra failure is marked aborted and returns 0.0."""
    load_stage_files(args)
    result = safe_score(get_reward(_reward_name(args, sample)), _request(sample))
    sample.metadata = dict(sample.metadata or {})
    sample.metadata["reward_components"] = dict(result.components)
    sample.metadata["reward_failure"] = result.failure
    sample.metadata[ABORTED_KEY] = bool(result.aborted)
    return 0.0 if result.aborted else float(result.score)


async def reward(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    """slime ``--custom-rm-path`` hook: one sample (or a list when a generate function fans out).

    Verifiers may block (sandboxes, math-verify), so each runs in a worker thread; the event loop that
    drives generation keeps going meanwhile.
    """
    if isinstance(sample, list):
        return list(await asyncio.gather(*(asyncio.to_thread(score_sample, args, s) for s in sample)))
    return await asyncio.to_thread(score_sample, args, sample)


def _is_aborted(sample: Any) -> bool:
    """True for a reward infra failure (our flag) or a generation slime itself aborted."""
    status = getattr(sample.status, "name", str(sample.status)).upper()
    return bool((sample.metadata or {}).get(ABORTED_KEY)) or status == "ABORTED" or sample.reward is None


def _is_truncated(sample: Any) -> bool:
    return getattr(sample.status, "name", str(sample.status)).upper() == "TRUNCATED"


def _reward_value(args: Any, sample: Any) -> float:
    value = sample.get_reward_value(args) if hasattr(sample, "get_reward_value") else sample.reward
    return float(value)


def post_process_rewards(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """slime ``--custom-reward-post-process-path`` hook: return ``(raw_rewards, advantages)`` per sample.

    ``samples`` is the flat rollout, ``n_samples_per_prompt`` consecutive samples per prompt. For each
    group: aborted samples leave the group (``remove_aborted``) and are excluded from the loss
    (``remove_sample``); the rest are shaped with ``rufus_shaping`` and turned into advantages with
    ``rufus_advantage``. Truncated samples keep their place in the group statistics but lose their loss
    when ``rufus_mask_truncated`` is set (RA §3.2). The raw value logged for an aborted sample is the
    mean of its group's kept rewards, so rollout reward averages are unaffected by infrastructure noise.
    """
    n = int(args.n_samples_per_prompt)
    if n < 1 or len(samples) % n:
        raise ValueError(f"post_process_rewards: {len(samples)} samples do not form groups of {n}")
    shaping = dict(getattr(args, "rufus_shaping", None) or {"kind": "none"})
    kind = str(shaping.get("kind", "none"))
    coef = float(shaping.get("coef", 0.0))
    params = {k: float(v) for k, v in (shaping.get("params") or {}).items()}
    adv_kind = str(getattr(args, "rufus_advantage", "grpo"))
    mask_truncated = bool(getattr(args, "rufus_mask_truncated", False))
    raw_out: list[float] = []
    adv_out: list[float] = []
    for start in range(0, len(samples), n):
        group = samples[start : start + n]
        kept_idx = [i for i, s in enumerate(group) if not _is_aborted(s)]
        kept = [group[i] for i in kept_idx]
        raw = [_reward_value(args, s) for s in kept]
        adv_by_idx: dict[int, float] = {}
        if kept:
            view = view_from_slime(args, kept, raw)
            shaped = shape_group(kind, view.scores, **shaping_kwargs(kind, view, coef, params))
            adv = group_advantages(adv_kind, shaped, **advantage_kwargs(adv_kind, view))
            adv_by_idx = dict(zip(kept_idx, (float(a) for a in adv.tolist()), strict=True))
        fill = sum(raw) / len(raw) if raw else 0.0
        raw_by_idx = dict(zip(kept_idx, raw, strict=True))
        for i, s in enumerate(group):
            if i not in adv_by_idx:
                s.remove_sample = True
            elif mask_truncated and _is_truncated(s):
                s.remove_sample = True
            raw_out.append(raw_by_idx.get(i, fill))
            adv_out.append(adv_by_idx.get(i, 0.0))
    return raw_out, adv_out


def band_filter(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """slime ``--dynamic-sampling-filter-path`` hook: keep a group iff its mean reward is in ``rufus_band``.

    Aborted samples do not vote; a group with fewer than two scored samples is dropped (nothing to learn
    from). Returns slime's ``DynamicFilterOutput``; the pinned slime also accepts a bare bool, used only
    when slime is not importable (CPU tests).
    """
    lo, hi = (float(x) for x in args.rufus_band)
    flat = [s[0] if isinstance(s, list) else s for s in samples]
    rewards = [_reward_value(args, s) for s in flat if not _is_aborted(s)]
    if len(rewards) < 2:
        keep, reason = False, "too_few_scored"
    else:
        keep = band_keep(rewards, lo, hi)
        reason = None if keep else f"mean_outside_({lo},{hi}]"
    try:
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:
        return keep
    return DynamicFilterOutput(keep=keep, reason=reason)


def load_stage_files(args: Any) -> None:
    """Import the stage folder's ``reward.py``/``env.py`` listed in ``rufus_stage_files`` (once per process).

    They register the stage's own rewards and environments, which the hooks then look up by name.
    """
    _import_stage_files(tuple(getattr(args, "rufus_stage_files", None) or ()))


@functools.cache
def _import_stage_files(paths: tuple[str, ...]) -> None:
    from infra.recipe import import_stage_file

    for path in paths:
        import_stage_file(Path(path))


def environment_from_args(args: Any) -> Any:
    """The stage's environment from ``rufus_environment`` (``single_turn`` when absent), built once.

    slime calls the hooks once per sample; the hook YAML is fixed for the run, so the environment built
    from it is reused.
    """
    from infra.environments import SINGLE_TURN

    spec = dict(getattr(args, "rufus_environment", None) or {"name": SINGLE_TURN})
    return _built_once(args, spec["name"], spec.get("options") or {})


def _built_once(args: Any, name: str, options: dict[str, Any]) -> Any:
    """The environment ``name`` with ``options`` and the stage's reward, built once per process."""
    load_stage_files(args)
    key = json.dumps([name, options], sort_keys=True)
    return _environment(key, getattr(args, "rufus_reward", None))


@functools.cache
def _environment(key: str, reward: str | None) -> Any:
    from infra.environments import build_environment

    name, options = json.loads(key)
    return build_environment(name, options, reward=reward)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime ``--custom-generate-function-path`` hook: run the sample's episode in the stage's environment.

    The renderer wires it only for multi-turn environments (``rl.environment`` in the stage's
    ``launch.yaml``); single-turn stages use slime's own generate. slime sends every sample through it,
    the evaluation's guardrail rows too: a row written by another environment (``metadata.environment``;
    none means single-turn) is played in that one, a single-turn row by slime's own generate (its reward
    then comes from ``--custom-rm-path``).
    """
    env = environment_from_args(args)
    if not env.multi_turn:
        raise ValueError(
            f"environment {env.name!r} is single-turn: slime's own generate serves it, not this hook"
        )
    metadata = dict(getattr(sample, "metadata", None) or {})
    if not env.serves(metadata):
        env = row_environment_from_metadata(args, metadata)
        if not env.multi_turn:
            from slime.rollout.sglang_rollout import generate as slime_generate

            return await slime_generate(args, sample, sampling_params)
    return await env.slime_generate(args, sample, sampling_params, evaluation=evaluation)


def row_environment_from_metadata(args: Any, metadata: dict[str, Any]) -> Any:
    """The environment a row's ``metadata`` names (``environment``, ``environment_options``), built once."""
    from infra.environments import row_environment_spec

    return _built_once(args, *row_environment_spec(metadata))


def fireflash_loss(args: Any, batch: dict[str, Any], logits: Any, sum_of_sample_mean: Any) -> Any:
    """slime ``--custom-loss-function-path`` hook for FireFlash (see ``infra.production.fireflash_loss``)."""
    from infra.production.fireflash_loss import fireflash_loss as _loss

    return _loss(args, batch, logits, sum_of_sample_mean)
