"""The tasks of the offline AWM-format generator: text, code verifier, gold actions and final answer.

Four kinds over one table (:data:`KINDS`): create a row, update a column of a row named by its label,
delete a row named by its label, and a look-up answered in the final message. Every verifier diffs the
initial and final databases with ``sqlite3`` (``verify_task_completion(initial_db_path, final_db_path,
final_answer)``, the public release's signature) and checks only what the task asked, so any action
sequence that reaches the requested state passes.
"""

from __future__ import annotations

import random
from typing import Any

from data_prep.awm_domains import Column, Table


def column_value(col: Column, rng: random.Random) -> Any:
    """Return a value for ``col``: from its vocabulary, else uniform in its range (REAL: 2 decimals)."""
    if col.vocab:
        return rng.choice(col.vocab)
    if col.sql == "REAL":
        return round(rng.uniform(col.low, col.high), 2)
    return rng.randint(col.low, col.high)


_ROWS = (
    "def _rows(path, table):\n"
    "    conn = sqlite3.connect(path)\n"
    "    conn.row_factory = sqlite3.Row\n"
    "    rows = {r['id']: dict(r) for r in conn.execute(f'SELECT * FROM {table}')}\n"
    "    conn.close()\n"
    "    return rows\n\n"
)


def _verifier(body: str) -> str:
    head = "def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n"
    return _ROWS + head + "".join(f"    {line}\n" for line in body.strip().split("\n"))


def make_task(
    kind: str, table: Table, rows: list[dict[str, Any]], rng: random.Random, lean: bool = False
) -> dict[str, Any]:
    """Return one task of ``kind``: text, verifier code, gold actions and final answer.

    A look-up asks how many rows share a value; with ``lean`` (embedded scale) it asks for a number
    stored in one row instead, which a policy cannot guess (a count of 1 or 2 it often could).
    """
    s, label = table.singular.replace(" ", "_"), table.label.name
    target = rng.choice(rows)
    col = rng.choice(table.columns)
    if kind == "create":
        new = {c.name: column_value(c, rng) for c in table.all_columns}
        new[label] = f"{rng.choice(table.label.vocab)} {rng.randint(2, 99)}"
        desc = ", ".join(f"{k} {v!r}" if isinstance(v, str) else f"{k} {v}" for k, v in new.items())
        code = _verifier(
            f"before, after = _rows(initial_db_path, {table.name!r}), _rows(final_db_path, {table.name!r})\n"
            "added = [r for i, r in after.items() if i not in before]\n"
            "kept = all(after.get(i) == r for i, r in before.items())\n"
            f"want = {new!r}\n"
            "ok = kept and len(added) == 1 and all(added[0].get(k) == v for k, v in want.items())\n"
            "return {'result': 'complete' if ok else 'others'}"
        )
        text = f"Create a new {table.singular} with {desc}."
        return {"task": text, "code": code, "actions": [(f"create_{s}", new)], "answer": ""}
    if kind == "update":
        value = column_value(col, rng)
        while value == target[col.name]:
            value = column_value(col, rng)
        code = _verifier(
            f"before, after = _rows(initial_db_path, {table.name!r}), _rows(final_db_path, {table.name!r})\n"
            f"want = dict(before[{target['id']}], **{{{col.name!r}: {value!r}}})\n"
            f"ok = after.get({target['id']}) == want and all(after.get(i) == r for i, r in before.items() "
            f"if i != {target['id']}) and len(after) == len(before)\n"
            "return {'result': 'complete' if ok else 'others'}"
        )
        text = (
            f"Change the {col.name.replace('_', ' ')} of the {table.singular} {target[label]!r} to {value!r}."
        )
        actions = [
            (f"list_{table.name}", {label: target[label]}),
            (f"update_{s}", {"item_id": target["id"], col.name: value}),
        ]
        return {"task": text, "code": code, "actions": actions, "answer": ""}
    if kind == "delete":
        code = _verifier(
            f"before, after = _rows(initial_db_path, {table.name!r}), _rows(final_db_path, {table.name!r})\n"
            f"rest = {{i: r for i, r in before.items() if i != {target['id']}}}\n"
            f"ok = {target['id']} not in after and after == rest\n"
            "return {'result': 'complete' if ok else 'others'}"
        )
        text = f"Delete the {table.singular} {target[label]!r}."
        actions = [(f"list_{table.name}", {label: target[label]}), (f"delete_{s}", {"item_id": target["id"]})]
        return {"task": text, "code": code, "actions": actions, "answer": ""}
    numeric = [c for c in table.columns if c.sql in ("INTEGER", "REAL") and not c.name.endswith("_id")]
    if lean and numeric:
        return _value_lookup(table, target, rng.choice(numeric))
    value = target[col.name]
    count = sum(1 for r in rows if r[col.name] == value)
    code = _verifier(
        f"before, after = _rows(initial_db_path, {table.name!r}), _rows(final_db_path, {table.name!r})\n"
        f"count = sum(1 for r in before.values() if r[{col.name!r}] == {value!r})\n"
        "numbers = re.findall(r'-?\\d+', final_answer or '')\n"
        "ok = after == before and bool(numbers) and int(numbers[-1]) == count\n"
        "return {'result': 'complete' if ok else 'others'}"
    )
    noun, field = table.name.replace("_", " "), col.name.replace("_", " ")
    text = f"How many {noun} have {field} {value!r}? Answer with the number."
    actions = [(f"list_{table.name}", {col.name: value, "limit": 100})]
    return {"task": text, "code": code, "actions": actions, "answer": f"There are {count}."}


def _value_lookup(table: Table, target: dict[str, Any], col: Column) -> dict[str, Any]:
    label, value = table.label.name, target[col.name]
    code = _verifier(
        f"before, after = _rows(initial_db_path, {table.name!r}), _rows(final_db_path, {table.name!r})\n"
        "numbers = re.findall(r'-?\\d+(?:\\.\\d+)?', final_answer or '')\n"
        f"ok = after == before and bool(numbers) and float(numbers[-1]) == {float(value)!r}\n"
        "return {'result': 'complete' if ok else 'others'}"
    )
    field = col.name.replace("_", " ")
    text = f"What is the {field} of the {table.singular} {target[label]!r}? Answer with the number."
    actions = [(f"list_{table.name}", {label: target[label]})]
    return {"task": text, "code": code, "actions": actions, "answer": f"It is {value}."}


KINDS = ("create", "update", "delete", "lookup")
