"""The ``rufus`` command line: run a recipe, plan it for a cluster, run one stage, inspect a run.

rufus run recipes/tiny.yaml                 # the whole recipe on the embedded (CPU) profile
rufus run recipes/tiny.yaml --only 01_reasoning_rl --set rl.rollout.num_rollouts=4
rufus plan recipes/rufus-air.yaml --check   # the production runbook, validated against slime's flags
rufus preflight stages/02_coding_rl --init-from CKPT --data DIR   # a stage's CPU checks before its GPU job
rufus stage stages/01_reasoning_rl train --init-from runs/tiny/00_sft/export
rufus status runs/tiny
rufus report runs/tiny
rufus report --production /mnt/rufus/eval_results [--compare DIR]   # Table 2 from production evals
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.layering import ConfigError
from infra.malloc_arenas import limit_malloc_arenas

_app = typer.Typer(
    help="Rufus-Air: a staged LLM post-training recipe, stage by stage, at production or embedded scale.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reward_app = typer.Typer(help="Score model outputs with the recipe's rewards.", no_args_is_help=True)
_app.add_typer(reward_app, name="reward")
console = Console()


# Commands that live beside their packages, imported only when invoked or listed: ``validate-tasks`` pulls
# in the agent stack (strands, transformers; ~1.5 s), which every other command would pay at start-up.
_SUBCOMMANDS = {  # command -> (the Typer group it joins, module, function)
    "decontam": (_app, "data_prep.cli", "decontam"),
    "rollout": (_app, "infra.agents.cli", "rollout"),
    "validate-tasks": (_app, "infra.agents.harbor.validate_tasks", "validate_tasks"),
    "code": (reward_app, "rewards.code_cli", "score_pairs_cli"),
}
_mounted: set[str] = set()


def _builtin_names() -> set[str]:
    """The names of the commands defined in this module (Typer's: the function's, dashed)."""
    return {c.name or c.callback.__name__.replace("_", "-") for c in _app.registered_commands if c.callback}


def _mount_subcommands(argv: list[str] | None = None) -> None:
    """Attach the package-side commands: all of them, or with ``argv`` only the one it invokes (none when
    it invokes a built-in command; all when it asks for help or names no command)."""
    words = [a for a in argv or [] if not a.startswith("-")]
    invoked = words[1] if words[:1] == ["reward"] and len(words) > 1 else (words[0] if words else None)
    names = list(_SUBCOMMANDS)
    if invoked in _SUBCOMMANDS:
        names = [invoked]
    elif invoked in _builtin_names():
        names = []
    for name in names:
        if name not in _mounted:
            group, module, attr = _SUBCOMMANDS[name]
            group.command(name)(getattr(importlib.import_module(module), attr))
            _mounted.add(name)


class PlanFormat(str, Enum):
    text = "text"
    json = "json"


class ProfileName(str, Enum):
    embedded = "embedded"
    production = "production"


class StageStep(str, Enum):
    prep = "prep"
    train = "train"
    eval = "eval"


def _error_line(exc: Exception) -> Text:
    """``error: <message>``, the message printed as it is (no console markup: paths may hold ``[``)."""
    return Text.assemble(("error: ", "bold red"), str(exc))


def _print_table(table: Table) -> None:
    """Print a table at the terminal's width, or unwrapped when the output is a file or a pipe."""
    out = console if console.is_terminal else Console(width=240, file=console.file)
    out.print(table)


def _fail(exc: Exception) -> None:
    console.print(_error_line(exc), soft_wrap=True)
    raise typer.Exit(code=2)


@_app.command()
def run(
    recipe: Path = typer.Argument(..., help="Recipe YAML, e.g. recipes/tiny.yaml."),
    start: str | None = typer.Option(None, "--from", help="First stage to run (earlier ones must be done)."),
    until: str | None = typer.Option(None, "--until", help="Last stage to run."),
    only: str | None = typer.Option(None, "--only", help="Run just this stage."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Resolve and write configs; train nothing.", metavar=""
    ),
    sets: list[str] = typer.Option([], "--set", help="Override: key.path=value or STAGE.key.path=value."),
    run_dir: Path | None = typer.Option(
        None, "--run-dir", help="Run directory (default runs/<recipe name>)."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Override the recipe's seed."),
    rebuild: list[str] = typer.Option(
        [],
        "--rebuild",
        help="Delete and rebuild this stage's output (or 'base') when its files no longer match its handoff.",
    ),
) -> None:
    """Run a recipe stage by stage, handing each verified checkpoint to the next (resumable)."""
    from infra.driver import Driver, Selection
    from infra.handoff import HandoffError
    from infra.recipe import load_recipe

    try:
        loaded = load_recipe(recipe, sets=sets)
        rd = run_dir or Path("runs") / (
            loaded.recipe.name if seed is None else f"{loaded.recipe.name}-s{seed}"
        )
        driver = Driver(loaded, rd, console=console, seed=seed, rebuild=tuple(rebuild))
        manifest = driver.run(Selection(start=start, until=until, only=only), dry_run=dry_run)
    except (ConfigError, HandoffError) as exc:
        _fail(exc)
        return
    if not dry_run:
        _print_status(rd)
        try:
            from eval.report import print_stagewise
        except ImportError:
            return
        print_stagewise(rd, console)
    else:
        console.print(f"dry run of {len(manifest.stages)} stage(s) written under {rd}")


@_app.command()
def plan(
    recipe: Path = typer.Argument(..., help="Recipe YAML with the production profile."),
    fmt: PlanFormat = typer.Option(PlanFormat.text, "--format", help="text or json."),
    check: bool = typer.Option(
        False, "--check", help="Validate every command against slime's flags.", metavar=""
    ),
    execute: bool = typer.Option(
        False, "--execute", help="Run the runbook on the cluster (for real).", metavar=""
    ),
    sets: list[str] = typer.Option([], "--set", help="Override: key.path=value or STAGE.key.path=value."),
) -> None:
    """Print the production runbook: per stage its commands, nodes and resources."""
    from infra.production.plan import check_plan, execute_plan, format_plan, render_plan
    from infra.recipe import load_recipe

    try:
        loaded = load_recipe(recipe, sets=sets, profile="production")
        plans = render_plan(loaded)
    except ConfigError as exc:
        _fail(exc)
        return
    typer.echo(format_plan(plans, fmt.value))
    if check:
        problems = check_plan(plans)
        for p in problems:
            console.print(f"[red]✗[/] {p}", highlight=False)
        if problems:
            raise typer.Exit(code=1)
        console.print(
            f"[green]✓[/] {len(plans)} stage(s): every flag exists in the pinned slime and fits its kind"
        )
    if execute:
        execute_plan(plans)


@_app.command()
def preflight(
    stage: str = typer.Argument(
        ..., help="A stage folder (stages/01_reasoning_rl) or a stage id of --recipe."
    ),
    init_from: Path | None = typer.Option(None, "--init-from", help="The stage's input HF checkpoint."),
    data: Path | None = typer.Option(
        None, "--data", help="The stage's data folder (default: the cluster's)."
    ),
    recipe: Path | None = typer.Option(None, "--recipe", help="Recipe whose stage id STAGE names."),
    base: bool = typer.Option(
        False, "--base", help="The input is a base checkpoint (it has no handoff record).", metavar=""
    ),
) -> None:
    """Check a stage before its GPU job: hooks, reward samples, sandbox, judge, data, input handoff."""
    from infra.production.preflight import failed, run_preflight

    checks = run_preflight(stage, init_hf=init_from, data_dir=data, recipe=recipe, base=base, echo=typer.echo)
    bad = failed(checks)
    if bad:
        typer.echo(f"preflight failed: {', '.join(c.name for c in bad)} ({len(bad)} of {len(checks)} checks)")
        raise typer.Exit(code=2)
    typer.echo(f"preflight passed ({len(checks)} checks)")


def _print_status(run_dir: Path) -> None:
    from infra.manifest import RunManifest

    m = RunManifest.load(run_dir)
    if m is None:
        _fail(ConfigError(f"{run_dir}: no manifest.json (not a run directory)"))
        return
    table = Table(title=f"{m.recipe} ({m.profile}, seed {m.seed}) — {run_dir}")
    for col in ("stage", "status", "started", "ended", "input", "output", "metrics"):
        table.add_column(col)
    colours = {"done": "green", "running": "yellow", "failed": "red", "pending": "dim"}
    for e in m.stages:
        metrics = ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(e.metrics.items())
        )
        table.add_row(
            e.id,
            f"[{colours[e.status]}]{e.status}[/]",
            e.started_at or "",
            e.ended_at or "",
            e.input_checkpoint or "",
            e.output_checkpoint or "",
            metrics or (e.error or ""),
        )
    _print_table(table)


@_app.command()
def status(run_dir: Path = typer.Argument(..., help="A run directory, e.g. runs/tiny.")) -> None:
    """Show each stage of a run: status, times, checkpoints and headline metrics."""
    try:
        _print_status(run_dir)
    except ConfigError as exc:
        _fail(exc)


@_app.command()
def stage(
    stage_dir: Path = typer.Argument(..., help="A stage folder, e.g. stages/01_reasoning_rl."),
    step: StageStep = typer.Argument(..., help="prep, train or eval."),
    init_from: Path = typer.Option(..., "--init-from", help="Any HF-format checkpoint folder."),
    profile: ProfileName = typer.Option(ProfileName.embedded, "--profile", help="embedded or production."),
    run_dir: Path = typer.Option(Path("runs/stage"), "--run-dir", help="Where the stage writes."),
    sets: list[str] = typer.Option([], "--set", help="Override: key.path=value."),
    seed: int = typer.Option(0, "--seed", help="Seed."),
) -> None:
    """Run one stage alone (prep, train or eval) from any HF checkpoint."""
    from infra.layering import parse_set
    from infra.recipe import find_stage_folder, resolve_stage
    from infra.single_stage import run_single_stage

    steps = {"prep": ("prep",), "train": ("prep", "train"), "eval": ("prep", "eval")}[step.value]
    try:
        folder = find_stage_folder(str(stage_dir))
        parsed = dict(parse_set(s) for s in sets)
        resolved = resolve_stage(folder, profile.value, sets=parsed)
        out = run_single_stage(resolved, init_from, run_dir / resolved.id, steps, seed=seed, console=console)
    except ConfigError as exc:
        _fail(exc)
        return
    console.print_json(json.dumps(out, default=str))


@_app.command()
def report(
    run_dir: Path | None = typer.Argument(None, help="A run directory (omit with --production)."),
    compare: Path | None = typer.Option(
        None, "--compare", help="A second run to put side by side (with --production: the FireFlash outputs)."
    ),
    production: Path | None = typer.Option(
        None, "--production", help="A directory of production eval outputs: write its Table 2 instead."
    ),
) -> None:
    """Write RUN_DIR/report/: the stagewise table (markdown, HTML) and training-dynamics plots.

    With --production DIR: DIR/report/table2.md and table2.html, every checkpoint on every benchmark.
    """
    if (run_dir is None) == (production is None):
        _fail(ValueError("report: give either a run directory or --production DIR"))
    try:
        if production is not None:
            from eval.production_report import write_production_report

            out = write_production_report(production, compare=compare)
        else:
            from eval.report import write_report

            out = write_report(run_dir, compare=compare)
    except (ValueError, FileNotFoundError, ConfigError) as exc:
        _fail(exc)
        return
    console.print(f"report written to {out}")


@_app.command()
def seeds(
    run_dirs: list[Path] = typer.Argument(
        ..., help="Two or more run directories of one recipe (one per seed)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Markdown file to write (default <first run dir's parent>/seeds.md)."
    ),
    stage: str | None = typer.Option(
        None,
        "--stage",
        help="Compare one stage (e.g. 06_search_agent) across runs of any recipe or `rufus stage` folders.",
    ),
) -> None:
    """Write the seed-spread report: per stage and metric, mean and min–max over seeds, and a verdict."""
    from eval.seeds import HEADERS, load_runs, row_cells, rows_of, write_seed_report

    target = out or run_dirs[0].parent / "seeds.md"
    try:
        runs = load_runs(run_dirs, stage=stage)
        written = write_seed_report(run_dirs, target, runs)
    except (ValueError, FileNotFoundError) as exc:
        _fail(exc)
        return
    table = Table(title=f"Seed spread: {runs[0].name} ({len(run_dirs)} seeds, %)")
    for h in HEADERS:
        table.add_column(h, justify="right" if "(" in h else "left")
    colours = {"rise": "green", "within spread": "yellow", "no rise": "red"}
    for r in rows_of(runs):
        cells = row_cells(r, len(run_dirs))
        colour = colours.get(r.verdict, "default")
        table.add_row(*cells[:-1], f"[{colour}]{cells[-1]}[/]")
    _print_table(table)
    console.print(f"seed report written to {written} (plot: {written.with_suffix('.png').name})")


def __getattr__(name: str) -> typer.Typer:
    """``infra.cli.app``: the whole command line, every package-side command mounted (PEP 562)."""
    if name == "app":
        _mount_subcommands()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _stop_on_sigterm(signum: int, _frame: object) -> None:
    """Leave as Ctrl-C does: ``finally`` blocks and ``atexit`` handlers run (sandboxes stop, temp dirs go).

    Python's default for SIGTERM (``kill``, a scheduler's pre-emption, a container stop) ends the process
    at once, so the process-wide caches that close at exit (the Harbor runtimes' snapshots under /tmp, the
    workspace and AWM servers) were left behind. A second SIGTERM ends the process at once.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(f"rufus: stopped by {signal.Signals(signum).name}", file=sys.stderr)
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    limit_malloc_arenas()  # before any thread starts: see infra/malloc_arenas.py
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    _mount_subcommands(sys.argv[1:])
    try:
        _app()
    except ConfigError as exc:
        console.print(_error_line(exc), soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
