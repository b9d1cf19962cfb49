"""Held-out evaluation through the environments: roll out, score through the reward contract, average.

:func:`score_heldout` is the reusable piece (the ``eval`` package calls it on any HF folder);
:func:`evaluate_stage` scores every target and guardrail metric of a stage from
``data/heldout/<metric>.jsonl``, each file in the environment its rows name (the stage's own for its
targets, single-turn for rows that name none). Scores are pass@1 / avg@k: the mean over prompts of the
mean reward over ``samples_per_prompt`` episodes. Aborted episodes (infrastructure failures) are left
out, never scored 0. Rows that name an environment type (``metadata.env_type``, e.g. stage 08's three
workspace tasks) are also scored per type; :func:`evaluate_stage` writes each checkpoint's scores and
details to ``logs/eval_details_<input|output>.json``.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from data_prep.schema import PromptRow
from infra.agents.tool_usage import usage_block
from infra.atomic import atomic_write_json
from infra.backends import StageJob
from infra.embedded.models import load_dtype, load_model, load_tokenizer, pick_device
from infra.embedded.runtime import derive_seed, read_rows, setup_determinism
from infra.environments import (
    SINGLE_TURN,
    Environment,
    Group,
    Policy,
    Sampling,
    build_environment,
    row_environment_spec,
)

_log = logging.getLogger(__name__)
DEFAULT_EVAL_TOKENS = 256
BREAKDOWN_KEY = "env_type"  # the row metadata a score is also broken down by, where rows carry it


def row_type(row: Any) -> str | None:
    """The row's ``metadata.env_type`` (what scores are broken down by), or None."""
    kind = (getattr(row, "metadata", None) or {}).get(BREAKDOWN_KEY)
    return None if kind is None else str(kind)


def score_rows(
    model: Any,
    tokenizer: Any,
    rows: list[PromptRow],
    reward_name: str,
    *,
    samples_per_prompt: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = DEFAULT_EVAL_TOKENS,
    seed: int = 0,
    batch_size: int | None = 64,
    environment: Environment | None = None,
    drop_finished: bool = False,
    eager_decode: bool = False,
) -> tuple[float, dict[str, Any]]:
    """Return (avg@k score, details) of ``model`` on ``rows`` rolled out in ``environment``.

    The environment defaults to ``single_turn``; a row's ``metadata.reward`` wins over ``reward_name``;
    ``details`` as :func:`aggregate_groups` gives them.
    """
    if not rows:
        raise ValueError("score_rows: no held-out rows to score")
    env = environment or build_environment(SINGLE_TURN, reward=reward_name)
    sampling = Sampling(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        batch_size=batch_size,
        drop_finished=drop_finished,
        eager_decode=eager_decode,
    )
    groups = env.rollout(Policy(model, tokenizer), rows, samples_per_prompt, sampling)
    return aggregate_groups(groups)


def aggregate_groups(groups: list[Group]) -> tuple[float, dict[str, Any]]:
    """Return (avg@k, details) over scored groups: the mean over prompts of each prompt's mean reward.

    Aborted episodes are counted (``aborted``, and by failure in ``aborted_by``) and left out; a prompt whose
    episodes all aborted is left out (``prompts`` counts the scored ones). ``details`` holds ``by_env_type``
    ({type: {score, prompts, truncated}}) when rows carry ``metadata.env_type``, and ``tool_usage`` for agent
    episodes: RA Table 19's means per scored trajectory (:func:`infra.agents.tool_usage.usage_block`), an
    episode with the full reward counting as correct.
    """
    per_prompt, aborted, truncated, usage = [], 0, 0, []
    aborted_by: Counter[str] = Counter()
    by_type: dict[str, list[float]] = defaultdict(list)
    cut_by_type: Counter[str] = Counter()
    for group in groups:
        scores = []
        kind = row_type(group.row)
        for episode in group.samples:
            truncated += episode.truncated
            if kind is not None:
                cut_by_type[kind] += episode.truncated
            if episode.reward.aborted:
                aborted += 1
                aborted_by[episode.reward.failure or "unknown"] += 1
            else:
                scores.append(episode.reward.score)
                if "tool_iters" in episode.metrics:
                    m = episode.metrics
                    usage.append((episode.reward.score >= 1.0, m["tool_iters"], m["tool_calls_by_name"]))
        if scores:
            per_prompt.append(float(np.mean(scores)))
            if kind is not None:
                by_type[kind].append(per_prompt[-1])
    details: dict[str, Any] = {
        "prompts": float(len(per_prompt)),
        "aborted": float(aborted),
        "truncated": float(truncated),
    }
    if aborted_by:
        details["aborted_by"] = dict(sorted(aborted_by.items()))
    if by_type:
        details[f"by_{BREAKDOWN_KEY}"] = {
            k: {"score": float(np.mean(v)), "prompts": len(v), "truncated": cut_by_type[k]}
            for k, v in sorted(by_type.items())
        }
    if usage:
        details["tool_usage"] = usage_block(usage)
    return (float(np.mean(per_prompt)) if per_prompt else 0.0), details


def row_environment(row: PromptRow, stage_env: Environment | None, reward: str) -> Environment:
    """The environment a held-out row is rolled out in: the stage's when the row names it, else the row's own.

    Rows written by an environment's data prep carry ``metadata.environment`` (and its options); rows
    without one are single-turn. The stage's environment plays only rows it serves
    (:meth:`~infra.environments.base.Environment.serves`): a search stage's terminal guardrail runs in the
    terminal environment, not in the search world, where every episode would abort.
    """
    if stage_env is not None and stage_env.serves(row.metadata):
        return stage_env
    name, options = row_environment_spec(row.metadata)
    return build_environment(name, options, reward=reward)


def score_heldout(
    model_dir: Path,
    rows: list[PromptRow] | list[dict],
    reward_name: str,
    *,
    samples_per_prompt: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = DEFAULT_EVAL_TOKENS,
    seed: int = 0,
    device: str | None = None,
) -> float:
    """Return the avg@k reward of the HF model at ``model_dir`` on held-out ``rows``."""
    parsed = [r if isinstance(r, PromptRow) else PromptRow.model_validate(r) for r in rows]
    setup_determinism(seed)
    model = load_model(model_dir, pick_device(device)).eval()
    tokenizer = load_tokenizer(model_dir)
    score, _ = score_rows(
        model,
        tokenizer,
        parsed,
        reward_name,
        samples_per_prompt=samples_per_prompt,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    return score


def eval_budget(job: StageJob) -> int:
    """Return the eval response budget: ``eval.max_response_tokens``, else the RL budget, else 256."""
    cfg = job.stage.config
    if cfg.eval.max_response_tokens:
        return cfg.eval.max_response_tokens
    if cfg.rl is not None:
        return cfg.rl.rollout.max_response_tokens
    return DEFAULT_EVAL_TOKENS


def evaluate_stage(job: StageJob, checkpoint: Path) -> dict[str, float]:
    """Return ``{metric: score}`` for every target and guardrail of the stage, on ``checkpoint``.

    A metric whose every episode aborted (an infrastructure failure) is left out, not scored 0: reports
    show it as not measured, and ``logs/eval_details_<role>.json`` keeps its abort counts.
    """
    cfg = job.stage.config
    job.stage.module("reward")  # registers the stage's rewards
    metrics = list(dict.fromkeys(cfg.eval.targets + cfg.eval.guardrails))
    missing = [m for m in metrics if not (job.heldout_dir / f"{m}.jsonl").is_file()]
    # one environment per metric file: the first row decides (a file is written by one environment)
    if missing:
        raise FileNotFoundError(
            f"{job.heldout_dir}: no held-out file for {missing} (expected <metric>.jsonl)"
        )
    setup_determinism(job.seed, job.extra.get("threads"))
    dtype = load_dtype(cfg.eval.sampler_dtype)
    model = load_model(checkpoint, pick_device(job.extra.get("device")), dtype=dtype).eval()
    tokenizer = load_tokenizer(checkpoint)
    stage_env = job.stage.environment() if cfg.rl is not None else None
    out, details = {}, {}
    for metric in metrics:
        rows = read_rows(job.heldout_dir / f"{metric}.jsonl", PromptRow)
        env = row_environment(rows[0], stage_env, cfg.reward) if rows else stage_env
        out[metric], details[metric] = score_rows(
            model,
            tokenizer,
            rows,
            cfg.reward,
            samples_per_prompt=cfg.eval.samples_per_prompt,
            temperature=cfg.eval.temperature,
            max_new_tokens=eval_budget(job),
            seed=derive_seed(job.seed, zlib.crc32(metric.encode())),
            environment=env,
            drop_finished=cfg.eval.drop_finished_rows,
            eager_decode=cfg.eval.eager_decode,
        )
        if not details[metric]["prompts"]:
            del out[metric]
            why = ", ".join(f"{k} {v}" for k, v in details[metric].get("aborted_by", {}).items())
            where = job.heldout_dir / f"{metric}.jsonl"
            _log.warning("%s: every episode aborted (%s); not scored", where, why)
    role = "output" if checkpoint.resolve() == job.export_dir.resolve() else "input"
    atomic_write_json(
        job.logs_dir / f"eval_details_{role}.json",
        {"checkpoint": str(checkpoint), "metrics": out, "details": details},
    )
    return out
