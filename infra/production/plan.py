"""The production runbook of a recipe: per stage, the commands to paste on an 8×H200 Ray cluster.

``rufus plan RECIPE`` calls :func:`render_plan` then :func:`format_plan` (``--format text|json``),
:func:`check_plan` for ``--check`` and :func:`execute_plan` for ``--execute``. Stages chain through
their HF exports: stage k trains from stage k-1's ``hf`` folder, the first from the recipe's base model.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from infra.config import BenchmarkRoles
from infra.layering import ConfigError
from infra.production import chain, launch
from infra.production.cluster import ClusterProfile
from infra.production.preflight import preflight_command
from infra.production.render import TrainArgs, num_phases, render_train_args
from infra.recipe import LoadedRecipe, load_recipe

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "rufus-air.yaml"
#: Base checkpoints the rendered GLM-4.5-Air model flags fit (hub ids or folders of that name).
PRODUCTION_BASES = ("GLM-4.5-Air-Base", "GLM-4.5-Air")
#: Disk of one torch_dist save of GLM-4.5-Air (106B): bf16 weights 0.21 TB + fp32 main params 0.42 TB +
#: Adam moments 0.85 TB; one HF snapshot (bf16) is 0.21 TB.
TORCH_DIST_TB, HF_SNAPSHOT_TB = 1.48, 0.21


@dataclass
class Step:
    """One command of the runbook: a name, where it runs and its argv (``${VAR}`` left to the shell)."""

    name: str
    argv: list[str]
    where: str = "head"
    background: bool = False


@dataclass
class StagePlan:
    """Everything one stage needs on the cluster."""

    stage: str
    kind: str
    nodes: int
    init_hf: str
    export_hf: str
    node_hours: float | None
    steps: list[Step]
    trains: list[TrainArgs]
    files: dict[str, str] = field(default_factory=dict)
    rayjobs: dict[str, str] = field(default_factory=dict)
    paper: tuple[str, str] = ("", "")
    disk_tb: float = 0.0


def sft_tokenize_command(data: PurePosixPath, split: str, init_hf: str) -> list[str]:
    """GLM ids + loss masks of ``<split>.jsonl`` under the input model's template (``sft_data``)."""
    return [
        "python3",
        "-m",
        "infra.production.sft_data",
        "--input",
        str(data / f"{split}.jsonl"),
        "--output",
        str(data / f"{split}.tokens.jsonl"),
        "--tokenizer",
        init_hf,
    ]


def sft_select_command(stage_id: str, config: Any, cluster: ClusterProfile, selection: str) -> list[str]:
    """The held-out plateau pick over the run's --save-hf snapshots (infra.production.sft_select)."""
    return [
        "python3",
        "-m",
        "infra.production.sft_select",
        "--snapshots",
        str(PurePosixPath(cluster.hf_snapshots(stage_id)).parent),
        "--heldout",
        str(cluster.stage_data(stage_id) / "heldout_sft.tokens.jsonl"),
        "--output",
        selection,
        "--patience",
        str(config.sft.plateau_patience),
    ]


def render_stage(
    stage_id: str,
    config: Any,
    init_hf: str,
    cluster: ClusterProfile,
    run_name: str,
    seed: int,
    stage_files: tuple[str, ...] = (),
    first: bool | None = None,
    setup: list[Step] | None = None,
) -> StagePlan:
    """Render one stage: preflight, data/FP8 preparation, one train job per phase, export and verification.

    ``first``: the input is the recipe's base checkpoint (see :func:`preflight_command`); ``setup``: the
    stage's own steps before training (:func:`stage_setup_steps`).
    """
    prod = config.production
    if config.eval.select_by != "last":
        raise ConfigError(
            f"{stage_id}: eval.select_by {config.eval.select_by!r} is the embedded trainer's checkpoint "
            "rule; the production runbook exports the last RL checkpoint (set it under `embedded.eval`)"
        )
    preflight = preflight_command(stage_id, init_hf, cluster, stage_files, first)
    steps: list[Step] = [Step("preflight", preflight), *(setup or [])]
    selecting = config.kind == "sft" and config.sft.select_by == "heldout_plateau"
    if config.kind == "sft":
        data = cluster.stage_data(stage_id)
        steps.append(Step("sft_tokenize", sft_tokenize_command(data, "train", init_hf)))
        if selecting:
            steps.append(Step("sft_tokenize_heldout", sft_tokenize_command(data, "heldout_sft", init_hf)))
    if config.kind == "rl" and prod.sglang.fp8:
        for i, argv in enumerate(chain.fp8_commands(stage_id, init_hf, cluster, prod.sglang.fp8_strategy)):
            steps.append(Step(f"fp8_convert_{i}", argv))
    if not cluster.native_hf_load:
        steps.append(
            Step(
                "hf_to_torch_dist",
                chain.hf_to_torch_dist_command(
                    init_hf, str(cluster.stage_ckpt(stage_id) / "input_torch_dist"), cluster
                ),
            )
        )
    steps.append(Step("ray_head", launch.ray_head(cluster), where="node 0"))
    if prod.nodes > 1:
        steps.append(Step("ray_worker", launch.ray_worker(cluster), where=f"nodes 1..{prod.nodes - 1}"))
    trains, files, rayjobs = [], {}, {}
    for phase in range(num_phases(config)):
        t = render_train_args(
            stage_id,
            config,
            cluster,
            init_hf,
            run_name=run_name,
            seed=seed,
            phase=phase,
            stage_files=stage_files,
        )
        if not cluster.native_hf_load:
            i = t.sections["CKPT_ARGS"].index("--ref-load")
            t.sections["CKPT_ARGS"][i + 1] = str(cluster.stage_ckpt(stage_id) / "input_torch_dist")
        trains.append(t)
        files.update(t.files)
        if phase:
            steps.append(Step(f"seed_phase{phase}", chain.seed_phase_command(cluster, stage_id, phase)))
        forward = tuple(prod.forward_env)
        submit = launch.job_submit(cluster, t.entry, t.argv, forward)
        steps.append(Step(f"train_phase{phase}", submit))
        name = f"{run_name}-{stage_id}-p{phase}".replace("_", "-").lower()
        # The RayJob's submitter runs the preflight first: a failing stage never reaches train.py.
        train = shlex.join(["python3", f"{cluster.slime_dir}/{t.entry}", *t.argv])
        entry = f"{shlex.join(preflight)} && {train}"
        rayjobs[name] = launch.rayjob_manifest(name, prod.nodes, cluster, entry, forward)
    selection = None
    if selecting:
        selection = str(cluster.stage_ckpt(stage_id) / "selection.json")
        argv = sft_select_command(stage_id, config, cluster, selection)
        steps.append(Step("select_checkpoint", argv, where="node 0 (all its GPUs)"))
    exports = chain.export_commands(stage_id, init_hf, cluster, num_phases(config) - 1, selection)
    for i, argv in enumerate(exports):
        steps.append(Step(["export_hf", "verify_handoff"][i], argv))
    steps += benchmark_eval_steps(config.eval.benchmarks, init_hf, cluster.hf_export(stage_id))
    return StagePlan(
        stage_id,
        config.kind,
        prod.nodes,
        init_hf,
        cluster.hf_export(stage_id),
        prod.node_hours,
        steps,
        trains,
        files,
        rayjobs,
        (config.paper.source, config.paper.section),
        checkpoint_disk_tb(config),
    )


def checkpoint_saves(config: Any) -> int:
    """How many times slime saves in the stage: every ``save_interval`` and each phase's last rollout.

    SFT counts optimizer steps (``lr_decay_iters``, its planned step count); RL counts rollouts per phase.
    """
    interval = config.production.save_interval
    if config.kind == "sft":
        steps = int(config.production.lr_decay_iters or 0)
        return steps // interval + (1 if steps % interval else 0)
    saves, start = 0, 0
    for rollout, _ in config.rl.phase_settings():
        end = start + int(rollout.num_rollouts)
        saves += sum(1 for r in range(start, end) if (r + 1) % interval == 0 or r == end - 1)
        start = end
    return saves


def checkpoint_disk_tb(config: Any) -> float:
    """Terabytes the stage's checkpoints take (torch_dist with optimizer state; SFT adds HF snapshots)."""
    each = TORCH_DIST_TB + (HF_SNAPSHOT_TB if config.kind == "sft" else 0.0)
    return round(checkpoint_saves(config) * each, 1)


def benchmark_eval_steps(benchmarks: BenchmarkRoles, init_hf: str, export_hf: str) -> list[Step]:
    """Serve and score the stage's input and output checkpoints on its paper benchmarks (Table 2 rows).

    The benchmarks are the stage's own ``eval.benchmarks`` (targets, then guardrails; names of
    ``eval.registry``); the commands come from ``eval.production`` (SGLang server in the background,
    lm-evaluation-harness or the benchmark's own scorer, then collection), run on one eval node after the
    export is verified.
    """
    from eval.production import render_eval_plan

    names = benchmarks.names()
    if not names:
        return []
    steps: list[Step] = []
    for which, ckpt in (("input", init_hf), ("output", export_hf)):
        for e in render_eval_plan(Path(ckpt), names):
            steps.append(Step(f"eval_{which}_{e.name}", e.argv, where="eval node", background=e.background))
        steps.append(Step(f"eval_{which}_stop_server", ["kill", "${EVAL_SERVER_PID}"], where="eval node"))
    return steps


def cluster_stage_files(stage: Any, cluster: ClusterProfile) -> tuple[str, ...]:
    """The stage's ``reward.py``/``env.py`` as the cluster sees them (the repository at ``repo_dir``).

    A stage folder outside this repository keeps its absolute path: it must exist there on the image.
    """
    from infra.recipe import REPO_ROOT

    out = []
    for path in stage.code_files():
        try:
            out.append(f"{cluster.repo_dir}/{path.resolve().relative_to(REPO_ROOT).as_posix()}")
        except ValueError:
            out.append(str(path.resolve()))
    return tuple(out)


def stage_setup_steps(stage: Any, cluster: ClusterProfile) -> list[Step]:
    """Steps a stage's ``data_prep.py`` runs before training (``production_steps(stage_id, config, cluster)``
    returning ``(name, argv, where)``), e.g. stage 05's sandbox template build; [] when it defines none."""
    hook = getattr(stage.module("data_prep"), "production_steps", None)
    steps = hook(stage.id, stage.config, cluster) if hook else []
    return [Step(name, list(argv), where) for name, argv, where in steps]


def check_base_model(loaded: LoadedRecipe) -> None:
    """Raise :class:`ConfigError` unless the recipe's base is GLM-4.5-Air (the flags assume it)."""
    model = loaded.recipe.base.model
    if PurePosixPath(model).name.lower() not in {b.lower() for b in PRODUCTION_BASES}:
        raise ConfigError(
            f"{loaded.path}: base.model {model!r} cannot run in production (the runbook renders GLM-4.5-Air "
            f"flags; use one of {', '.join(PRODUCTION_BASES)}, e.g. recipes/rufus-air.yaml)"
        )


def render_plan(loaded: LoadedRecipe, cluster: ClusterProfile | None = None) -> list[StagePlan]:
    """Render every stage of a loaded recipe, chained through HF exports (GLM-4.5-Air bases only)."""
    check_base_model(loaded)
    cluster = cluster or ClusterProfile()
    init = cluster.base_hf(loaded.recipe.base.model)
    plans = []
    for i, st in enumerate(loaded.stages):
        r = loaded.recipe
        files = cluster_stage_files(st, cluster)
        setup = stage_setup_steps(st, cluster)
        plans.append(render_stage(st.id, st.config, init, cluster, r.name, r.seed, files, i == 0, setup))
        init = plans[-1].export_hf
    return plans


_VAR = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def shell_quote(tok: str) -> str:
    """Quote one argv token for bash, leaving ``${VAR}`` references expandable."""
    if not _VAR.search(tok):
        return shlex.quote(tok)
    escaped = tok.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    escaped = re.sub(r"\$(?!\{[A-Za-z_])", r"\\$", escaped)
    return f'"{escaped}"'


def _argv_lines(argv: list[str]) -> list[str]:
    """Split an argv into display lines: the program up to its first flag, then one flag (+ values) each."""
    first = next((i for i, t in enumerate(argv) if t.startswith("--") and t != "--"), len(argv))
    lines = [" ".join(shell_quote(t) for t in argv[:first])]
    for tok in argv[first:]:
        if tok.startswith("-") and not lines[-1].endswith(" --") or len(lines) == 1:
            lines.append(shell_quote(tok))
        else:
            lines[-1] += " " + shell_quote(tok)
    return lines


def commands_sh(plan: StagePlan) -> str:
    """A bash script for one stage: hook files, then every step (``# where:`` says which node)."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Stage {plan.stage}: {plan.nodes} nodes × 8 H200",
        "set -euo pipefail",
        "",
    ]
    for path, text in plan.files.items():
        lines += [
            f"mkdir -p {shlex.quote(str(Path(path).parent))}",
            f"cat > {shlex.quote(path)} <<'EOF'",
            text.rstrip("\n"),
            "EOF",
            "",
        ]
    for step in plan.steps:
        lines.append(f"# {step.name} (where: {step.where})")
        head, *groups = _argv_lines(step.argv)
        command = " \\\n    ".join([head, *groups])
        lines.append(f"{command} &\nEVAL_SERVER_PID=$!" if step.background else command)
        lines.append("")
    return "\n".join(lines)


def format_plan(plans: list[StagePlan], fmt: str = "text") -> str:
    """The runbook as text (bash per stage) or JSON (``stage``, ``nodes``, ``commands`` argv lists, ...)."""
    if fmt == "json":
        return json.dumps(
            [
                {
                    "stage": p.stage,
                    "kind": p.kind,
                    "nodes": p.nodes,
                    "node_hours": p.node_hours,
                    "checkpoint_disk_tb": p.disk_tb,
                    "init_hf": p.init_hf,
                    "export_hf": p.export_hf,
                    "commands": [s.argv for s in p.steps],
                    "steps": [
                        {"name": s.name, "where": s.where, "background": s.background} for s in p.steps
                    ],
                    "files": p.files,
                }
                for p in plans
            ],
            indent=2,
        )
    if fmt != "text":
        raise ValueError(f"unknown plan format {fmt!r}; expected 'text' or 'json'")
    parts = []
    for p in plans:
        hours = f", {p.node_hours:g} node-hours (paper)" if p.node_hours else ""
        disk = f", checkpoints ≈ {p.disk_tb:g} TB"
        parts.append(f"### {p.stage} ({p.kind}, {p.nodes} nodes{hours}{disk})\n\n{commands_sh(p)}")
    return "\n".join(parts)


def check_plan(plans: list[StagePlan]) -> list[str]:
    """Problems of a rendered plan (empty = OK); see :mod:`infra.production.validate`."""
    from infra.production.validate import validate_plan

    return validate_plan(plans)


def execute_plan(plans: list[StagePlan], *, only_where: str = "head") -> None:
    """Run the plan for real from the head node: write hook files, run each head step, stop on failure.

    Worker steps (``ray start --address``) must run on the other nodes; this prints them instead.
    """
    for p in plans:
        for path, text in p.files.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        for step in p.steps:
            if step.where.startswith("nodes"):
                print(f"[{p.stage}] run on {step.where}: {shlex.join(step.argv)}")
                continue
            argv = [os.path.expandvars(t) for t in step.argv]
            print(f"[{p.stage}] {step.name}: {shlex.join(argv)}", flush=True)
            subprocess.run(argv, check=True)


def recipe_with_stage(stage_id: str) -> Path:
    """The production recipe whose stage list names ``stage_id``.

    ``recipes/rufus-air.yaml`` first, then the variant recipes (``recipes/rufus-air-*.yaml``, e.g. the
    FireFlash one that swaps in stage 05's variant).
    """
    import yaml

    for path in [DEFAULT_RECIPE, *sorted(DEFAULT_RECIPE.parent.glob("rufus-air-*.yaml"))]:
        stages = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages") or []
        names = [Path(s if isinstance(s, str) else s.get("stage", "")).name for s in stages]
        if stage_id in names:
            return path
    raise KeyError(f"no production recipe in {DEFAULT_RECIPE.parent} names stage {stage_id!r}")


def render_stage_command_text(
    stage_id: str, recipe: Path | None = None, cluster: ClusterProfile | None = None
) -> str:
    """The bash runbook of one stage (for the stage README), from ``recipe`` or the recipe that names it."""
    recipe = recipe or recipe_with_stage(stage_id)
    loaded = load_recipe(recipe, profile="production")
    for p in render_plan(loaded, cluster):
        if p.stage == stage_id:
            evals = [s for s in p.steps if s.name.startswith("eval_")]
            p.steps = [s for s in p.steps if not s.name.startswith("eval_")]
            text = commands_sh(p)
            if evals:
                text += (
                    f"# then {len(evals)} evaluation steps score the input and output checkpoints on the"
                    " stage's paper benchmarks\n# (SGLang server + lm-evaluation-harness or the benchmark's"
                    f" own scorer): `rufus plan {_shown(recipe)}` prints them.\n"
                )
            return text
    raise KeyError(f"no stage {stage_id!r} in {recipe}")


def _shown(recipe: Path) -> str:
    """``recipe`` relative to the repository when it is inside it."""
    try:
        return str(recipe.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(recipe)
