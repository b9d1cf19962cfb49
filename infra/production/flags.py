"""The pinned slime's command-line flags (``data/slime-cli-flags.tsv``) and checks of rendered values.

slime parses with ``parse_known_args``, so a misspelt flag is dropped without a word; checking every
rendered flag against the table of what ``train.py`` really accepts at the pinned commits (slime
624b824a, Megatron 1dcf0daf + slime's patches, SGLang 0.5.15.post1) is the only guard against a typo.
The table ships inside the package because the shared reference folder is not present at run time.

The argparse parsers themselves cannot be built here (slime, Megatron and SGLang need CUDA), so value
checks re-implement the few argparse ``type=`` converters that the table names (int, float, str, json,
SGLang's human-readable ints, Megatron's MoE layer-frequency expression).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

#: argparse actions that take no value on the command line.
NO_VALUE_KINDS = frozenset(
    {
        "store_true",
        "store_false",
        "boolean_optional",
        "help",
        "deprecated_store_true",
        "deprecated_store_const",
    }
)


@dataclass(frozen=True)
class FlagSpec:
    """One row of the flag table: an option string, its destination, argparse kind, default and choices."""

    flag: str
    dest: str
    action: str
    value_type: str | None
    nargs: str | None
    required: bool
    default: Any
    choices: tuple[str, ...] | None
    origin: str

    @property
    def takes_value(self) -> bool:
        """True when the flag is followed by one or more values."""
        return self.action not in NO_VALUE_KINDS and self.action != "deprecated_noop"


def _parse_kind(kind: str) -> tuple[str, str | None, str | None, bool]:
    """Split ``store:int:nargs=+:required`` into (action, type, nargs, required)."""
    parts = kind.split(":")
    action, value_type, nargs, required = parts[0], None, None, False
    for part in parts[1:]:
        if part.startswith("nargs="):
            nargs = part.removeprefix("nargs=")
        elif part == "required":
            required = True
        else:
            value_type = part
    return action, value_type, nargs, required


@cache
def load_flags() -> dict[str, FlagSpec]:
    """Return every flag ``train.py`` accepts at the pinned commits, keyed by option string."""
    text = resources.files("infra.production").joinpath("data/slime-cli-flags.tsv").read_text()
    table: dict[str, FlagSpec] = {}
    for row in csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE):
        action, value_type, nargs, required = _parse_kind(row["kind"])
        choices = tuple(json.loads(row["choices"])) if row["choices"] else None
        table[row["flag"]] = FlagSpec(
            flag=row["flag"],
            dest=row["dest"],
            action=action,
            value_type=value_type,
            nargs=nargs,
            required=required,
            default=json.loads(row["default"]) if row["default"] else None,
            choices=choices,
            origin=row["origin"],
        )
    return table


_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgG]?$")
_MOE_FREQ = re.compile(r"^(\d+|\[[\d\s,]*\](\*\d+)?(\+\[[\d\s,]*\](\*\d+)?)*)$")


def _type_ok(value_type: str | None, value: str) -> bool:
    """True when ``value`` converts under the argparse ``type=`` named ``value_type``."""
    converters = {
        "int": int,
        "float": float,
        "json": json.loads,
        "json_list_type": json.loads,
    }
    if value_type in converters:
        try:
            converters[value_type](value)
        except ValueError:
            return False
        return True
    if value_type == "human_readable_int":
        return bool(_HUMAN_INT.match(value))
    if value_type == "moe_freq_type":
        return bool(_MOE_FREQ.match(value.replace(" ", "")))
    if value_type == "bool":
        return value.lower() in {"true", "false", "1", "0"}
    return True  # str, enum-like and exotic converters take any text; choices are checked separately


def check_values(spec: FlagSpec, values: list[str]) -> str | None:
    """Return why ``values`` do not fit ``spec`` (arity, type, choices), or None when they fit."""
    if not spec.takes_value:
        return f"{spec.flag} takes no value, got {values}" if values else None
    nargs = spec.nargs
    n = len(values)
    arity_ok = {None: n == 1, "?": n <= 1, "*": True, "+": n >= 1}.get(
        nargs, nargs is not None and str(n) == nargs
    )
    if not arity_ok:
        return f"{spec.flag} expects nargs={nargs or 1}, got {n} value(s) {values}"
    for v in values:
        if not _type_ok(spec.value_type, v):
            return f"{spec.flag}={v!r} is not a valid {spec.value_type}"
        if spec.choices is not None and v not in spec.choices:
            return f"{spec.flag}={v!r} is not one of {list(spec.choices)}"
    return None


def split_argv(argv: list[str]) -> list[tuple[str, list[str]]]:
    """Group an argv (without the program) into ``(flag, values)`` pairs; stray values get flag ''."""
    groups: list[tuple[str, list[str]]] = []
    for tok in argv:
        if tok.startswith("--") or (tok.startswith("-") and len(tok) == 2 and tok[1].isalpha()):
            groups.append((tok, []))
        elif groups:
            groups[-1][1].append(tok)
        else:
            groups.append(("", [tok]))
    return groups


def check_argv(argv: list[str]) -> list[str]:
    """Return the problems of a ``train.py`` argv: unknown flags, bad values, repeated flags, stray values."""
    table = load_flags()
    problems: list[str] = []
    seen: dict[str, int] = {}
    for flag, values in split_argv(argv):
        if not flag:
            problems.append(f"value(s) {values} before any flag")
            continue
        spec = table.get(flag)
        if spec is None:
            problems.append(f"unknown flag {flag} (not in the pinned slime/Megatron/SGLang flag table)")
            continue
        seen[flag] = seen.get(flag, 0) + 1
        if seen[flag] == 2 and spec.action != "append":
            problems.append(f"{flag} given more than once (argparse keeps only the last)")
        why = check_values(spec, values)
        if why:
            problems.append(why)
    return problems


def parse_namespace(argv: list[str]) -> dict[str, Any]:
    """Return ``{dest: value}`` for an argv the way argparse would set it (after :func:`check_argv` passes).

    Values are converted for int/float types; store_true/false give booleans; list-valued flags give
    lists. Defaults of absent flags are not filled in: callers use :func:`load_flags` for those.
    """
    table = load_flags()
    out: dict[str, Any] = {}
    for flag, values in split_argv(argv):
        spec = table.get(flag)
        if spec is None:
            continue
        if spec.action == "store_false":
            out[spec.dest] = False
            continue
        if spec.action == "boolean_optional":
            out[spec.dest] = not flag.startswith("--no-")
            continue
        if not spec.takes_value:
            out[spec.dest] = True
            continue
        conv = {"int": int, "float": float}.get(spec.value_type or "", str)
        vals = [conv(v) for v in values]
        if spec.action == "append":
            out.setdefault(spec.dest, []).append(vals[0] if spec.nargs is None else vals)
        else:
            out[spec.dest] = vals if spec.nargs not in (None, "?") else (vals[0] if vals else None)
    return out
