"""FireFlash's nine task-validation gates for Harbor tasks (``rufus validate-tasks``, issue 20).

FireFlash admits a new terminal task to its training pool only after nine checks: most tasks a model never
solves turned out broken, not hard. ``validate_task(task, GateOptions()) -> TaskReport`` runs them on one
task in the training sandbox (:mod:`infra.agents.harbor.gates_sandbox`); each gate is ``pass``, ``fail``
or ``skipped`` (could not be checked: never a pass) with one line of evidence. Hand-written: the paper
describes the gates, not code, and Harbor ships no validator. On a task the local runtime cannot run,
gate 1 fails, gates 2, 3 and 5 do their static parts and the rest are skipped.

1. ``reference_passes``: solution/solve.sh, run from ``/app`` in a fresh sandbox, then the tests: reward 1.
2. ``requirements_stated``: an LLM judge lists requirements the tests grade that the instruction does not
   state, quoting the tests (:mod:`infra.agents.harbor.gates_judge`); skipped without a judge.
3. ``offline``: ``network_mode = "no-network"`` in task.toml, no download command (curl, wget, pip install,
   git clone, apt …) on a non-comment line under tests/ or solution/, and the reference passes in the
   sandbox, which has no network (skipped when it does not: gate 1).
4. ``boots_reliably``: ``--boots`` sandboxes boot and run ``true``, and so did every sandbox the other
   gates booted.
5. ``no_answer_leak``: no file under environment/, and, inside a sandbox as the agent, no readable file
   (host system and interpreter directories aside) holds a whole tests/ or solution/ file, a solve.sh
   command line (>= 12 characters) or a test.sh line (>= 24, reward bookkeeping aside); ``/tests``,
   ``/solution`` and the task's host paths do not exist in the sandbox.
6. ``do_nothing_scores_zero``: the tests on the untouched ``/app`` write a raw reward of 0.
7. ``accepts_alternatives`` and 8. ``malformed_output_safe``: :mod:`infra.agents.harbor.gates_mutations`.
9. ``deterministic``: the reference state verified ``--repeats`` times (fresh sandboxes) gives one raw
   reward (compared before binarising, as partial credit would be).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor.gates_judge import requirements_stated
from infra.agents.harbor.gates_mutations import alternatives, malformed, passes
from infra.agents.harbor.gates_sandbox import (
    BootFailure,
    Status,
    TaskSandbox,
    describe,
    describe_command,
    raw_reward,
    rel_path,
    text_files,
)
from infra.agents.harbor.local_runtime import RuntimeOptions
from infra.agents.harbor.task import HarborTask

GATES: dict[int, tuple[str, str]] = {
    1: ("reference_passes", "the reference solution passes in the training sandbox"),
    2: ("requirements_stated", "every graded requirement is stated in the instruction"),
    3: ("offline", "runs offline"),
    4: ("boots_reliably", "starts reliably"),
    5: ("no_answer_leak", "leaks no answer"),
    6: ("do_nothing_scores_zero", "a do-nothing attempt scores 0"),
    7: ("accepts_alternatives", "tests accept alternative correct solutions"),
    8: ("malformed_output_safe", "malformed outputs never crash the grader"),
    9: ("deterministic", "scoring is deterministic"),
}
FETCH = re.compile(
    r"\b(curl|wget|git\s+clone|pip3?\s+install|python3?\s+-m\s+pip\s+install|uvx|uv\s+(pip\s+install|add|"
    r"sync|tool\s+install|run\s+--with)|apt(-get)?\s+(install|update)|apk\s+add|npm\s+(install|i|ci)|"
    r"yarn\s+add|conda\s+install|go\s+(get|install)|cargo\s+install|gem\s+install)\b"
)


class GateOptions(BaseModel):
    """How hard the gates look; defaults are the training runtime's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    boots: int = Field(3, ge=1, description="Sandboxes gate 4 boots.")
    repeats: int = Field(3, ge=2, description="Verifications of the reference state gate 9 compares.")
    workspace_mb: int = Field(RuntimeOptions.workspace_mb, ge=1, description="Size of the /app tmpfs.")
    verifier_timeout_s: float = Field(RuntimeOptions.verifier_timeout, gt=0, description="Cap on test.sh.")
    solution_timeout_s: float = Field(600.0, gt=0, description="Cap on one solve.sh run.")
    gates: tuple[int, ...] = Field(tuple(GATES), description="Gates to run; the others are skipped.")

    @field_validator("gates")
    @classmethod
    def _known(cls, gates: tuple[int, ...]) -> tuple[int, ...]:
        unknown = sorted(set(gates) - set(GATES))
        if unknown:
            raise ValueError(f"unknown gate numbers {unknown}: gates are 1 to {len(GATES)}")
        return tuple(sorted(set(gates)))


class GateResult(BaseModel):
    """One gate's outcome on one task."""

    model_config = ConfigDict(extra="forbid")
    gate: int
    name: str
    status: Status
    evidence: str
    seconds: float = 0.0


class TaskReport(BaseModel):
    """Every gate's outcome on one task; ``ok`` when none failed."""

    model_config = ConfigDict(extra="forbid")
    task: str
    task_dir: str
    ok: bool
    gates: list[GateResult]


def command_lines(script: str, min_chars: int) -> list[str]:
    """The stripped lines of ``script`` that are neither blank nor comments, of ``min_chars`` or more."""
    lines = (line.strip() for line in script.splitlines())
    return [line for line in lines if len(line) >= min_chars and not line.startswith("#")]


# ---- gate 3: offline ------------------------------------------------------------------------------------
def network_settings(task: HarborTask) -> list[str]:
    """The task.toml network settings that allow the network."""
    problems = []
    if task.environment.network_mode != "no-network":
        set_ = "network_mode" in task.config.get("environment", {}) or "allow_internet" in task.config.get(
            "environment", {}
        )
        default = "" if set_ else " (Harbor's default when unset)"
        problems.append(f'task.toml [environment].network_mode is "{task.environment.network_mode}"{default}')
    for table in ("agent", "verifier"):
        mode = task.config.get(table, {}).get("network_mode")
        if mode not in (None, "no-network"):
            problems.append(f'task.toml [{table}].network_mode is "{mode}"')
    return problems


def fetch_commands(task: HarborTask) -> list[str]:
    """``file:line: text`` of each non-comment line under tests/ and solution/ that downloads something."""
    hits = []
    for path in text_files(task.tests_dir, task.solution_dir):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.lstrip().startswith("#") and FETCH.search(line):
                hits.append(f"{rel_path(task, path)}:{n}: {line.strip()[:120]}")
    return hits


def offline(box: TaskSandbox) -> tuple[Status, str]:
    """Gate 3: no network in task.toml, no downloads, and the reference passes in the offline sandbox."""
    problems = network_settings(box.task) + [f"downloads: {hit}" for hit in fetch_commands(box.task)]
    if problems:
        return "fail", "; ".join(problems)
    static = 'network_mode "no-network", no download command in tests/ or solution/'
    if box.rt is None or box.task.solution_script is None:
        why = box.problem and f"the task cannot run in the sandbox ({box.problem})" or "there is no solve.sh"
        return "skipped", f"{static}; not run offline: {why}"
    ref = box.reference()
    if not passes(ref.reward):
        return "skipped", f"{static}; the reference fails in the offline sandbox too (gate 1): unconfirmed"
    return "pass", f"{static}; the reference passes in the sandbox, which has no network"


# ---- gate 5: no answer leak -----------------------------------------------------------------------------
def leak_needles(task: HarborTask) -> list[dict[str, str]]:
    """What must not be readable by the agent: tests/ and solution/ files (whole), solve.sh command lines
    (>= 12 characters) and test.sh lines (>= 24, lines about /logs/verifier aside)."""
    needles = []
    for path in text_files(task.tests_dir, task.solution_dir):
        text = path.read_text(errors="replace").strip()
        if len(text) >= 32:
            needles.append({"source": rel_path(task, path), "kind": "file", "text": text})
    for script, min_chars in ((task.solution_script, 12), (task.test_script, 24)):
        if script is not None:
            for line in command_lines(script.read_text(errors="replace"), min_chars):
                if script == task.solution_script or "/logs/verifier" not in line:
                    needles.append({"source": rel_path(task, script), "kind": "line", "text": line})
    return needles


def environment_leaks(task: HarborTask, needles: list[dict[str, str]]) -> list[str]:
    """Files under environment/ holding a needle (see :func:`leak_needles`)."""
    env_dir = task.task_dir / "environment"
    hits = []
    for path in text_files(env_dir if env_dir.is_dir() else None):
        data = path.read_text(errors="replace")
        needle = next((n for n in needles if n["text"] in data), None)
        if needle is not None:
            what = "all of" if needle["kind"] == "file" else f"a line of ({needle['text'][:60]!r})"
            hits.append(f"{rel_path(task, path)} holds {what} {needle['source']}")
    return hits


def no_leak(box: TaskSandbox) -> tuple[Status, str]:
    """Gate 5: nothing of tests/ or solution/ in environment/, nor readable inside the sandbox."""
    task, needles = box.task, leak_needles(box.task)
    problems = environment_leaks(task, needles)
    if box.rt is None:
        return ("fail" if problems else "skipped"), "; ".join(problems) or f"sandbox not run: {box.problem}"
    host = {str(p) for p in (task.task_dir, task.tests_dir, task.solution_dir) if p is not None}
    paths = sorted({"/tests", "/solution"} | host)
    try:
        with box.session() as session:
            report = box.scan(session, needles, paths)
    except BootFailure:
        if problems:
            return "fail", "; ".join(problems) + "; the sandbox did not boot to look inside"
        raise
    problems += [f"{p} exists inside the sandbox" for p in report["paths"]]
    for hit in report["hits"]:
        what = "all of" if hit["kind"] == "file" else f"a line of ({hit['text'][:60]!r})"
        problems.append(f"{hit['file']} (readable by the agent) holds {what} {hit['source']}")
    if problems:
        return "fail", "; ".join(problems)
    return "pass", f"no tests/ or solution/ file, path or line ({len(needles)} looked for) is visible"


# ---- gates 1, 4, 6, 9 -----------------------------------------------------------------------------------
def reference_passes(box: TaskSandbox) -> tuple[Status, str]:
    """Gate 1: the reference solution scores 1 in the training sandbox."""
    if box.task.solution_script is None:
        return "fail", "no solution/solve.sh: a task needs a reference solution"
    if box.rt is None:
        return "fail", f"the task cannot run in the training sandbox: {box.problem}"
    ref = box.reference()
    evidence = f"solve.sh: {describe_command(ref.command)}; tests: {describe(ref.reward)}"
    if passes(ref.reward):
        return "pass", evidence
    out = " ".join(str(ref.reward.details.get("test_stdout", "")).split())[-200:]
    return "fail", evidence + (f"; test stdout: {out}" if out else "")


def boot(box: TaskSandbox, n: int) -> None:
    """Gate 4's own boots: each sandbox must boot and run ``true`` (failures land in ``box``)."""
    for _ in range(n):
        try:
            with box.session() as session:
                res = session.execute("true", 30)
        except BootFailure:
            continue  # the session recorded it
        except EnvironmentFailure as exc:
            box.boot_failures.append(f"a fresh sandbox failed running `true`: {exc}")
            continue
        if res.exit_code != 0:
            box.boot_failures.append(f"`true` {describe_command(res)} in a fresh sandbox")


def boots_verdict(box: TaskSandbox, n: int) -> tuple[Status, str]:
    """Gate 4's verdict over every boot of this task (its own ``n`` and the other gates')."""
    failed = len(box.boot_failures)
    counts = f"{box.boots - failed}/{box.boots} sandbox boots succeeded"
    counts += f" ({n} by this gate, {box.boots - n} by the other gates)"
    if failed:
        return "fail", f"{counts}; first failure: {box.boot_failures[0]}"
    return "pass", counts


def do_nothing(box: TaskSandbox) -> tuple[Status, str]:
    """Gate 6: the tests on the untouched /app write a raw reward of 0."""
    with box.session() as session:
        reward = session.verify()
    ok = raw_reward(reward) == 0
    return ("pass" if ok else "fail"), f"the untouched /app gets {describe(reward)}"


def deterministic(box: TaskSandbox, repeats: int) -> tuple[Status, str]:
    """Gate 9: the reference state verified ``repeats`` times gives one raw reward."""
    if box.task.solution_script is None:
        return "skipped", "no solution/solve.sh: no reference state to verify"
    rewards = [box.reference().reward]
    for _ in range(repeats - 1):
        with box.session() as session:
            box.solve(session)
            rewards.append(session.verify())
    keys = {(r.failure if r.aborted else raw_reward(r)) for r in rewards}
    shown = ", ".join(describe(r) for r in rewards)
    if len(keys) == 1:
        return "pass", f"{repeats} verifications of the reference state agree: {shown}"
    return "fail", f"{repeats} verifications of the reference state disagree: {shown}"


# ---- one task -------------------------------------------------------------------------------------------
def validate_task(task: HarborTask, opts: GateOptions | None = None) -> TaskReport:
    """Run the selected gates on ``task``; raise ``SandboxUnavailable`` when this host cannot isolate."""
    opts = opts or GateOptions()
    box = TaskSandbox(task, opts.workspace_mb, opts.verifier_timeout_s, opts.solution_timeout_s)
    checks: dict[int, Callable[[], tuple[Status, str]]] = {
        1: lambda: reference_passes(box),
        2: lambda: requirements_stated(task),
        3: lambda: offline(box),
        5: lambda: no_leak(box),
        6: lambda: do_nothing(box),
        7: lambda: alternatives(box),
        8: lambda: malformed(box),
        9: lambda: deterministic(box, opts.repeats),
    }
    results: dict[int, GateResult] = {}

    def record(number: int, run: Callable[[], tuple[Status, str]]) -> None:
        start, name = time.monotonic(), GATES[number][0]
        if number not in opts.gates:
            status, evidence = "skipped", "not selected"
        elif box.rt is None and number in (6, 7, 8, 9):
            status, evidence = "skipped", f"the task cannot run in the training sandbox: {box.problem}"
        else:
            try:
                status, evidence = run()
            except BootFailure as exc:
                status, evidence = "skipped", f"the sandbox did not boot (counted by gate 4): {exc}"
            except EnvironmentFailure as exc:
                status, evidence = "fail", f"the sandbox failed during this gate: {exc}"
        secs = round(time.monotonic() - start, 2)
        evidence = " ".join(evidence.split())  # one line: sandbox errors end in newlines
        results[number] = GateResult(gate=number, name=name, status=status, evidence=evidence, seconds=secs)

    try:
        if 4 in opts.gates and box.rt is not None:
            boot(box, opts.boots)
        for number, run in checks.items():
            record(number, run)
        if box.rt is None and 4 in opts.gates:
            record(4, lambda: ("skipped", f"the task cannot run in the training sandbox: {box.problem}"))
        else:
            record(4, lambda: boots_verdict(box, opts.boots))
    finally:
        box.close()
    gates = [results[n] for n in sorted(results)]
    return TaskReport(
        task=task.name, task_dir=str(task.task_dir), ok=all(g.status != "fail" for g in gates), gates=gates
    )
