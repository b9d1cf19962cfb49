"""Gates 7 and 8 of :mod:`infra.agents.harbor.gates`: mutated solutions and malformed outputs.

Gate 7, tests accept alternative correct solutions: each mutation runs in a fresh sandbox and is verified.

* ``wrapped`` (must pass): solve.sh's text run by ``bash -c`` between harmless commands (a scratch file
  written in ``/tmp``, ``/app`` listed), not as ``bash solve.sh``.
* ``no-final-newline`` (must pass): the reference, then every text file it created or changed loses its
  final newline: what a solution writing ``"\\n".join(lines)`` leaves. A test comparing bytes with ``cmp``
  fails it; one comparing lines or values passes.
* ``skip-last-command`` (must fail): solve.sh without its last command line (a non-blank line that is not a
  comment). Not applicable when ``/app`` then ends as the reference leaves it.
* ``empty-outputs`` (must fail): the reference, then every file it created or changed is emptied.

"Pass" is the binary training reward 1 with the verifier not aborted; a must-fail mutation passes the gate
with any reward below 1 (a grader that crashes on it is gate 8's finding). A mutation without files to
mutate is reported as not applicable.

Gate 8, malformed outputs never crash the grader: the verifier must write a reward and it must be 0 (the
raw reward, not only its binarised score) for

* ``garbage``: the reference (when there is one), then every file in ``/app`` overwritten by :data:`GARBAGE`
  (NUL and invalid UTF-8 bytes, unbalanced brackets and quotes, an escape sequence);
* ``empty-app``: everything in ``/app`` deleted.
"""

from __future__ import annotations

from infra.agents.harbor.gates_sandbox import SOLUTION_DIR, Status, TaskSandbox, describe, raw_reward
from rewards.contract import RewardResult

Verdict = tuple[Status, str]  # (status, evidence)

GARBAGE = (
    b"\x00\xff\xfe\x80 <<<{{{ ]]] ((( ;;; \"unterminated 'quote \\\n\x1b[31m\xc3\x28 %s %n $((1/0)) }\n"
) * 32

WRAPPED = (
    "echo scratch > /tmp/rufus-scratch.txt; ls -la /app > /dev/null; "
    f'bash -c "$(cat {SOLUTION_DIR}/solve.sh)" {SOLUTION_DIR}/solve.sh; status=$?; '
    "cat /tmp/rufus-scratch.txt > /dev/null; exit $status"
)


def passes(result: RewardResult) -> bool:
    """True for the binary training reward 1 from a verifier that finished."""
    return not result.aborted and result.score >= 1.0


def skip_last_command(script: str) -> str | None:
    """``script`` without its last command line; None when it has no command."""
    lines = script.splitlines(keepends=True)
    commands = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
    if not commands:
        return None
    return "".join(line for i, line in enumerate(lines) if i != commands[-1])


def alternatives(box: TaskSandbox) -> Verdict:
    """Gate 7: the must-pass mutations pass and the must-fail ones do not (see the module docstring)."""
    if box.task.solution_script is None:
        return "skipped", "no solution/solve.sh to mutate"
    ref = box.reference()
    if not passes(ref.reward):
        return "skipped", f"the reference itself does not pass ({describe(ref.reward)}; gate 1)"
    lines, wrong = [], []

    def check(name: str, must_pass: bool, op: str | None = None, paths: list[str] | None = None,
              script: str | None = None, command: str | None = None) -> None:  # fmt: skip
        """Run the (mutated) solution in a fresh sandbox, apply ``op`` to ``paths``, verify."""
        with box.session() as session:
            run = box.run(session, script=script, command=command)
            if script is not None and run.after == ref.after:
                lines.append(f"{name}: n/a, /app ends as the reference leaves it")
                return
            if op is not None:
                box.mutate(session, op, paths or [])
            reward = session.verify()
        ok = passes(reward) == must_pass
        where = f" on {', '.join(paths)}" if paths else ""
        must = "must pass" if must_pass else "must fail"
        lines.append(f"{name} ({must}): {describe(reward)}{where}" + ("" if ok else " <- WRONG"))
        if not ok:
            wrong.append(name)

    check("wrapped", True, command=WRAPPED)
    texts = [p for p in ref.written if ref.after[p][1]]
    if texts:
        check("no-final-newline", True, "strip_final_newline", texts)
    else:
        lines.append("no-final-newline: n/a, the reference writes no text file ending in a newline")
    prefix = skip_last_command(box.task.solution_script.read_text(errors="replace"))
    if prefix is not None:
        check("skip-last-command", False, script=prefix)
    if ref.written:
        check("empty-outputs", False, "empty", ref.written)
    else:
        lines.append("empty-outputs: n/a, the reference creates or changes no file")
    head = f"{', '.join(wrong)} scored wrongly" if wrong else "every applicable mutation scored as it should"
    return ("fail" if wrong else "pass"), head + "; " + "; ".join(lines)


def malformed(box: TaskSandbox) -> Verdict:
    """Gate 8: garbage in every /app file and an emptied /app both get a written reward of 0."""
    lines, bad = [], []
    for name in ("garbage", "empty-app"):
        with box.session() as session:
            if name == "garbage":
                if box.task.solution_script is not None:
                    box.solve(session)
                box.mutate(session, "garbage", garbage=GARBAGE)
            else:
                box.mutate(session, "delete_all")
            reward = session.verify()
        ok = raw_reward(reward) == 0
        lines.append(f"{name}: {describe(reward)}" + ("" if ok else " <- WRONG"))
        if not ok:
            bad.append(name + (" crashed the grader" if reward.aborted else " was not scored 0"))
        if reward.aborted and reward.details.get("test_stderr"):
            lines[-1] += f" (test stderr: {' '.join(reward.details['test_stderr'].split())[-160:]})"
    head = "; ".join(bad) if bad else "the grader scored every malformed output 0"
    return ("fail" if bad else "pass"), head + "; " + "; ".join(lines)
