"""Data prep shared by the coding-agent stage folders (05 and its FireFlash variant): Harbor tasks as rows.

Both ``stages/05_coding_agent/data_prep.py`` and ``stages/05_coding_agent_fireflash/data_prep.py`` call
:func:`prepare_harbor_stage`; they differ in the learnability rule (:class:`Learnability`: the paper's
§3.6 "drop never-passed and always-passed", or FireFlash's pass-rate band [15%, 85%] from at least four
scored episodes) and in the task-validation gates FireFlash runs on the kept tasks. Steps, each counted
in ``manifest.json``: held-out sets → sources (hub revisions pinned in production) → ``loaded`` →
``structural`` → held-out screens → [gates] → learnability → ``templates.json`` for the plan's
``sandbox_templates`` step (:func:`production_steps`).
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data_prep import agent_filters, harbor_sources
from data_prep.harbor_sources import HarborSource, TemplateResources
from data_prep.io import atomic_write_text, sha256_file
from data_prep.manifest import Manifest
from data_prep.rl_stage import benchmark_items, prepare_prompts, screen_against_evals, tiny_agent_rows
from data_prep.schema import PromptRow
from infra.agents.contract import AgentTask
from infra.agents.harbor.task import HarborTask
from infra.environments.agent import AgentOptions, task_row
from infra.layering import ConfigError

REWARD = "harbor_tests"
FAMILY = "coding_agent"
TEMPLATES = "templates.json"


class Learnability(BaseModel):
    """Which tasks the initial policy's episodes keep (``data.learnability``)."""

    model_config = ConfigDict(extra="forbid")
    rule: Literal["never_or_always", "band"] = Field(
        "never_or_always",
        description="never_or_always: RA §3.6 (drop never/always passed); band: FireFlash's pass-rate band.",
    )
    band: tuple[float, float] = Field((0.15, 0.85), description="band: kept pass rates, inclusive (FF).")
    min_scored: int = Field(4, ge=1, description="band: scored episodes a task needs (FF: at least 4).")


class Params(BaseModel):
    """The ``data`` section of a coding-agent stage's launch.yaml (05 and its FireFlash variant)."""

    model_config = ConfigDict(extra="forbid")
    sources: list[HarborSource] = Field(
        default_factory=list, description="Task sources (data_prep.harbor_sources.SOURCES names)."
    )
    tasks_dir: str = Field("tasks", description="Runnable tasks, below the stage's data folder (env tasks=).")
    download_dir: str = Field("sources", description="Fetched and converted sources, below the data folder.")
    train_tasks: int | None = Field(None, ge=1, description="Embedded: generated train tasks to draw.")
    filter_samples: int = Field(8, ge=0, description="Policy episodes per task (0: skip learnability).")
    policy: agent_filters.AgentEndpoint | None = Field(None, description="Production: the initial policy.")
    template: TemplateResources = Field(
        default_factory=TemplateResources, description="Template resources for tasks that set none."
    )
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    heldout_per_metric: int = Field(200, ge=1)
    learnability: Learnability = Field(default_factory=Learnability, description="The pass-rate rule.")


def prepare_harbor_stage(ctx: Any, stage_file: str | Path) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl, templates.json and manifest.json into ``ctx.out_dir``.

    ``stage_file`` is the calling stage's ``data_prep.py`` (its hash enters the data key).
    """
    code = [Path(stage_file), Path(__file__), Path(harbor_sources.__file__), Path(agent_filters.__file__)]
    env_spec = str(ctx.stage.config.rl.environment.options.get("env", ""))
    production = partial(_production_rows, ctx=ctx, env_spec=env_spec)
    return prepare_prompts(ctx, f"rl_prompts:{ctx.stage.id}", Params, code, _embedded_rows, production)


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest
) -> list[PromptRow]:
    from data_prep.tiny_tasks import harbor as tiny

    root = str(tiny.tiny_tasks_root())
    source = {"name": "data_prep.tiny_tasks.harbor", "license": "generated", "tasks": root,
              "note": "Harbor-format terminal tasks generated offline (no hub at this scale)"}  # fmt: skip
    rows = tiny_agent_rows(tiny.FAMILY, params.train_tasks, seed, heldout, manifest, source)
    rows = [r for r in rows if tiny.rl_only(r.id)]
    manifest.step("rl_split", len(rows), rule="train tasks SFT never demonstrates (harbor.rl_only)")
    manifest.step(
        "learnability", len(rows), skipped=True,
        reason="filter_samples is 0: the embedded budget goes to training; DAPO's nonzero-std filter drops "
        "all-pass and all-fail groups online",
    )  # fmt: skip
    return rows


def _env_tasks_root(env_spec: str) -> str:
    named = dict(item.split("=", 1) for item in env_spec.partition(":")[2].split(",") if "=" in item)
    return named.get("tasks", "")


def environment_tasks(env_spec: str, tasks: list[HarborTask]) -> list[AgentTask]:
    """Return the ``harbor`` environment's agent task of each Harbor task, in order."""
    from infra.agents.envs.base import load_environment
    from infra.agents.harbor.env import HarborEnv

    env = load_environment(env_spec)
    if not isinstance(env, HarborEnv):
        raise ConfigError(f"rl.environment.options.env {env_spec!r} is not a harbor environment")
    return [env.task_of(t) for t in tasks]


def runtime_coverage(tasks: list[HarborTask]) -> dict[str, Any]:
    """How many kept tasks the local (bubblewrap) runtime can run; the rest need an image backend."""
    from infra.agents.harbor.local_runtime import local_problems

    reasons = Counter(p.split(" (")[0] for t in tasks for p in local_problems(t)[:1])
    local = sum(1 for t in tasks if not local_problems(t))
    return {"local_runtime": local, "needs_image_backend": len(tasks) - local, "why": dict(reasons)}


def _production_rows(
    params: Params, heldout: dict[str, Path], manifest: Manifest, ctx: Any, env_spec: str
) -> list[PromptRow]:
    out = Path(ctx.out_dir)
    dest = out / params.tasks_dir
    for i, source in enumerate(params.sources):  # refuse before fetching anything
        harbor_sources.check_pinned(source, ctx.profile, f"data.sources[{i}]")
    root = _env_tasks_root(env_spec)
    if Path(root).resolve() != dest.resolve():
        raise ConfigError(
            f"rl.environment.options.env: tasks={root!r} is not the prepared task folder {dest} "
            "(data.tasks_dir below the stage's data folder)"
        )
    kept = harbor_sources.collect(
        params.sources, out / params.download_dir, dest, manifest, profile=ctx.profile
    )
    manifest.set("runtime", runtime_coverage(kept))
    options = AgentOptions(env=env_spec)
    seed = int(ctx.seed)
    tasks = environment_tasks(env_spec, kept)
    rows = [
        task_row(t, options, reward=REWARD, family=FAMILY, source=h.name.split("__", 1)[0])
        for t, h in zip(tasks, kept, strict=True)
    ]
    rows = screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)
    if params.policy is None or not params.filter_samples:
        manifest.step("learnability", len(rows), skipped=True, reason="no policy endpoint configured")
    else:
        policy = agent_filters.EndpointRunner(params.policy, env_spec, seed=seed)
        by_id = {t.id: t for t in tasks}
        rule = params.learnability
        rows = learnability(rows, [by_id[r.id] for r in rows], policy, params.filter_samples, manifest, rule)
    harbor_of = {t.id: h for t, h in zip(tasks, kept, strict=True)}
    specs = harbor_sources.template_specs([harbor_of[r.id] for r in rows], params.template)
    atomic_write_text(out / TEMPLATES, json.dumps(specs, indent=1) + "\n")
    manifest.add_output(out / TEMPLATES, sha256_file(out / TEMPLATES))
    return rows


def learnability(
    rows: list[PromptRow],
    tasks: list[AgentTask],
    policy: Any,
    samples: int,
    manifest: Manifest,
    rule: Learnability | None = None,
) -> list[PromptRow]:
    """Keep the tasks ``rule`` accepts after ``samples`` episodes of the initial policy each (no teacher).

    RA §3.6: drop a task it never or always passes. FireFlash: keep pass rates inside ``rule.band`` from at
    least ``rule.min_scored`` scored episodes.
    """
    rule = rule or Learnability()
    if rule.rule == "band":
        if samples < rule.min_scored:
            raise ConfigError(
                f"data.filter_samples={samples} is below data.learnability.min_scored={rule.min_scored}"
            )
        report = agent_filters.filter_band(tasks, policy, samples, rule.band, rule.min_scored)
        agent_filters.record(report, manifest, "learnability", samples=samples, band=list(rule.band))
    else:
        report = agent_filters.filter_tasks(tasks, policy, samples)
        agent_filters.record(report, manifest, "learnability", samples=samples)
    keep = {t.id for t in report.kept}
    return [r for r in rows if r.id in keep]


def production_steps(stage_id: str, config: Any, cluster: Any) -> list[tuple[str, list[str], str]]:
    """The plan's step before training: bake one sandbox template per kept task (E2B CLI, self-hosted)."""
    spec = str(cluster.stage_data(stage_id) / TEMPLATES)
    argv = ["python3", "-m", "data_prep.harbor_sources", "build-templates", "--spec", spec]
    return [("sandbox_templates", argv, "a host with Docker and the E2B CLI (E2B_DOMAIN, E2B_API_KEY)")]
