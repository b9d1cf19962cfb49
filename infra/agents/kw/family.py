"""Stage 08's tiny task family (``knowledge_work``) over the ``kw_tiny`` task set, and gold tool calls.

:func:`tiny_release` writes, once per generator version, :data:`TRAIN` train and :data:`HELDOUT`
held-out tasks of :mod:`data_prep.tiny_tasks.knowledge_work` (generator seed :data:`ROOT_SEED`; the two
splits share no entity) as task folders in ``$RUFUS_DATA_CACHE`` (default ``~/.cache/rufus/data``).
One task set serves every run seed, as a benchmark stays fixed while training seeds vary: the run seed
only orders the tasks (:func:`generate`).

:func:`generate` is the family stage 08's ``data_prep`` registers: rows of the ``agent`` environment
running ``kw_tiny`` (:mod:`.tiny`), with the rubric as the row's label, scored by ``kw_rubric`` through
the environment. :func:`gold_actions` is a task's reference deliverables as Feather tool calls
(``write`` for text; for a workbook, ``bash`` running ``python3`` with openpyxl, which Feather's sandbox
puts on its ``PATH``: the same text on every machine): what a solving episode does. :data:`OPTIONS` are
``kw_tiny``'s options, the one place its RL episodes, the SFT demonstrations of
:mod:`data_prep.tiny_tasks.knowledge_work_sft` and the knowledge-work harness's embedded scale take them
from. Light to import: the agent stack loads only when :func:`generate` runs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from data_prep.tiny_tasks.common import (
    TinyTask,
    agent_tiny_tasks,
    build_once,
    cache_root,
    check_split,
    code_key,
    rng_for,
)

ENV = "kw_tiny"
FAMILY = "knowledge_work"
METRIC = "kw_rubric_score"
REWARD = "kw_rubric"
ROOT_SEED = 0
TRAIN, HELDOUT = 240, 96
#: Episode budgets at the embedded scale: a look at the system of record, a read, a write, an answer. A
#: model call may write a whole workbook script (the gold one: up to about 300 micro-model tokens).
LIMITS = {
    "max_tool_calls": 8,
    "max_iterations": 8,
    "max_new_tokens": 384,
    "max_context_tokens": 8192,
    "tool_result_max_tokens": 384,
    "max_tool_errors": 3,
}
#: Sandbox sizes at this scale: one spare sandbox, a small workspace, a warm service runner per concurrent
#: episode (stage 08 runs 4; with 2, two episodes waited for a runner while the other two waited for a
#: model batch that waits for all four: the rollout stalled until the 600 s client timeout).
RUNTIME = {"spares": 1, "servers": 4, "workspace_mb": 16, "command_timeout": 20}
#: The tools offered at this scale: the ones every gold plan calls (Feather's read, write and bash, with
#: compact specs, and the services' list_ endpoints). All fifteen full specs take ~3.1K micro-model tokens,
#: more than the agent SFT phase's 1,280-token sequences.
TOOLS = {"tools": "read+write+bash+list_*", "compact_tools": True}
#: Every option of ``kw_tiny`` (see the module docstring).
OPTIONS = {**RUNTIME, **LIMITS, **TOOLS}
DONE = "Done."


def _code_key() -> str:
    from data_prep import kw_filters, kw_synthesis, kw_taxonomy
    from data_prep.tiny_tasks import knowledge_work

    return code_key(knowledge_work, kw_synthesis, kw_filters, kw_taxonomy)


def tiny_release() -> Path:
    """The folder of the tiny task set, written on first use (atomic rename)."""
    from data_prep.kw_synthesis import write_tasks
    from data_prep.tiny_tasks.knowledge_work import kw_tasks

    out = cache_root() / "kw_tiny" / f"seed{ROOT_SEED}-t{TRAIN}-h{HELDOUT}-{_code_key()}"
    tasks = lambda: kw_tasks(TRAIN, ROOT_SEED, "train") + kw_tasks(HELDOUT, ROOT_SEED, "heldout")  # noqa: E731
    return build_once(out, lambda tmp: write_tasks(tmp, tasks()))


def _pool(env: Any, seed: int, split: str) -> list[str]:
    names = sorted(n for n, t in env.catalog.tasks.items() if t.metadata.get("split") == split)
    rng_for("kw_pool", seed, split).shuffle(names)
    return names


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` tasks of ``split`` (cycling with an ``-rK`` id suffix past the end of the pool)."""
    check_split(split)
    from infra.agents.kw.tiny import TinyKwEnv

    env = TinyKwEnv()
    pool = _pool(env, seed, split)
    rows = agent_tiny_tasks(
        n, pool, lambda name: env.task_of(env.catalog.task(name)), lambda _: DONE,
        env=ENV, reward=REWARD, family=FAMILY, category="Knowledge Work",
    )  # fmt: skip
    for i, row in enumerate(rows):  # the rubric rides as the row's label (the grader's, never the agent's)
        row.label = env.catalog.task(pool[i % len(pool)]).label.model_dump(mode="json", exclude_none=True)
    return rows


_XLSX = (
    "import json, sys\nfrom openpyxl import Workbook\nwb = Workbook()\nwb.remove(wb.active)\n"
    "for name, cells in json.loads(sys.argv[2]).items():\n    ws = wb.create_sheet(name)\n"
    "    for ref, value in cells.items():\n        ws[ref] = value\nwb.save(sys.argv[1])\n"
)


def _xlsx_script(path: str, sheets: dict[str, dict[str, Any]]) -> str:
    args = ["python3", "-c", _XLSX, path, json.dumps(sheets)]
    return " ".join(shlex.quote(a) for a in args)


def _cells(ws: Any) -> dict[str, Any]:
    return {c.coordinate: c.value for row in ws.iter_rows() for c in row if c.value is not None}


def gold_actions(task_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """A task's reference deliverables (``solution/files``) as Feather tool calls ``(name, arguments)``."""
    from openpyxl import load_workbook

    out: list[tuple[str, dict[str, Any]]] = []
    root = Path(task_dir) / "solution" / "files"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if (Path(task_dir) / "environment" / "files" / rel).is_file():  # Feather overwrites only what it read
            out.append(("read", {"file_path": rel}))
        if path.suffix.lower() == ".xlsx":
            wb = load_workbook(path)
            sheets = {ws.title: _cells(ws) for ws in wb.worksheets}
            out.append(("bash", {"command": _xlsx_script(rel, sheets)}))
        else:
            out.append(("write", {"file_path": rel, "content": path.read_text()}))
    return out
