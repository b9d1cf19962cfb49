"""Data prep of General Agent RL (paper §3.5): AgentWorldModel tasks as rows of the ``agent`` environment.

Steps, each counted in ``manifest.json``: held-out sets → the release (production: AgentWorldModel-1K at
a pinned commit, ``data_prep.awm_source``; embedded: the generated tiny release of
``data_prep.tiny_tasks.awm``) → every task with a code verifier → exact overlap with the held-out
prompts and the 8-gram screen against them and the stage's benchmark files (the request is screened, not
the scenario's system turn) → embedded: the RL third of the train tasks, which SFT never demonstrates
(``rl_split``, ``data_prep.tiny_tasks.awm.rl_only``) → the teacher check (``correctness_teacher``:
embedded, the generator's gold actions replayed through the sandboxed server must pass the verifier) →
the policy filters (``correctness_difficulty``, ``data_prep.agent_filters``): drop a task neither the
teacher nor the initial policy ever passes in ``teacher_samples``/``filter_samples`` episodes, and one
the initial policy always passes. Production samples both from SGLang ``/generate`` servers
(``policy``, ``teacher``); without them the step is recorded as skipped. Each row carries its episode in
``metadata`` (scenario, task index, limits, environment), which the embedded agent loop and slime's
generate hook read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep import agent_filters
from data_prep.awm_source import AwmSource, check_pinned, prepare_release
from data_prep.manifest import Manifest
from data_prep.rl_stage import (
    benchmark_items,
    embedded_train_tasks,
    prepare_prompts,
    screen_against_evals,
    screen_against_heldout,
)
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import generate
from data_prep.tiny_tasks.awm import FAMILY, is_repeat, rl_only, tiny_release
from infra.environments.agent import AgentOptions, task_row
from infra.layering import ConfigError

REWARD = "awm_verifier"


class Params(BaseModel):
    """The ``data`` section of 04_general_agent/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    source: AwmSource = Field(default_factory=AwmSource, description="The AWM release (production).")
    release_dir: str = Field("awm_release", description="Release folder below the stage's data folder.")
    train_tasks: int | None = Field(None, ge=1, description="Embedded: generated train tasks to draw.")
    filter_samples: int = Field(8, ge=0, description="Policy episodes per task (0: skip the filters).")
    teacher_samples: int = Field(4, ge=1, description="Teacher episodes per task the policy never passed.")
    policy: agent_filters.AgentEndpoint | None = Field(None, description="Production: the initial policy.")
    teacher: agent_filters.AgentEndpoint | None = Field(None, description="Production: the teacher.")
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    heldout_per_metric: int = Field(200, ge=1)


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    kind, code = "rl_prompts:04_general_agent", [Path(__file__), Path(agent_filters.__file__)]
    env_spec = str(ctx.stage.config.rl.environment.options.get("env", ""))

    def embedded(params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
        return _embedded_rows(params, seed, heldout, manifest, ctx)

    def production(params: Params, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
        return _production_rows(params, heldout, manifest, ctx, env_spec)

    return prepare_prompts(ctx, kind, Params, code, embedded, production)


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest, ctx: Any
) -> list[PromptRow]:
    release = tiny_release()
    manifest.add_source(
        {"name": "data_prep.tiny_tasks.awm", "license": "generated", "release": str(release),
         "note": "AWM-format single-table scenarios generated offline (no hub at this scale)"}
    )  # fmt: skip
    drawn = generate(FAMILY, embedded_train_tasks(params.train_tasks), seed, "train")
    tasks = [t for t in drawn if not is_repeat(t.id)]
    manifest.step("generated", len(tasks))
    rows = screen_against_heldout([t.prompt_row() for t in tasks], heldout, manifest)
    rows = [r for r in rows if rl_only(r.id)]
    manifest.step("rl_split", len(rows), rule="train tasks SFT never demonstrates (awm.rl_only)")
    rows, gold = _teacher_check(rows, release, manifest)
    if params.filter_samples:
        rollout = ctx.stage.config.rl.rollout
        runner = agent_filters.CheckpointRunner(
            Path(ctx.tokenizer_dir), _env_of(rows), seed=seed, concurrency=8,
            max_new_tokens=rollout.max_response_tokens, dtype=rollout.sampler_dtype,
        )  # fmt: skip

        def teacher(tasks: list[Any], n: int) -> list[list[Any]]:  # the replays above, not played again
            return [gold[t.id] for t in tasks]

        # the gold replay is the teacher: a task the policy never passes stays when its gold actions pass
        rows = _policy_filters(rows, params, runner, teacher, manifest)
    else:
        manifest.step(
            "correctness_difficulty", len(rows), skipped=True,
            reason="filter_samples is 0: the embedded budget goes to training; DAPO's nonzero-std filter "
            "drops all-pass and all-fail groups online",
        )  # fmt: skip
    return rows


def _env_of(rows: list[PromptRow]) -> str:
    return str(rows[0].metadata["environment_options"]["env"]) if rows else "awm_tiny"


def _teacher_check(
    rows: list[PromptRow], release: Path, manifest: Manifest
) -> tuple[list[PromptRow], dict[str, list[Any]]]:
    """Keep rows whose gold actions, replayed in the sandbox, pass the task's verifier.

    Also return each task's replay result by task id (the policy filters' teacher).
    """
    tasks = [_task(r) for r in rows]
    results = agent_filters.GoldReplayRunner(release)(tasks, 1)
    kept = [r for r, res in zip(rows, results, strict=True) if res and res[0].passed and not res[0].aborted]
    manifest.step(
        "correctness_teacher", len(kept), rule="gold actions replayed in the sandbox pass the verifier",
        dropped=len(rows) - len(kept),
    )  # fmt: skip
    return kept, {t.id: res for t, res in zip(tasks, results, strict=True)}


def _task(row: PromptRow) -> Any:
    from infra.agents.slime_generate import task_from_parts

    return task_from_parts(row.prompt, row.label, row.metadata, row.id)


def _policy_filters(
    rows: list[PromptRow], params: Params, policy: Any, teacher: Any, manifest: Manifest
) -> list[PromptRow]:
    report = agent_filters.filter_tasks(
        [_task(r) for r in rows], policy, params.filter_samples, teacher=teacher,
        teacher_n=params.teacher_samples,
    )  # fmt: skip
    agent_filters.record(report, manifest, "correctness_difficulty", samples=params.filter_samples)
    keep = {t.id for t in report.kept}
    return [r for r in rows if str(r.metadata.get("task_id", r.id)) in keep]


def _production_rows(
    params: Params, heldout: dict[str, Path], manifest: Manifest, ctx: Any, env_spec: str
) -> list[PromptRow]:
    check_pinned(params.source, ctx.profile)
    release = prepare_release(
        params.source, Path(ctx.out_dir) / params.release_dir, profile=ctx.profile, manifest=manifest
    )
    named = dict(item.split("=", 1) for item in env_spec.partition(":")[2].split(",") if "=" in item)
    if Path(named.get("release", "")).resolve() != release.resolve():
        raise ConfigError(
            f"rl.environment.options.env: release={named.get('release')!r} is not the prepared release "
            f"{release} (data.release_dir below the stage's data folder)"
        )
    options = AgentOptions(env=env_spec)
    tasks = agent_filters.awm_tasks(env_spec)
    rows = [task_row(t, options, reward=REWARD, family=FAMILY, source=params.source.hub_id) for t in tasks]
    manifest.step("verified_tasks", len(rows))
    rows = screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)
    if params.policy is None or not params.filter_samples:
        why = "no policy endpoint configured"
        manifest.step("correctness_difficulty", len(rows), skipped=True, reason=why)
        return rows
    seed = int(ctx.seed)
    policy = agent_filters.EndpointRunner(params.policy, env_spec, seed=seed)
    teacher = agent_filters.EndpointRunner(params.teacher, env_spec, seed=seed) if params.teacher else None
    return _policy_filters(rows, params, policy, teacher, manifest)
