"""Data prep of Knowledge-work RL (UM): synthesized tasks as rows of the ``agent`` environment running ``kw``.

Production, each step counted in ``manifest.json`` (:func:`data_prep.kw_synthesis.synthesise`): held-out
sets → instances (an environment type's generator samples a taxonomy spec and builds workspace files, a
SQLite system of record and the private ground truth) → generator-authored tasks → teacher proposals
(``data.synthesis.teacher``: instruction, deliverables and a weighted rubric grounded in the ground truth;
skipped without a teacher) → ``kw_leakage`` (answers, looked-up values or rubric wording reachable by
the agent) → ``kw_hacking`` (degenerate deliverables — nothing, empty files, the instruction copied, every
number dumped, the rubric's words — graded by the reward's code criteria must stay at or below
``max_degenerate_score``) → ``kw_curriculum`` (the base policy's mean score over
``synthesis.curriculum.samples`` episodes must fall in the band; episodes from an SGLang ``/generate``
server, ``data.base_policy``; skipped without one) → the task folders in ``data.tasks_dir`` (the folder
the ``kw:tasks=...`` environment reads) → exact overlap with the held-out prompts and the 8-gram screen
against the stage's benchmark files.

Embedded: the ``knowledge_work`` tiny family (:mod:`infra.agents.kw.family`: three generated environment
types, code-checkable rubrics, the fixed ``kw_tiny`` task set) → the held-out screens → the same leakage
and hacking filters over the drawn tasks, counted → the RL third (tasks SFT never demonstrates) → with
``data.embedded_curriculum`` the same curriculum band, its episodes sampled in-process from the input
checkpoint as the stage's rollouts sample (``rl.rollout``; :meth:`CheckpointRunner.from_rollout`); off, the
step is recorded as skipped (the micro model solves no task, so the band would drop them all; SmolLM2 solves
most tracker and memo tasks, see the README).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep import agent_filters, kw_filters
from data_prep.kw_synthesis import CODE_FILES, KwSynthesisParams, KwTask, synthesise, write_task
from data_prep.manifest import Manifest
from data_prep.rl_stage import benchmark_items, prepare_prompts, screen_against_evals, tiny_agent_rows
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import register_family, register_metric
from infra.agents.kw import family
from infra.layering import ConfigError

REWARD = family.REWARD
FAMILY = family.FAMILY

register_family(FAMILY, family.generate)
register_metric(
    family.METRIC,
    FAMILY,
    "Weighted-rubric score (%) of held-out tiny knowledge-work tasks (kw_tiny: ledger reconciliation, "
    "contract memo, ticket tracker), graded on the deliverables by code criteria.",
)


class Params(BaseModel):
    """The ``data`` section of 08_knowledge_work_rl/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    synthesis: KwSynthesisParams = Field(
        default_factory=KwSynthesisParams, description="Production synthesis."
    )
    tasks_dir: str = Field("tasks", description="Task folders below the stage's data folder (env tasks=).")
    base_policy: agent_filters.AgentEndpoint | None = Field(
        None, description="Production: the input checkpoint served by SGLang, for the curriculum band."
    )
    train_tasks: int | None = Field(None, ge=1, description="Embedded: tiny train tasks to draw.")
    embedded_curriculum: bool = Field(
        False,
        description="Embedded: score the RL tasks with the input checkpoint in-process and keep "
        "synthesis.curriculum's band (samples x tasks episodes before training).",
    )
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    heldout_per_metric: int = Field(200, ge=1)


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl, the task folders and manifest.json into ``ctx.out_dir``."""
    code = [Path(__file__), Path(family.__file__), *CODE_FILES]
    env_spec = str(ctx.stage.config.rl.environment.options.get("env", ""))
    production = partial(_production_rows, ctx=ctx, env_spec=env_spec)
    embedded = partial(_embedded_rows, ctx=ctx)
    return prepare_prompts(ctx, f"rl_prompts:{ctx.stage.id}", Params, code, embedded, production)


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest, ctx: Any
) -> list[PromptRow]:
    from data_prep.tiny_tasks.knowledge_work import kw_tasks
    from data_prep.tiny_tasks.knowledge_work_sft import rl_only

    source = {
        "name": "infra.agents.kw.family",
        "license": "generated",
        "tasks": str(family.tiny_release()),
        "note": "knowledge-work tasks generated offline (data_prep.tiny_tasks.knowledge_work)",
    }
    rows = tiny_agent_rows(FAMILY, params.train_tasks, seed, heldout, manifest, source)
    drawn = {r.metadata.get("task") for r in rows}
    tasks = [t for t in kw_tasks(family.TRAIN, family.ROOT_SEED, "train") if t.name in drawn]
    kept = {t.name for t in screen_tasks(tasks, KwSynthesisParams(), manifest)}
    rows = [r for r in rows if r.metadata.get("task") in kept]
    manifest.step("kw_filtered_rows", len(rows), rule="rows whose task passed kw_leakage and kw_hacking")
    rows = [r for r in rows if rl_only(str(r.metadata.get("task")))]
    manifest.step("rl_split", len(rows), rule="tasks SFT never demonstrates (knowledge_work_sft.rl_only)")
    if not params.embedded_curriculum:
        why = "data.embedded_curriculum is off (the input checkpoint's episodes are not sampled before RL)"
        manifest.step("kw_curriculum", len(rows), skipped=True, reason=why)
        return rows
    from infra.environments.agent import AgentOptions

    rl = ctx.stage.config.rl
    options = AgentOptions.model_validate(rl.environment.options)  # the stage's env and its defaults
    runner = agent_filters.CheckpointRunner.from_rollout(
        Path(ctx.tokenizer_dir), options.env, rl.rollout, seed=seed, concurrency=options.concurrency
    )
    return curriculum_rows(rows, runner, params.synthesis.curriculum, manifest)


def curriculum_rows(
    rows: Sequence[PromptRow], runner: Any, band: kw_filters.CurriculumParams, manifest: Manifest
) -> list[PromptRow]:
    """Keep the rows whose task's mean score over ``band.samples`` episodes of ``runner`` (``runner(tasks,
    n)``, one batch for every distinct task, as :class:`~data_prep.agent_filters.CheckpointRunner`) lies in
    the band; aborted episodes are not scored. Records ``kw_curriculum`` with each task's mean and the drop
    reasons."""
    from infra.agents.slime_generate import task_from_parts

    first: dict[str, PromptRow] = {}
    for row in rows:
        first.setdefault(str(row.metadata["task"]), row)
    agent_tasks = [task_from_parts(r.prompt, r.label, r.metadata, r.id) for r in first.values()]
    results = runner(agent_tasks, band.samples) if agent_tasks else []
    scores = {
        name: [None if r.aborted else float(r.score) for r in group]
        for name, group in zip(first, results, strict=True)
    }
    named = [SimpleNamespace(name=name) for name in first]
    band_result = kw_filters.curriculum_filter(named, lambda task, _k: scores[task.name], band)
    in_band = {t.name for t in band_result.kept}
    kept = [r for r in rows if str(r.metadata["task"]) in in_band]
    manifest.step("kw_curriculum", len(kept), **band_result.manifest_fields())
    return kept


def screen_tasks(tasks: Sequence[KwTask], params: KwSynthesisParams, manifest: Manifest) -> list[KwTask]:
    """The leakage and reward-hacking filters of ``params`` over ``tasks``, each step counted."""
    leak = kw_filters.leakage_filter(tasks, params.leakage)
    manifest.step("kw_leakage", len(leak.kept), **leak.manifest_fields())
    hack = kw_filters.hacking_filter(leak.kept, params=params.hacking)
    manifest.step("kw_hacking", len(hack.kept), **hack.manifest_fields())
    return list(hack.kept)


def _env_option(env_spec: str, key: str) -> str:
    named = dict(item.split("=", 1) for item in env_spec.partition(":")[2].split(",") if "=" in item)
    return named.get(key, "")


def base_policy_scorer(endpoint: agent_filters.AgentEndpoint, env_spec: str, seed: int) -> Any:
    """``scorer(task, k)`` for the curriculum band: ``k`` episodes of the served input checkpoint on the task,
    in the stage's environment options, each written to its own scratch release; aborted episodes are None."""
    options = ",".join(i for i in env_spec.partition(":")[2].split(",") if i and not i.startswith("tasks="))

    def scorer(task: KwTask, k: int) -> list[float | None]:
        with tempfile.TemporaryDirectory(prefix="rufus-kw-curriculum-") as tmp:
            write_task(Path(tmp) / task.name, task)
            spec = f"kw:tasks={tmp}" + (f",{options}" if options else "")
            from infra.agents.envs.base import load_environment

            env = load_environment(spec)
            agent_task = env.task_of(env.catalog.task(task.name))
            results = agent_filters.EndpointRunner(endpoint, spec, seed=seed)([agent_task], k)[0]
        return [None if r.aborted else float(r.score) for r in results]

    return scorer


def _production_rows(
    params: Params, heldout: dict[str, Path], manifest: Manifest, ctx: Any, env_spec: str
) -> list[PromptRow]:
    from infra.agents.envs.base import load_environment
    from infra.environments.agent import AgentOptions, task_row

    dest = Path(ctx.out_dir) / params.tasks_dir
    root = _env_option(env_spec, "tasks")
    if not env_spec.startswith("kw:") or Path(root).resolve() != dest.resolve():
        raise ConfigError(
            f"rl.environment.options.env {env_spec!r}: expected kw:tasks={dest} (data.tasks_dir below the "
            "stage's data folder)"
        )
    if dest.is_dir():  # this prep's own output folder: a rerun writes it anew
        shutil.rmtree(dest)
    scorer = base_policy_scorer(params.base_policy, env_spec, int(ctx.seed)) if params.base_policy else None
    tasks = synthesise(params.synthesis, int(ctx.seed), dest, manifest, base_scorer=scorer)
    env = load_environment(env_spec)
    options = AgentOptions(env=env_spec)
    runnable = [env.catalog.tasks[t.name] for t in tasks if t.name in env.catalog.tasks]
    rows = [task_row(env.task_of(spec), options, reward=REWARD, family=FAMILY) for spec in runnable]
    manifest.step("rows", len(rows), dropped_by_environment=env.catalog.counts["dropped"])
    return screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)


__all__ = ["FAMILY", "REWARD", "Params", "base_policy_scorer", "curriculum_rows", "prepare", "screen_tasks"]
