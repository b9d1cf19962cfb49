"""``rufus validate-tasks DIR…``: FireFlash's nine task-validation gates over Harbor task dirs.

A DIR is one task (it holds ``task.toml`` or ``task.yaml``) or a folder of task dirs. Each task goes
through :func:`infra.agents.harbor.gates.validate_task`; the command prints a table (task × gate) and the
evidence of every failure, and ``--out report.json`` writes the per-task, per-gate report. Exit code: 0
when every task passes every gate that ran, 1 when a gate failed, 2 on a usage or loading error (one
line naming the path). Gate 2 needs the LLM judge (``RUFUS_JUDGE_BASE_URL``, ``RUFUS_JUDGE_MODEL``); the
others need the training sandbox (root here, as for training).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.agents.harbor.gates import GATES, GateOptions, TaskReport, validate_task
from infra.agents.harbor.local_runtime import RuntimeOptions
from infra.agents.harbor.task import HarborTask, TaskFormatError, load_task, load_tasks

REPORT_VERSION = 1
_FLAGS = {"boots": "--boots", "repeats": "--repeats", "workspace_mb": "--workspace-mb", "gates": "--gate"}
_SHORT = {1: "reference", 2: "stated", 3: "offline", 4: "boots", 5: "no leak", 6: "nothing=0",
          7: "alternatives", 8: "malformed", 9: "repeatable"}  # fmt: skip
_CELL = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "skipped": "[dim]skip[/]"}


class UsageError(ValueError):
    """A path or option the command cannot use; ``str()`` is the one line printed."""


def discover(dirs: list[Path]) -> list[HarborTask]:
    """Load the tasks ``dirs`` name (task dirs or folders of them), each once; raise :class:`UsageError`."""
    tasks: dict[Path, HarborTask] = {}
    for path in dirs:
        if not path.is_dir():
            raise UsageError(f"{path}: not a directory")
        try:
            if (path / "task.toml").is_file() or (path / "task.yaml").is_file():
                loaded, errors = [load_task(path)], []
            else:
                loaded, errors = load_tasks(path)
        except TaskFormatError as exc:
            raise UsageError(str(exc)) from None
        if errors:
            more = f" (and {len(errors) - 1} more task(s) that do not load)" if len(errors) > 1 else ""
            raise UsageError(errors[0] + more)
        if not loaded:
            raise UsageError(f"{path}: no task dirs in it (a task dir holds task.toml or task.yaml)")
        for task in loaded:
            tasks.setdefault(task.task_dir.resolve(), task)
    return list(tasks.values())


def report_dict(reports: list[TaskReport], opts: GateOptions) -> dict[str, Any]:
    """The JSON report: gate names, options, each task's gates, and a summary with the exit code."""
    failed = [r.task for r in reports if not r.ok]
    return {
        "version": REPORT_VERSION,
        "gates": [{"gate": n, "name": name, "title": title} for n, (name, title) in GATES.items()],
        "options": opts.model_dump(mode="json"),
        "tasks": [r.model_dump(mode="json") for r in reports],
        "summary": {
            "tasks": len(reports),
            "ok": len(reports) - len(failed),
            "failed": failed,
            "exit_code": 1 if failed else 0,
        },
    }


def print_report(reports: list[TaskReport], console: Console) -> None:
    """The task × gate table, then each failure's evidence and the reasons gates were skipped."""
    table = Table(title="FireFlash task gates", title_justify="left")
    table.add_column("task", overflow="fold")
    for n in GATES:
        table.add_column(f"{n}\n{_SHORT[n]}", justify="center")
    table.add_column("result")
    for r in reports:
        cells = [_CELL[g.status] for g in r.gates]
        table.add_row(Text(r.task), *cells, "[green]ok[/]" if r.ok else "[bold red]failed[/]")
    console.print(table)
    skipped: dict[tuple[int, str], list[str]] = defaultdict(list)
    for r in reports:
        for g in r.gates:
            if g.status == "fail":  # evidence is printed as it is: it quotes files that may hold "["
                where = f"{r.task} gate {g.gate} ({g.name}): "
                console.print(Text.assemble(("FAIL ", "bold red"), where, g.evidence))
            elif g.status == "skipped" and g.evidence != "not selected":
                skipped[(g.gate, g.evidence)].append(r.task)
    for (n, why), names in sorted(skipped.items()):
        head = f"skipped gate {n} ({GATES[n][0]}) on {len(names)} task(s): "
        console.print(Text.assemble((head, "dim"), why))
    bad = sum(not r.ok for r in reports)
    console.print(f"{len(reports)} task(s): {len(reports) - bad} passed every gate that ran, {bad} failed")


def _options(**values: Any) -> GateOptions:
    try:
        return GateOptions(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = _FLAGS.get(str(err["loc"][0]), str(err["loc"][0]))
        raise UsageError(f"{flag}: {err['msg']}") from None


def validate_tasks(
    dirs: list[Path] = typer.Argument(
        ..., help="Task dirs, or folders of task dirs.", show_default=False, metavar="DIR"
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Write the per-task, per-gate report (JSON) here.", metavar="FILE"
    ),
    boots: int = typer.Option(3, "--boots", help="Sandbox boots gate 4 makes.", metavar="N"),
    repeats: int = typer.Option(
        3, "--repeats", help="Verifications of the reference state gate 9 compares.", metavar="K"
    ),
    workspace_mb: int = typer.Option(
        RuntimeOptions.workspace_mb, "--workspace-mb", help="Size of the sandbox's /app.", metavar="MB"
    ),
    gate: list[int] = typer.Option(
        [], "--gate", help="Run only this gate, 1-9 (repeatable); the others are skipped.", metavar="N"
    ),
) -> None:
    """Check Harbor tasks against FireFlash's nine gates; exit 0 all pass, 1 a gate failed, 2 bad input."""
    from infra.sandbox import check_isolation

    console = Console(width=None if sys.stdout.isatty() else 240)  # a file or pipe gets unwrapped lines
    try:
        opts = _options(boots=boots, repeats=repeats, workspace_mb=workspace_mb, gates=tuple(gate or GATES))
        tasks = discover(dirs)
        isolation = check_isolation()
        if set(opts.gates) - {2} and not isolation.ok:
            raise UsageError(f"the training sandbox is unavailable here: {'; '.join(isolation.problems)}")
        if out is not None and not out.parent.is_dir():
            raise UsageError(f"{out}: its folder does not exist")
    except UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    reports = []
    for i, task in enumerate(tasks, 1):
        report = validate_task(task, opts)
        failed = ",".join(str(g.gate) for g in report.gates if g.status == "fail")
        verdict = f"failed gate(s) {failed}" if failed else "ok"
        typer.echo(f"[{i}/{len(tasks)}] {task.task_dir}: {verdict}", err=True)
        reports.append(report)
    data = report_dict(reports, opts)
    if out is not None:
        out.write_text(json.dumps(data, indent=2) + "\n")
    print_report(reports, console)
    raise typer.Exit(data["summary"]["exit_code"])
