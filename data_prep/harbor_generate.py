"""Offline generator of tiny terminal tasks in Harbor format (stage 05 at the embedded scale).

``python -m data_prep.harbor_generate --out DIR [--seed S] [--n N]`` writes N task dirs, each in Harbor's
layout (see :mod:`infra.agents.harbor.task`): ``instruction.md``, ``task.toml`` (schema 1.4, no network),
``environment/Dockerfile`` + ``environment/files/`` (the starting ``/app``), ``tests/test.sh`` (checks the
final ``/app`` with coreutils and python3, writes 1, 0 or a partial score to ``/logs/verifier/reward.txt``
(:func:`data_prep.harbor_verifier.test_sh`), downloads nothing)
and ``solution/solve.sh`` (one or two commands). The Dockerfile is documentary (``FROM python:3.11-slim``
plus a COPY of the files): the local runtime reproduces it from the files and the host's tools.

Four kinds, taken in turn: ``text`` (coreutils file manipulation), ``python`` (a crashing script to fix),
``config`` (a JSON or INI file to repair), ``tests`` (make a small unittest suite pass). Instructions stay
under ~40 words, for a ~1M-parameter policy. Output is a function of ``seed`` and the index only; every task
is reloaded through the Harbor loader before the command returns.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_prep.harbor_verifier import initial_passes, test_sh
from infra.agents.harbor.task import HARBOR_SCHEMA_VERSION, load_task, structural_problems

NAMES = [
    "ada",
    "bob",
    "cara",
    "dan",
    "eve",
    "finn",
    "gus",
    "hana",
    "ivan",
    "jo",
    "kai",
    "lena",
    "milo",
    "nia",
]
WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "amber", "delta", "frost"]
COLORS = ["red", "blue", "green", "teal", "gold", "pink"]


@dataclass(frozen=True)
class Spec:
    """A task's content: the starting workspace (paths relative to /app) and bash checks of its end state."""

    instruction: str
    files: dict[str, str]
    solution: list[str]  # shell commands run in /app
    checks: list[str]  # bash commands that must all succeed in /app after the agent


@dataclass(frozen=True)
class TinyTask:
    """One generated task before it is written."""

    kind: str
    variant: str
    spec: Spec


def _lines(values: list[str]) -> str:
    return "".join(f"{v}\n" for v in values)


def _same_lines(path: str, values: list[str]) -> str:
    """``path`` holds exactly these lines; a missing final newline is accepted (an equally correct answer)."""
    expected = " ".join(shlex.quote(v) for v in values)
    return f"[ -f {path} ] && printf '%s\\n' {expected} | cmp -s - <(sed -e '$a\\' {path})"


def _py(code: str) -> str:
    return f"python3 - <<'PY'\n{code.strip()}\nPY"


def _output(script: str, expected: str) -> str:
    return f'[ "$(python3 {script} 2>/dev/null)" = {shlex.quote(expected)} ]'


# --- text: coreutils ------------------------------------------------------------------------------------
def _text(rng: random.Random, variant: str) -> Spec:
    names = rng.sample(NAMES, 5)
    if variant == "sort":
        return Spec(
            "Sort the lines of names.txt alphabetically and save them as sorted.txt.",
            {"names.txt": _lines(names)},
            ["sort names.txt > sorted.txt"],
            [_same_lines("sorted.txt", sorted(names))],
        )
    if variant == "count":
        rows = [" ".join(rng.sample(WORDS, 2)) for _ in range(rng.randint(3, 9))]
        return Spec(
            "Write the number of lines in log.txt to count.txt.",
            {"log.txt": _lines(rows)},
            ["wc -l < log.txt > count.txt"],
            [f"[ \"$(tr -d '[:space:]' < count.txt)\" = {len(rows)} ]"],
        )
    if variant == "grep":
        rows = [f"{rng.choice(['INFO', 'INFO', 'ERROR'])} {rng.choice(WORDS)}" for _ in range(6)]
        rows[rng.randrange(6)] = f"ERROR {rng.choice(WORDS)}"
        return Spec(
            "Save the lines of app.log that contain ERROR to errors.txt.",
            {"app.log": _lines(rows)},
            ["grep ERROR app.log > errors.txt"],
            [_same_lines("errors.txt", [r for r in rows if "ERROR" in r])],
        )
    if variant == "cut":
        scores = [str(rng.randint(10, 99)) for _ in names]
        return Spec(
            "scores.csv has name,score rows. Write only the scores, one per line, to scores.txt.",
            {"scores.csv": _lines([f"{n},{s}" for n, s in zip(names, scores, strict=True)])},
            ["cut -d, -f2 scores.csv > scores.txt"],
            [_same_lines("scores.txt", scores)],
        )
    if variant == "upper":
        words = rng.sample(WORDS, 4)
        return Spec(
            "Convert words.txt to upper case and save it as upper.txt.",
            {"words.txt": _lines(words)},
            ["tr a-z A-Z < words.txt > upper.txt"],
            [_same_lines("upper.txt", [w.upper() for w in words])],
        )
    if variant == "move":
        body = rng.sample(WORDS, 3)
        return Spec(
            "Create a directory named archive and move report.txt into it.",
            {"report.txt": _lines(body)},
            ["mkdir archive && mv report.txt archive/"],
            ["[ ! -e report.txt ] && " + _same_lines("archive/report.txt", body)],  # no credit for deleting
        )
    colors = [rng.choice(COLORS) for _ in range(7)]
    return Spec(
        "Save the distinct lines of colors.txt, sorted, to unique.txt.",
        {"colors.txt": _lines(colors)},
        ["sort -u colors.txt > unique.txt"],
        [_same_lines("unique.txt", sorted(set(colors)))],
    )


# --- python: a crashing script ----------------------------------------------------------------------------
def _python(rng: random.Random, variant: str) -> Spec:
    if variant == "name":
        nums = rng.sample(range(1, 20), 3)
        code = f"nums = {nums}\ntotal = 0\nfor n in nums:\n    total += n\nprint(totl)\n"
        return Spec(
            "python3 sum.py crashes with a NameError. Fix the typo so it prints the sum of nums.",
            {"sum.py": code},
            ["sed -i 's/print(totl)/print(total)/' sum.py"],
            [_output("sum.py", str(sum(nums))), f"grep -qF {shlex.quote(f'nums = {nums}')} sum.py"],
        )
    if variant == "import":
        root = rng.randint(3, 12)
        code = f"value = {root * root}\nprint(math.isqrt(value))\n"
        return Spec(
            "python3 root.py fails because a module is not imported. Fix it.",
            {"root.py": code},
            ["sed -i '1i import math' root.py"],
            [_output("root.py", str(root)), f"grep -qF 'value = {root * root}' root.py"],
        )
    if variant == "type":
        count = rng.randint(2, 30)
        code = f'count = {count}\nprint("items: " + count)\n'
        return Spec(
            f"python3 report.py raises a TypeError. Fix it so it prints items: {count}",
            {"report.py": code},
            ["sed -i 's/+ count)/+ str(count))/' report.py"],
            [_output("report.py", f"items: {count}"), f"grep -qF 'count = {count}' report.py"],
        )
    a, b = rng.sample(NAMES, 2)
    ages = {a: rng.randint(20, 60), b: rng.randint(20, 60)}
    typo = b[::-1] if b[::-1] != b else b + "x"
    code = f"ages = {json.dumps(ages)}\nprint(ages[{a!r}] + ages[{typo!r}])\n"
    return Spec(
        f"python3 ages.py fails with a KeyError. Fix the misspelled key so it "
        f"prints the sum of the ages of {a} and {b}.",
        {"ages.py": code},
        [f"sed -i \"s/'{typo}'/'{b}'/\" ages.py"],
        [_output("ages.py", str(sum(ages.values())))],
    )


# --- config: JSON / INI repair ----------------------------------------------------------------------------
def _json_equals(path: str, expected: dict) -> str:
    return _py(
        f"import json, sys\nsys.exit(json.load(open({path!r})) != json.loads({json.dumps(expected)!r}))"
    )


def _ini_equals(path: str, expected: dict[str, dict[str, str]]) -> str:
    return _py(
        f"import configparser, json, sys\nc = configparser.ConfigParser()\nc.read_file(open({path!r}))\n"
        f"sys.exit({{s: dict(c[s]) for s in c.sections()}} != json.loads({json.dumps(expected)!r}))"
    )


def _config(rng: random.Random, variant: str) -> Spec:
    name, port, new_port = rng.choice(WORDS), rng.choice([80, 8000, 8080]), rng.choice([8081, 9090, 5000])
    cfg = {"name": name, "port": port, "debug": rng.choice([True, False])}
    text = json.dumps(cfg)
    if variant == "json-comma":
        return Spec(
            "config.json is not valid JSON because of a trailing comma. Fix it without changing any value.",
            {"config.json": text[:-1] + ",}\n"},
            ["sed -i 's/,}/}/' config.json"],
            [_json_equals("config.json", cfg)],
        )
    if variant == "json-value":
        return Spec(
            f"Set port to {new_port} in config.json. Keep the other keys.",
            {"config.json": text + "\n"},
            [f'sed -i \'s/"port": {port}/"port": {new_port}/\' config.json'],
            [_json_equals("config.json", {**cfg, "port": new_port})],
        )
    if variant == "json-quote":
        return Spec(
            "config.json is invalid: the port key has no quotes. Fix it.",
            {"config.json": text.replace('"port"', "port") + "\n"},
            ["sed -i 's/ port:/ \"port\":/' config.json"],
            [_json_equals("config.json", cfg)],
        )
    section = {"host": "localhost", "port": str(port), "workers": str(rng.randint(1, 8))}
    body = "".join(f"{k} = {v}\n" for k, v in section.items())
    if variant == "ini-value":
        return Spec(
            f"In settings.ini, set port in the [server] section to {new_port}.",
            {"settings.ini": "[server]\n" + body},
            [f"sed -i 's/^port = .*/port = {new_port}/' settings.ini"],
            [_ini_equals("settings.ini", {"server": {**section, "port": str(new_port)}})],
        )
    return Spec(
        "settings.ini is missing its section header. Add [server] as its first line.",
        {"settings.ini": body},
        ["sed -i '1i [server]' settings.ini"],
        [_ini_equals("settings.ini", {"server": section})],
    )


# --- tests: make a unittest suite pass -------------------------------------------------------------------
# name -> (good body, buggy body, sed fixing the bug, test builder)
_FUNCS: dict[str, tuple[str, str, str, Callable[[random.Random], str]]] = {
    "add": (
        "return a + b",
        "return a - b",
        "s/a - b/a + b/",
        lambda r: (lambda a, b: f"self.assertEqual(add({a}, {b}), {a + b})")(
            r.randint(1, 9), r.randint(1, 9)
        ),
    ),
    "is_even": (
        "return n % 2 == 0",
        "return n % 2 == 1",
        "s/== 1/== 0/",
        lambda r: f"self.assertTrue(is_even({2 * r.randint(1, 20)}))",
    ),
    "last": (
        "return xs[-1]",
        "return xs[0]",
        "s/xs\\[0\\]/xs[-1]/",
        lambda r: (lambda xs: f"self.assertEqual(last({xs}), {xs[-1]})")(r.sample(range(1, 50), 3)),
    ),
    "biggest": (
        "return max(xs)",
        "return min(xs)",
        "s/min(xs)/max(xs)/",
        lambda r: (lambda xs: f"self.assertEqual(biggest({xs}), {max(xs)})")(r.sample(range(1, 50), 3)),
    ),
}
_ARGS = {"add": "a, b", "is_even": "n", "last": "xs", "biggest": "xs"}


def _tests(rng: random.Random, buggy: str) -> Spec:
    funcs = [buggy, *rng.sample(sorted(set(_FUNCS) - {buggy}), 2)]
    rng.shuffle(funcs)
    lib = "".join(f"def {f}({_ARGS[f]}):\n    {_FUNCS[f][1 if f == buggy else 0]}\n\n\n" for f in funcs)
    cases = "".join(f"    def test_{f}(self):\n        {_FUNCS[f][3](rng)}\n\n" for f in funcs)
    head = f"import unittest\n\nfrom mathlib import {', '.join(funcs)}\n\n\n"
    test = head + "class TestMathlib(unittest.TestCase):\n" + cases.rstrip() + "\n"
    digest = hashlib.sha256(test.encode()).hexdigest()
    return Spec(
        "Fix mathlib.py so that python3 -m unittest test_mathlib passes. Do not edit test_mathlib.py.",
        {"mathlib.py": lib.rstrip() + "\n", "test_mathlib.py": test},
        [f"sed -i '{_FUNCS[buggy][2]}' mathlib.py"],
        [
            f"echo '{digest}  test_mathlib.py' | sha256sum -c --status -",
            "python3 -m unittest -q test_mathlib",
        ],
    )


# kind -> (builder, variants); the variant of a `tests` task is the function carrying the bug.
KINDS: dict[str, tuple[Callable[[random.Random, str], Spec], list[str]]] = {
    "text": (_text, ["sort", "count", "grep", "cut", "upper", "move", "uniq"]),
    "python": (_python, ["name", "import", "type", "key"]),
    "config": (_config, ["json-comma", "json-value", "json-quote", "ini-value", "ini-header"]),
    "tests": (_tests, sorted(_FUNCS)),
}


def make_task(seed: int, index: int) -> TinyTask:
    """Return task ``index`` of ``seed``: kinds in turn, the variant and data drawn from (seed, index)."""
    kind = list(KINDS)[index % len(KINDS)]
    build, variants = KINDS[kind]
    rng = random.Random(f"harbor-tiny:{seed}:{index}")
    variant = rng.choice(variants)
    return TinyTask(kind, variant, build(rng, variant))


def _task_toml(name: str, task: TinyTask, seed: int, index: int) -> str:
    return f"""schema_version = "{HARBOR_SCHEMA_VERSION}"

[task]
name = "rufus-tiny/{name}"
description = {json.dumps(f"Tiny offline terminal task: {task.kind} ({task.variant}).")}
keywords = ["tiny", "offline", "{task.kind}"]

[metadata]
generator = "data_prep.harbor_generate"
seed = {seed}
index = {index}
kind = "{task.kind}"
variant = "{task.variant}"
difficulty = "easy"

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 512
storage_mb = 64
network_mode = "no-network"
workdir = "/app"
"""


_DOCKERFILE = """# Documentary: the local runtime copies files/ onto the host's coreutils and python3 instead.
FROM python:3.11-slim
WORKDIR /app
COPY files/ /app/
"""


def write_task(task_dir: Path, task: TinyTask, seed: int, index: int) -> None:
    """Write ``task`` as a Harbor task dir (replacing ``task_dir``)."""
    guards = initial_passes(task.spec.files, task.spec.checks)
    if task_dir.exists():
        shutil.rmtree(task_dir)
    files = {
        "instruction.md": task.spec.instruction + "\n",
        "task.toml": _task_toml(task_dir.name, task, seed, index),
        "environment/Dockerfile": _DOCKERFILE,
        "tests/test.sh": test_sh(task_dir.name, task.spec.checks, guards),
        "solution/solve.sh": "#!/bin/bash\n# Reference solution; runs in the working directory (/app).\n"
        + "".join(f"{c}\n" for c in task.spec.solution),
        **{f"environment/files/{rel}": text for rel, text in task.spec.files.items()},
    }
    for rel, text in files.items():
        path = task_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.suffix == ".sh":
            path.chmod(0o755)


def generate(
    out: Path, seed: int = 0, n: int = 32, make: Callable[[int, int], TinyTask] = make_task
) -> list[str]:
    """Write ``n`` tasks under ``out`` and reload each through the Harbor loader; return their names.

    ``out`` must be new, empty or hold only these tasks (a rerun), so no stale task from another run mixes in.
    ``make(seed, index)`` builds each task (another task set, e.g. ``data_prep.tiny_tasks.harbor_specs``).
    """
    tasks = [make(seed, index) for index in range(n)]
    names = [f"{task.kind}-{task.variant}-{index:04d}" for index, task in enumerate(tasks)]
    stale = sorted(p.name for p in out.iterdir() if p.name not in names) if out.is_dir() else []
    if stale:
        shown = ", ".join(stale[:3])
        raise FileExistsError(f"{out}: holds entries this run would not write ({shown}); use an empty --out")
    for index, (task, name) in enumerate(zip(tasks, names, strict=True)):
        write_task(out / name, task, seed, index)
        loaded = load_task(out / name)
        if shutil.which("bash"):  # parse only (-n): nothing runs
            for script in (loaded.test_script, loaded.solution_script):
                subprocess.run(["bash", "-n", str(script)], check=True, capture_output=True, timeout=30)
        problems = structural_problems(loaded) + ([] if loaded.environment.files_only else ["not files-only"])
        if problems:
            raise RuntimeError(f"{out / name}: generated task fails the structural filter: {problems}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the task dirs into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=32, help="number of tasks")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    try:
        names = generate(args.out, args.seed, args.n)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(names)} Harbor tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
