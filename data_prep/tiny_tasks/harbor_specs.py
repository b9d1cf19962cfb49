"""The tiny terminal tasks of the ``terminal_agent`` family: one short instruction, one short command each.

:mod:`data_prep.harbor_generate` writes and checks Harbor task folders; its own task kinds are written for
people (fixed instructions, ``sed`` fixes up to ~55 tokens). The micro policy answers in 48 tokens per call,
24 of which the tool-call markup takes, and the held-out screens drop a train task whose instruction shares
an 8-word phrase with a held-out one. So the tasks here name their files and values in the instruction
(``Sort cat.txt into dog.txt.``), every 8-word window of an instruction holds an instance's names, and the
reference is one command of at most ~22 micro tokens. Same four kinds as the issue asks: ``text``
(coreutils), ``python`` (a crashing script to fix), ``config`` (a JSON or INI file to repair), ``tests``
(make a unittest suite pass). :func:`make_task` is ``harbor_generate.generate``'s ``make`` hook.

Variants are taken in turn (``index % len(VARIANTS)``); an instance's file names come from a seeded
permutation of the name pairs of its variant (``index // len(VARIANTS)``-th), so no two tasks of a root
share an instruction.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable

from data_prep.harbor_generate import (
    Spec,
    TinyTask,
    _ini_equals,
    _json_equals,
    _lines,
    _output,
    _py,
    _same_lines,
)

# One micro-tokenizer token each, and no stdlib module name (a test module named time.py breaks unittest).
STEMS = (
    "apple banana water book table chair house car road tree river mountain sun moon star cat dog bird "
    "city letter model user word day weather name"
).split()
FILL = ["red", "blue", "green", "gold", "pink", "gray"]
ITEMS = ["apple", "bean", "milk", "rice", "salt", "tea", "egg", "fish", "corn", "jam"]


def _runs(script: str) -> str:
    """A graded check of its own (partial credit): the script exits 0, whatever it prints."""
    return f"python3 {script} >/dev/null 2>&1"


def _parses(path: str) -> str:
    """A graded check of its own (partial credit), or a guard when the file parses from the start."""
    if path.endswith(".json"):
        return _py(f"import json\njson.load(open({path!r}))")
    return _py(f"import configparser\nconfigparser.ConfigParser().read_file(open({path!r}))")


def _pair(rng: random.Random, k: int) -> tuple[str, str]:
    pairs = [(a, b) for a in STEMS for b in STEMS if a != b]
    rng.shuffle(pairs)
    return pairs[k % len(pairs)]


def _stem(rng: random.Random, k: int) -> str:
    stems = list(STEMS)
    rng.shuffle(stems)
    return stems[k % len(stems)]


# --- text: coreutils ------------------------------------------------------------------------------------
def _text(variant: str, names: random.Random, rng: random.Random, k: int) -> Spec:
    a, b = _pair(names, k)
    src, out = f"{a}.txt", f"{b}.txt"
    words = rng.sample(ITEMS, 6)
    if variant == "sort":
        return Spec(
            f"Sort {src} into {out}.",
            {src: _lines(words)},
            [f"sort {src} > {out}"],
            [_same_lines(out, sorted(words))],
        )
    if variant == "uniq":
        colors = [rng.choice(FILL[:4]) for _ in range(7)]
        return Spec(
            f"Sort {src} without duplicates into {out}.",
            {src: _lines(colors)},
            [f"sort -u {src} > {out}"],
            [_same_lines(out, sorted(set(colors)))],
        )
    if variant == "count":
        rows = words[: rng.randint(2, 6)]
        return Spec(
            f"Write the line count of {src} to {out}.",
            {src: _lines(rows)},
            [f"wc -l < {src} > {out}"],
            [f"[ \"$(tr -d '[:space:]' < {out})\" = {len(rows)} ]"],
        )
    if variant == "grep":
        color = rng.choice(FILL)
        rows = [f"{rng.choice(FILL)} {w}" for w in words]
        rows[rng.randrange(len(rows))] = f"{color} {rng.choice(ITEMS)}"
        hits = [r for r in rows if color in r]  # what grep matches
        return Spec(
            f"Copy the lines of {src} with {color} to {out}.",
            {src: _lines(rows)},
            [f"grep {color} {src} > {out}"],
            [_same_lines(out, hits)],
        )
    if variant == "upper":
        return Spec(
            f"Write {src} in upper case to {out}.",
            {src: _lines(words[:4])},
            [f"tr a-z A-Z < {src} > {out}"],
            [_same_lines(out, [w.upper() for w in words[:4]])],
        )
    if variant in ("head", "tail"):
        n = rng.randint(2, 4)
        part = words[:n] if variant == "head" else words[-n:]
        where = "top" if variant == "head" else "last"
        return Spec(
            f"Copy {where} {n} lines of {src} to {out}.",
            {src: _lines(words)},
            [f"{variant} -n {n} {src} > {out}"],
            [_same_lines(out, part)],
        )
    return Spec(
        f"Move {src} into a new folder {b}.",
        {src: _lines(words[:3])},
        [f"mkdir {b} && mv {src} {b}/"],
        # one check: "the source is gone" alone would give partial credit for deleting everything
        [f"[ ! -e {src} ] && " + _same_lines(f"{b}/{src}", words[:3])],
    )


# --- python: a crashing script ----------------------------------------------------------------------------
def _import_line(mod: str, rng: random.Random) -> tuple[str, str]:
    """A one-line script using module ``mod`` and what it prints."""
    if mod == "math":
        root = rng.randint(3, 12)
        return f"print(math.isqrt({root * root}))", str(root)
    if mod == "json":
        xs = rng.sample(range(1, 9), 3)
        return f"print(json.dumps({xs}))", json.dumps(xs)
    i = rng.randint(0, 25)
    return f"print(string.ascii_lowercase[{i}])", "abcdefghijklmnopqrstuvwxyz"[i]


def _python(variant: str, names: random.Random, rng: random.Random, k: int) -> Spec:
    script = f"{_stem(names, k)}.py"
    if variant == "name":
        good = rng.choice(["total", "count", "score", "result", "amount"])
        bad = good[:-2] + good[-1] + good[-2]  # the last two letters swapped: never a substring of good
        nums = rng.sample(range(1, 20), 3)
        code = f"{good} = 0\nfor n in {nums}:\n    {good} += n\nprint({bad})\n"
        return Spec(
            f"python3 {script} fails: rename {bad} to {good}.",
            {script: code},
            [f"sed -i s/{bad}/{good}/ {script}"],
            [_runs(script), _output(script, str(sum(nums))), f"grep -qF 'for n in {nums}:' {script}"],
        )
    if variant == "import":
        mod = rng.choice(["math", "json", "string"])
        line, expected = _import_line(mod, rng)
        return Spec(
            f"python3 {script} fails: add import {mod} at the top.",
            {script: line + "\n"},
            [f"sed -i '1i import {mod}' {script}"],
            [_runs(script), _output(script, expected), f"grep -qF '{line}' {script}"],
        )
    total, n = rng.randint(20, 99), rng.randint(2, 9)
    return Spec(
        f"Set n to {n} in {script}: it divides by zero.",
        {script: f"total = {total}\nn = 0\nprint(total // n)\n"},
        [f"sed -i 's/n = 0/n = {n}/' {script}"],
        [_runs(script), _output(script, str(total // n)), f"grep -qxF 'total = {total}' {script}"],
    )


# --- config: JSON / INI repair ----------------------------------------------------------------------------
def _unique_number(rng: random.Random, text: str, low: int, high: int) -> int:
    """A number in [low, high] that occurs nowhere in ``text`` (so ``sed s/old/new/`` touches one place)."""
    while True:
        value = rng.randint(low, high)
        if str(value) not in text:
            return value


def _config(variant: str, names: random.Random, rng: random.Random, k: int) -> Spec:
    stem = _stem(names, k)
    port = rng.choice([8000, 8080, 5000, 3000])
    workers = _unique_number(rng, str(port), 11, 64)  # each value occurs once: sed s/old/new/ is exact
    cfg = {"name": rng.choice(ITEMS), "port": port, "workers": workers}
    text = json.dumps(cfg)
    if variant == "json-comma":
        path = f"{stem}.json"
        return Spec(
            f"Remove the trailing comma in {path}.",
            {path: text[:-1] + ",}\n"},
            [f"sed -i 's/,}}/}}/' {path}"],
            [_parses(path), _json_equals(path, cfg)],
        )
    if variant == "json-quote":
        path, key = f"{stem}.json", rng.choice(["name", "port"])  # "workers" makes a 26-token command
        return Spec(
            f"Quote the {key} key in {path}.",
            {path: text.replace(f'"{key}"', key) + "\n"},
            [f"sed -i 's/{key}:/\"{key}\":/' {path}"],
            [_parses(path), _json_equals(path, cfg)],
        )
    section = {"host": "localhost", "port": str(port), "workers": str(workers)}
    body = "".join(f"{key} = {value}\n" for key, value in section.items())
    if variant == "ini-header":
        path, name = f"{stem}.ini", rng.choice(["server", "app", "main", "web"])
        return Spec(
            f"Add the [{name}] header to {path} as line 1.",
            {path: body},
            [f"sed -i '1i [{name}]' {path}"],
            [_parses(path), _ini_equals(path, {name: section})],
        )
    key = rng.choice(["port", "workers"])
    old = cfg[key]
    if variant == "json-value":
        path = f"{stem}.json"
        new = _unique_number(rng, text, 1000, 9999) if key == "port" else _unique_number(rng, text, 10, 99)
        return Spec(
            f"In {path} change {key} {old} to {new}.",
            {path: text + "\n"},
            [f"sed -i s/{old}/{new}/ {path}"],
            [_parses(path), _json_equals(path, {**cfg, key: new})],
        )
    path = f"{stem}.ini"
    new = _unique_number(rng, body, 1000, 9999) if key == "port" else _unique_number(rng, body, 10, 99)
    return Spec(
        f"In {path} change {key} {old} to {new}.",
        {path: "[server]\n" + body},
        [f"sed -i s/{old}/{new}/ {path}"],
        [_parses(path), _ini_equals(path, {"server": {**section, key: str(new)}})],
    )


# --- tests: make a unittest suite pass -------------------------------------------------------------------
# name -> (arguments, good body, buggy body, the fix's sed expression, the instruction's hint, a test)
_FUNCS: dict[str, tuple[str, str, str, str, str, Callable[[random.Random], str]]] = {
    "add": (
        "a, b",
        "a + b",
        "a - b",
        "s/-/+/",
        "use + not -",
        lambda r: (lambda a, b: f"self.assertEqual(add({a}, {b}), {a + b})")(
            r.randint(1, 9), r.randint(1, 9)
        ),
    ),
    "is_even": (
        "n",
        "n % 2 == 0",
        "n % 2 == 1",
        "'s/== 1/== 0/'",
        "compare with 0 not 1",
        lambda r: f"self.assertTrue(is_even({2 * r.randint(1, 20)}))",
    ),
    "biggest": (
        "xs",
        "max(xs)",
        "min(xs)",
        "s/min/max/",
        "use max not min",
        lambda r: (lambda xs: f"self.assertEqual(biggest({xs}), {max(xs)})")(r.sample(range(1, 50), 3)),
    ),
    "square": (
        "x",
        "x * x",
        "x + x",
        "'s/x + x/x * x/'",
        "use x * x not x + x",
        lambda r: (lambda x: f"self.assertEqual(square({x}), {x * x})")(r.randint(3, 9)),
    ),
}


def _tests(variant: str, names: random.Random, rng: random.Random, k: int) -> Spec:
    mod = _stem(names, k)
    _, _, bad, fix, hint, _ = _FUNCS[variant]
    # no other function's text holds what the fix replaces, so the one-line fix touches only the bug
    funcs = [variant, *rng.sample([f for f in sorted(_FUNCS) if f != variant], 2)]
    rng.shuffle(funcs)
    lib = "\n\n".join(
        f"def {f}({_FUNCS[f][0]}):\n    return {bad if f == variant else _FUNCS[f][1]}\n" for f in funcs
    )
    cases = "\n".join(f"    def test_{f}(self):\n        {_FUNCS[f][5](rng)}\n" for f in funcs)
    head = f"import unittest\n\nfrom {mod} import {', '.join(funcs)}\n\n\n"
    test = head + f"class TestLib(unittest.TestCase):\n{cases}"
    digest = hashlib.sha256(test.encode()).hexdigest()
    return Spec(
        f"Fix {variant} in {mod}.py: {hint}.",
        {f"{mod}.py": lib, f"test_{mod}.py": test},
        [f"sed -i {fix} {mod}.py"],
        [f"echo '{digest}  test_{mod}.py' | sha256sum -c --status -", f"python3 -m unittest -q test_{mod}"],
    )


BUILDERS: dict[str, Callable[[str, random.Random, random.Random, int], Spec]] = {
    "text": _text,
    "python": _python,
    "config": _config,
    "tests": _tests,
}
#: (kind, variant) in the order tasks take them.
VARIANTS: tuple[tuple[str, str], ...] = (
    *(("text", v) for v in ("sort", "uniq", "count", "grep", "upper", "head", "tail", "move")),
    *(("python", v) for v in ("name", "import", "zero")),
    *(("config", v) for v in ("json-comma", "json-quote", "json-value", "ini-header", "ini-value")),
    *(("tests", v) for v in sorted(_FUNCS)),
)


def variant_of(index: int) -> tuple[str, str]:
    """Return the (kind, variant) of task ``index``."""
    return VARIANTS[index % len(VARIANTS)]


def instance_of(index: int) -> int:
    """Return which instance of its variant task ``index`` is (0, 1, ...)."""
    return index // len(VARIANTS)


def make_task(seed: int, index: int) -> TinyTask:
    """Return task ``index`` of ``seed`` (the ``make`` hook of :func:`data_prep.harbor_generate.generate`)."""
    kind, variant = variant_of(index)
    names = random.Random(f"harbor-tiny-names:{seed}:{kind}:{variant}")
    rng = random.Random(f"harbor-tiny:{seed}:{index}")
    return TinyTask(kind, variant, BUILDERS[kind](variant, names, rng, instance_of(index)))
