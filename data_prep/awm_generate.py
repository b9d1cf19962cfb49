"""Offline generator of AgentWorldModel-format scenarios, with gold action sequences and a self-check.

``python -m data_prep.awm_generate --out DIR [--seed S] [--tasks 10] [--domains a,b]`` writes the release
files (``gen_scenario``, ``gen_tasks``, ``gen_db``, ``gen_sample``, ``gen_spec``, ``gen_envs``,
``gen_verifier.pure_code``: exactly the public format, see :mod:`infra.agents.awm.release`) plus
``gold_actions.jsonl`` (``{scenario, task_idx, actions: [{tool, arguments}], final_answer}``), then runs
:func:`infra.agents.awm.selfcheck.self_check` and exits 2 naming every task that fails it.

For the tiny scale and CI, where the HF release is not reachable: each domain of
:mod:`data_prep.awm_domains` becomes one FastAPI + SQLAlchemy server with list/get/create/update/delete
per table (5 tools per table), seed rows drawn from ``seed``, and tasks of four kinds (create, update,
delete, look-up with a final answer) whose verifiers diff the initial and final databases.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from data_prep.awm_domains import DOMAINS, Domain, Table
from data_prep.awm_tasks import KINDS, column_value, make_task
from infra.agents.awm.release import RELEASE_STEMS

_PY = {"TEXT": "str", "INTEGER": "int", "REAL": "float"}


def seed_rows(table: Table, rng: random.Random) -> list[dict[str, Any]]:
    """Return the table's seed rows (ids 1..n, distinct labels)."""
    labels = rng.sample(list(table.label.vocab), min(table.rows, len(table.label.vocab)))
    rows = []
    for i, label in enumerate(labels, 1):
        row: dict[str, Any] = {"id": i, table.label.name: label}
        for col in table.columns:
            row[col.name] = column_value(col, rng)
        if table.owned:
            row["user_id"] = 1
        rows.append(row)
    return rows


def _sql(value: Any) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)


def ddl(table: Table) -> str:
    """Return the table's CREATE TABLE statement."""
    cols = ["id INTEGER PRIMARY KEY"] + [f"{c.name} {c.sql} NOT NULL" for c in table.all_columns]
    if table.owned:
        cols.append("user_id INTEGER NOT NULL")
    return f"CREATE TABLE {table.name} ({', '.join(cols)})"


def server_code(domain: Domain, lean: bool = False) -> str:
    """Return the single-file FastAPI server of ``domain`` (SQLAlchemy engine, as AWM's servers use).

    ``lean``: list endpoints filter by column only (no sort/limit parameters, no parameter descriptions),
    so a scenario's five tool schemas fit the micro model's context at the embedded scale.
    """
    out = [
        "from fastapi import FastAPI, HTTPException, Query, Path",
        "from pydantic import BaseModel",
        "from sqlalchemy import create_engine, text",
        "from sqlalchemy.exc import IntegrityError",
        "",
        f'engine = create_engine("sqlite:///{domain.key}.db")',
        f'app = FastAPI(title="{domain.title}")',
        "",
        "def _all(sql, params):",
        "    with engine.connect() as conn:",
        "        return [dict(r._mapping) for r in conn.execute(text(sql), params)]",
        "",
        "def _write(sql, params):",
        "    try:",
        "        with engine.begin() as conn:",
        "            return conn.execute(text(sql), params)",
        "    except IntegrityError as exc:",
        "        raise HTTPException(status_code=409, detail=str(exc.orig))",
        "",
    ]
    for t in domain.tables:
        out += _table_code(t, lean)
    out += [
        'if __name__ == "__main__":',
        "    import os, uvicorn",
        '    host, port = os.environ.get("HOST", "127.0.0.1"), int(os.environ.get("PORT", 8000))',
        "    uvicorn.run(app, host=host, port=port)",
        "",
    ]
    return "\n".join(out)


def _list_params(t: Table, lean: bool) -> tuple[str, str]:
    """Return the list endpoint's parameters and its ``ORDER BY ... LIMIT`` clause."""
    if lean:
        params = ", ".join(f"{c.name}: {_PY[c.sql]} | None = None" for c in t.all_columns)
        return params, ' ORDER BY id LIMIT 100"'
    filters = ", ".join(
        f'{c.name}: {_PY[c.sql]} | None = Query(None, description="Only {t.name} whose {c.name} equals this")'
        for c in t.all_columns
    )
    params = (
        f'{filters}, order_by: str = Query("id", description="Column to sort by"), '
        "descending: bool = Query(False), limit: int = Query(20, ge=1, le=100)"
    )
    return params, " ORDER BY {order_by} {'DESC' if descending else 'ASC'} LIMIT :limit\""


def _table_code(t: Table, lean: bool = False) -> list[str]:
    cls = "".join(p.capitalize() for p in t.name.split("_"))
    own = " AND user_id = 1" if t.owned else ""
    names = [c.name for c in t.all_columns]
    fields = [f"    {c.name}: {_PY[c.sql]}" for c in t.all_columns]
    optional = [f"    {c.name}: {_PY[c.sql]} | None = None" for c in t.all_columns]
    params, tail = _list_params(t, lean)
    check = [] if lean else [
        f"    if order_by not in {['id', *names]!r}:",
        '        raise HTTPException(status_code=422, detail=f"cannot sort by {order_by}")',
    ]  # fmt: skip
    limit = "" if lean else ', "limit": limit'
    item_id = "item_id: int" if lean else f'item_id: int = Path(..., description="The {t.singular}\'s id")'
    insert_cols = names + (["user_id"] if t.owned else [])
    insert_vals = [f":{n}" for n in names] + (["1"] if t.owned else [])
    s = t.singular.replace(" ", "_")
    return [
        f"class {cls}Create(BaseModel):",
        *fields,
        "",
        f"class {cls}Update(BaseModel):",
        *optional,
        "",
        f'@app.get("/{t.name}", operation_id="list_{t.name}", summary="List {t.name}, filtered and sorted")',
        f"def list_{t.name}({params}):",
        *check,
        f"    asked = {{{', '.join(f'{n!r}: {n}' for n in names)}}}",
        "    given = {k: v for k, v in asked.items() if v is not None}",
        '    where = " AND ".join(f"{k} = :{k}" for k in given) or "1 = 1"',
        f'    sql = f"SELECT * FROM {t.name} WHERE {{where}}{own}{tail}',
        f"    return _all(sql, {{**given{limit}}})",
        "",
        f'@app.get("/{t.name}/{{item_id}}", operation_id="get_{s}", summary="Get one {t.singular} by id")',
        f"def get_{s}({item_id}):",
        f'    rows = _all("SELECT * FROM {t.name} WHERE id = :id{own}", {{"id": item_id}})',
        "    if not rows:",
        f'        raise HTTPException(status_code=404, detail="{t.singular} not found")',
        "    return rows[0]",
        "",
        f'@app.post("/{t.name}", operation_id="create_{s}", summary="Create a {t.singular}")',
        f"def create_{s}(body: {cls}Create):",
        f'    sql = "INSERT INTO {t.name} ({", ".join(insert_cols)}) VALUES ({", ".join(insert_vals)})"',
        "    res = _write(sql, body.model_dump())",
        '    return {"id": res.lastrowid, **body.model_dump()}',
        "",
        f'@app.patch("/{t.name}/{{item_id}}", operation_id="update_{s}", summary="Update a {t.singular}")',
        f"def update_{s}(body: {cls}Update, {item_id}):",
        "    changes = body.model_dump(exclude_none=True)",
        "    if not changes:",
        '        raise HTTPException(status_code=422, detail="nothing to update")',
        '    sets = ", ".join(f"{k} = :{k}" for k in changes)',
        f'    sql = f"UPDATE {t.name} SET {{sets}} WHERE id = :id{own}"',
        '    res = _write(sql, {**changes, "id": item_id})',
        "    if res.rowcount == 0:",
        f'        raise HTTPException(status_code=404, detail="{t.singular} not found")',
        '    return {"id": item_id, **changes}',
        "",
        f'@app.delete("/{t.name}/{{item_id}}", operation_id="delete_{s}", summary="Delete a {t.singular}")',
        f"def delete_{s}({item_id}):",
        f'    res = _write("DELETE FROM {t.name} WHERE id = :id{own}", {{"id": item_id}})',
        "    if res.rowcount == 0:",
        f'        raise HTTPException(status_code=404, detail="{t.singular} not found")',
        '    return {"deleted": item_id}',
        "",
    ]


def table_scenarios(domain: Domain) -> list[Domain]:
    """Return one single-table scenario per table of ``domain`` (key ``<domain>_<table>``, 5 tools each)."""
    return [
        Domain(f"{domain.key}_{t.name}", f"{domain.title} {t.name}", domain.description, (t,))
        for t in domain.tables
    ]


#: Draws per task before a repeated task text is accepted (a table with fewer rows than deletes asked).
_DRAWS = 50


def _distinct_tasks(
    d: Domain, rows: dict[str, list[dict[str, Any]]], n: int, rng: random.Random, lean: bool
) -> list[dict[str, Any]]:
    """Return ``n`` tasks of ``d`` (kind ``KINDS[i % 4]``), redrawing one whose text an earlier task has.

    Each episode starts from the seed database, so two tasks with one text are one task: a split would put
    a copy of a held-out task in training.
    """
    made: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i in range(n):
        for _ in range(_DRAWS):
            table = rng.choice(d.tables)
            task = make_task(KINDS[i % len(KINDS)], table, rows[table.name], rng, lean)
            if task["task"] not in seen:
                break
        seen.add(task["task"])
        made.append(task)
    return made


def generate(
    out: Path,
    seed: int = 0,
    tasks: int = 10,
    domains: list[str] | None = None,
    *,
    split_tables: bool = False,
    lean: bool = False,
) -> list[str]:
    """Write the release files and ``gold_actions.jsonl`` under ``out``; return the scenario names.

    ``split_tables`` makes every table its own scenario (5 tools); ``lean`` writes lean list endpoints
    (:func:`server_code`). Both are for the embedded scale, whose micro model has a short context.
    """
    unknown = sorted(set(domains or []) - {d.key for d in DOMAINS})
    if unknown:
        raise ValueError(f"--domains: unknown {unknown}; known: {[d.key for d in DOMAINS]}")
    chosen = [d for d in DOMAINS if not domains or d.key in domains]
    if split_tables:
        chosen = [t for d in chosen for t in table_scenarios(d)]
    files: dict[str, list[dict[str, Any]]] = {k: [] for k in (*RELEASE_STEMS, "gold_actions")}
    for d in chosen:
        rng = random.Random(f"{seed}:{d.key}")
        rows = {t.name: seed_rows(t, rng) for t in d.tables}
        made = _distinct_tasks(d, rows, tasks, rng, lean)
        files["gen_scenario"].append({"name": d.key, "description": d.description})
        files["gen_tasks"].append({"scenario": d.key, "tasks": [m["task"] for m in made]})
        tables = [
            {
                "name": t.name,
                "ddl": ddl(t),
                "indexes": [f"CREATE INDEX idx_{t.name}_{t.label.name} ON {t.name}({t.label.name})"],
            }
            for t in d.tables
        ]
        files["gen_db"].append(
            {"scenario": d.key, "db_schema": {"tables": tables}, "db_path": f"./outputs/databases/{d.key}.db"}
        )
        inserts = [
            {
                "table_name": t.name,
                "insert_statements": [
                    f"INSERT INTO {t.name} ({', '.join(r)}) VALUES ({', '.join(_sql(v) for v in r.values())})"
                    for r in rows[t.name]
                ],
            }
            for t in d.tables
        ]
        files["gen_sample"].append(
            {"scenario": d.key, "tables_count": len(inserts), "sample_data": {"tables": inserts}}
        )
        files["gen_spec"].append(
            {"scenario": d.key, "api_spec": {"api_groups": [_spec_group(t) for t in d.tables]}}
        )
        db_path, code = f"./outputs/databases/{d.key}.db", server_code(d, lean)
        files["gen_envs"].append({"scenario": d.key, "db_path": db_path, "full_code": code})
        for i, m in enumerate(made):
            files["gen_verifier.pure_code"].append(
                {
                    "scenario": d.key,
                    "task_idx": i,
                    "task": m["task"],
                    "verification": {"code": m["code"], "raw_response": ""},
                }
            )
            actions = [
                {"tool": tool, "arguments": {k: v for k, v in args.items() if not (lean and k == "limit")}}
                for tool, args in m["actions"]
            ]
            files["gold_actions"].append(
                {"scenario": d.key, "task_idx": i, "actions": actions, "final_answer": m["answer"]}
            )
    out.mkdir(parents=True, exist_ok=True)
    for name, records in files.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return [d.key for d in chosen]


def _spec_group(t: Table) -> dict[str, Any]:
    s = t.singular.replace(" ", "_")
    ops = [
        ("GET", f"/{t.name}", f"list_{t.name}"),
        ("GET", f"/{t.name}/{{item_id}}", f"get_{s}"),
        ("POST", f"/{t.name}", f"create_{s}"),
    ]
    ops += [
        ("PATCH", f"/{t.name}/{{item_id}}", f"update_{s}"),
        ("DELETE", f"/{t.name}/{{item_id}}", f"delete_{s}"),
    ]
    return {
        "group_name": t.name,
        "endpoints": [
            {"path": p, "method": m, "operation_id": o, "summary": o.replace("_", " ")} for m, p, o in ops
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: generate, self-check, print a summary; exit 2 when a task fails its self-check."""
    from infra.agents.awm.selfcheck import self_check

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--domains", default="", help="comma-separated domain keys (default: all)")
    ap.add_argument("--split-tables", action="store_true", help="one single-table scenario per table")
    ap.add_argument("--lean", action="store_true", help="lean list endpoints (embedded scale)")
    args = ap.parse_args(argv)
    domains = [d for d in args.domains.split(",") if d] or None
    names = generate(args.out, args.seed, args.tasks, domains, split_tables=args.split_tables, lean=args.lean)
    problems = self_check(args.out)
    print(f"{args.out}: {len(names)} scenarios x {args.tasks} tasks; self-check problems: {len(problems)}")
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
