"""slime hooks pointing into this repository, loaded by dotted path inside the Ray actors.

* ``infra.production.slime_hooks.reward`` — ``--custom-rm-path``: the shared reward contract
  (``rewards.contract``) as slime's awaited reward function. An infrastructure failure
  (``RewardResult.aborted``) sets ``sample.status = Sample.Status.ABORTED`` and returns ``None``; it is
  never scored 0.
* ``infra.production.slime_hooks.post_process_rewards`` — ``--custom-reward-post-process-path``: drops
  aborted samples from their group, applies the stage's group-aware shaping (``infra.objectives``),
  computes the stage's advantages and zeroes the loss of truncated samples when the stage asks for it.
* ``infra.production.slime_hooks.band_filter`` — ``--dynamic-sampling-filter-path``: keeps groups whose
  mean reward lies in the stage's band (RA §3.2: (0, 0.8]).
* ``infra.production.slime_hooks.fireflash_loss`` — ``--custom-loss-function-path`` for FireFlash.
* ``infra.production.slime_hooks.generate`` — ``--custom-generate-function-path`` slot for agent stages.

Stage settings reach the hooks through the ``--custom-config-path`` YAML that the renderer writes: slime
sets each top-level key as an attribute of ``args`` (keys ``rufus_*``). slime types are imported lazily
so the module imports (and is tested) without slime installed.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from infra.objectives import band_keep, group_advantages, shape_group
from rewards.contract import RewardRequest, get_reward, safe_score


def _status(name: str) -> Any:
    """Return ``Sample.Status.<name>`` from slime (imported lazily: slime exists only in the image)."""
    from slime.utils.types import Sample

    return getattr(Sample.Status, name)


def _reward_name(args: Any, sample: Any) -> str:
    """The reward name of ``sample``: ``metadata['reward']`` first, then the stage's ``rufus_reward``."""
    name = (sample.metadata or {}).get("reward") or getattr(args, "rufus_reward", None)
    if not name:
        raise ValueError(
            "no reward name: set metadata['reward'] in the prompt rows "
            "or rufus_reward in --custom-config-path"
        )
    return str(name)


def _request(sample: Any) -> RewardRequest:
    """Build the reward request of one slime sample (prompt messages, response text, label, metadata)."""
    prompt = (
        sample.prompt
        if isinstance(sample.prompt, list)
        else [{"role": "user", "content": str(sample.prompt)}]
    )
    metadata = dict(sample.metadata or {})
    return RewardRequest(
        prompt=prompt,
        response=sample.response or "",
        label=sample.label,
        metadata=metadata,
        transcript=metadata.get("transcript"),
    )


def score_sample(args: Any, sample: Any) -> float | None:
    """Score one sample with the shared contract; mark it ABORTED and return None on an infra failure."""
    result = safe_score(get_reward(_reward_name(args, sample)), _request(sample))
    sample.metadata = dict(sample.metadata or {})
    sample.metadata["reward_components"] = dict(result.components)
    sample.metadata["reward_failure"] = result.failure
    if result.aborted:
        sample.status = _status("ABORTED")
        return None
    return float(result.score)


async def reward(args: Any, sample: Any, **kwargs: Any) -> float | None | list[float | None]:
    """slime ``--custom-rm-path`` hook: one sample (or a list when a generate function fans out).

    Verifiers may block (sandboxes, math-verify), so each runs in a worker thread; the event loop that
    drives generation keeps going meanwhile.
    """
    if isinstance(sample, list):
        return list(await asyncio.gather(*(asyncio.to_thread(score_sample, args, s) for s in sample)))
    return await asyncio.to_thread(score_sample, args, sample)


def _is_aborted(sample: Any) -> bool:
    status = getattr(sample.status, "name", str(sample.status)).upper()
    return status == "ABORTED" or sample.reward is None


def _is_truncated(sample: Any) -> bool:
    return getattr(sample.status, "name", str(sample.status)).upper() == "TRUNCATED"


def _reward_value(args: Any, sample: Any) -> float:
    value = sample.get_reward_value(args) if hasattr(sample, "get_reward_value") else sample.reward
    return float(value)


def _shaping_kwargs(
    kind: str, args: Any, samples: list[Any], rewards: list[float], coef: float, params: dict[str, float]
) -> dict[str, Any]:
    """Keyword arguments of ``shape_group(kind, ...)`` gathered from the kept samples of one group."""
    lengths = [int(s.response_length) for s in samples]
    max_len = int(getattr(args, "rollout_max_response_len", 0) or max(lengths + [1]))
    per_kind = {
        "none": lambda: {},
        "shortest_correct_length": lambda: {
            "lengths": lengths,
            "correct": [r > 0 for r in rewards],
            "max_len": max_len,
            "coef": coef,
        },
        "positive_length": lambda: {"lengths": lengths, "max_len": max_len, "coef": coef},
        "ultramarine": lambda: {
            "output_tokens": [sum(s.loss_mask) if s.loss_mask else s.response_length for s in samples],
            "turns": [int((s.metadata or {}).get("turns", 1)) for s in samples],
            "invalid_tool_calls": [int((s.metadata or {}).get("invalid_tool_calls", 0)) for s in samples],
            "params": params,
        },
    }
    if kind not in per_kind:
        raise ValueError(f"unknown shaping kind {kind!r}; expected one of {sorted(per_kind)}")
    return per_kind[kind]()


def _advantage_kwargs(kind: str, samples: list[Any], rewards: list[float]) -> dict[str, Any]:
    if kind != "fireflash":
        return {}
    solved = [bool((s.metadata or {}).get("solved", r >= 1.0)) for s, r in zip(samples, rewards, strict=True)]
    return {"solved": solved, "num_tokens": [int(s.response_length) for s in samples]}


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
            shaped = shape_group(kind, raw, **_shaping_kwargs(kind, args, kept, raw, coef, params))
            adv = group_advantages(adv_kind, shaped, **_advantage_kwargs(adv_kind, kept, raw))
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


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """slime ``--custom-generate-function-path`` slot: delegate to the agent rollout named in the config.

    Agent stages set ``rufus_generate`` (a dotted path into ``infra.agents``) in the hook YAML; this keeps
    one stable path on the command line while the agent implementation lives with the agent code.
    """
    target = getattr(args, "rufus_generate", None)
    if not target:
        raise ValueError(
            "rufus_generate is not set in --custom-config-path; no agent generate function to call"
        )
    module, _, attr = str(target).rpartition(".")
    fn = getattr(importlib.import_module(module), attr)
    return await fn(args, sample, sampling_params, evaluation=evaluation)


def fireflash_loss(args: Any, batch: dict[str, Any], logits: Any, sum_of_sample_mean: Any) -> Any:
    """slime ``--custom-loss-function-path`` hook for FireFlash (see ``infra.production.fireflash_loss``)."""
    from infra.production.fireflash_loss import fireflash_loss as _loss

    return _loss(args, batch, logits, sum_of_sample_mean)
