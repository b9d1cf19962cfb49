"""Read an AgentWorldModel release folder (the public JSONL format) into :class:`Scenario` records.

One environment is one ``scenario`` key spread over these files (names as published by
Snowflake-Labs/agent-world-model and the ``Snowflake/AgentWorldModel-1K`` data set):

==============================  ================================================================
``gen_scenario.jsonl``          ``{name, description}`` (optional)
``gen_tasks.jsonl``             ``{scenario, tasks: [str, ...]}``
``gen_db.jsonl``                ``{scenario, db_schema: {tables: [{name, ddl, indexes}]}, db_path}``
``gen_sample.jsonl``            ``{scenario, sample_data: {tables: [{table_name, insert_statements}]}}``
``gen_spec.jsonl``              ``{scenario, api_spec: {api_groups: [{endpoints: [...]}]}}`` (optional)
``gen_envs.jsonl``              ``{scenario, db_path, full_code}``: one FastAPI file per scenario
``gen_verifier.pure_code.jsonl``  ``{scenario, task_idx, task, verification: {code}}``
==============================  ================================================================

Scenario names are normalised as the release does (lower case, runs of other characters → ``_``).
Hand-written because the ``agent-world-model`` package needs Python ≥ 3.12 and pins an old FastAPI;
reading JSONL needs none of it. The database is built here from the schema and seed rows (plain SQL in
SQLite, no third-party Python runs); the server code and verifiers are only ever executed in the
sandbox (:mod:`infra.agents.awm.server`).
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.io import MalformedCounter, read_jsonl

TASKS = "gen_tasks.jsonl"
DB = "gen_db.jsonl"
SAMPLE = "gen_sample.jsonl"
SPEC = "gen_spec.jsonl"
ENVS = "gen_envs.jsonl"
VERIFIERS = "gen_verifier.pure_code.jsonl"
SCENARIOS = "gen_scenario.jsonl"
REQUIRED = (TASKS, DB, SAMPLE, ENVS, VERIFIERS)
#: Every file of a release, by stem (the generator writes them all).
RELEASE_STEMS = tuple(f.removesuffix(".jsonl") for f in (SCENARIOS, TASKS, DB, SAMPLE, SPEC, ENVS, VERIFIERS))


class ReleaseError(ValueError):
    """A release file is missing or a record is malformed (the message names file, line and key)."""


def normalize_scenario_name(name: str) -> str:
    """Return the release's normalised scenario key: lower case, other characters folded into ``_``."""
    s = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return re.sub(r"_+", "_", s).strip("_")


@dataclass(frozen=True)
class AwmTask:
    """One task of a scenario: its text and its code verifier (``None`` when the release has none)."""

    scenario: str
    index: int
    text: str
    verifier: str | None


@dataclass
class Scenario:
    """One AWM environment: tasks, database schema and seed rows, API spec, server code, verifiers."""

    name: str
    description: str
    tasks: list[str]
    tables: list[dict[str, Any]]
    inserts: list[tuple[str, list[str]]]
    full_code: str
    api_spec: dict[str, Any] = field(default_factory=dict)
    verifiers: dict[int, str] = field(default_factory=dict)
    _db: bytes | None = field(default=None, repr=False)

    def task(self, index: int) -> AwmTask:
        """Return task ``index`` with its verifier."""
        if not 0 <= index < len(self.tasks):
            raise ReleaseError(f"scenario {self.name!r}: no task {index} (it has {len(self.tasks)})")
        return AwmTask(self.name, index, self.tasks[index], self.verifiers.get(index))

    def verified_tasks(self) -> list[AwmTask]:
        """Return the tasks that have a code verifier (the only ones an RL stage can score)."""
        return [self.task(i) for i in range(len(self.tasks)) if i in self.verifiers]

    def spec_operation_ids(self) -> list[str]:
        """Return the ``operation_id`` of every endpoint in the API spec, in spec order."""
        groups = self.api_spec.get("api_groups", [])
        return [str(e["operation_id"]) for g in groups for e in g.get("endpoints", []) if "operation_id" in e]

    def database(self) -> bytes:
        """Return the pristine SQLite file (schema, indexes, seed rows) as bytes, built once."""
        if self._db is None:
            self._db = build_database(self)
        return self._db


def build_database(scenario: Scenario) -> bytes:
    """Create the scenario's SQLite database (DDL, indexes, then seed rows) and return the file's bytes.

    A DDL or index statement that fails is an error naming the table; a seed INSERT that fails is
    skipped, as the release's own loader does (the correctness filter drops tasks that then break).
    """
    with tempfile.TemporaryDirectory(prefix="rufus-awm-db-") as tmp:
        path = os.path.join(tmp, "initial.db")
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            for table in scenario.tables:
                for stmt in [table["ddl"], *table.get("indexes", [])]:
                    try:
                        conn.execute(stmt)
                    except sqlite3.Error as exc:
                        raise ReleaseError(
                            f"{DB}: scenario {scenario.name!r} table {table.get('name')!r}: {exc}"
                        ) from None
            for _, statements in scenario.inserts:
                for stmt in statements:
                    try:
                        conn.execute(stmt)
                    except sqlite3.Error:
                        continue
            conn.commit()
        finally:
            conn.close()
        return Path(path).read_bytes()


def _records(folder: Path, name: str, required: bool) -> list[tuple[str, dict[str, Any]]]:
    """Return ``(file:line, record)`` of a release file; one malformed line fails the whole release."""
    path = folder / name
    if not path.is_file():
        if required:
            raise ReleaseError(f"{path}: missing; an AWM release needs {', '.join(REQUIRED)}")
        return []
    bad = MalformedCounter(max_examples=1)
    out = list(read_jsonl(path, bad))
    if bad.total:
        raise ReleaseError(bad.examples[0])
    return out


def _get(rec: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = rec.get(key)
    if not isinstance(value, kind):
        raise ReleaseError(f"{where}: key {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _by_scenario(
    folder: Path, name: str, required: bool = True, key: str = "scenario"
) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for where, rec in _records(folder, name, required):
        out[normalize_scenario_name(_get(rec, key, str, where))] = (where, rec)
    return out


def load_release(folder: str | os.PathLike[str], scenarios: list[str] | None = None) -> dict[str, Scenario]:
    """Return the release's scenarios by normalised name (only ``scenarios`` when given).

    A scenario must appear in ``gen_tasks``, ``gen_db``, ``gen_sample`` and ``gen_envs``; verifiers and
    the spec are attached when present. Errors name the file, line and key.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ReleaseError(f"{root}: not a directory (an AWM release folder holds {', '.join(REQUIRED)})")
    tasks = _by_scenario(root, TASKS)
    dbs, samples, envs = _by_scenario(root, DB), _by_scenario(root, SAMPLE), _by_scenario(root, ENVS)
    specs = _by_scenario(root, SPEC, required=False)
    infos = _by_scenario(root, SCENARIOS, required=False, key="name")
    wanted = [normalize_scenario_name(s) for s in scenarios] if scenarios else sorted(tasks)
    out: dict[str, Scenario] = {}
    for name in wanted:
        parts = {}
        for label, table in ((TASKS, tasks), (DB, dbs), (SAMPLE, samples), (ENVS, envs)):
            if name not in table:
                raise ReleaseError(f"{root / label}: no record for scenario {name!r}")
            parts[label] = table[name]
        where, rec = parts[TASKS]
        task_list = _get(rec, "tasks", list, where)
        if not all(isinstance(t, str) for t in task_list):
            raise ReleaseError(f"{where}: key 'tasks' must be a list of strings")
        where, rec = parts[DB]
        tables = _get(_get(rec, "db_schema", dict, where), "tables", list, f"{where} db_schema")
        for i, t in enumerate(tables):
            if not isinstance(t, dict) or not isinstance(t.get("ddl"), str):
                raise ReleaseError(f"{where}: db_schema.tables[{i}] needs a string 'ddl'")
        where, rec = parts[SAMPLE]
        sample = _get(rec, "sample_data", dict, where)
        inserts = [
            (str(t.get("table_name", "")), [s for s in t.get("insert_statements", []) if isinstance(s, str)])
            for t in sample.get("tables", [])
            if isinstance(t, dict)
        ]
        where, rec = parts[ENVS]
        code = _get(rec, "full_code", str, where)
        spec = specs.get(name, ("", {}))[1].get("api_spec") or {}
        info = infos.get(name, ("", {}))[1]
        out[name] = Scenario(
            name=name,
            description=str(info.get("description", "")),
            tasks=list(task_list),
            tables=list(tables),
            inserts=inserts,
            full_code=code,
            api_spec=spec if isinstance(spec, dict) else {},
        )
    for where, rec in _records(root, VERIFIERS, True):
        name = normalize_scenario_name(_get(rec, "scenario", str, where))
        if name not in out:
            continue
        idx = _get(rec, "task_idx", int, where)
        code = (rec.get("verification") or {}).get("code")
        if not isinstance(code, str) or not code.strip():
            continue  # the release keeps tasks whose verifier generation failed, with no code
        if not 0 <= idx < len(out[name].tasks):
            raise ReleaseError(f"{where}: task_idx {idx} out of range for scenario {name!r}")
        out[name].verifiers[idx] = code
    return out
