"""The ``harbor_tests`` reward: a terminal task's own ``tests/test.sh`` on the final ``/app``, binary.

Stage 05's reward (and stage 08's terminal tasks): 1.0 iff the task's tests pass, no judge, no partial
credit. Inside an episode the ``harbor`` environment scores with the episode's live sandbox
(:meth:`infra.agents.harbor.env.HarborEnv.score`). Called directly (preflight, evaluation of a stored
episode), the request names the task in ``metadata["task_dir"]`` and gives the episode's ``transcript``
(or ``metadata["transcript"]``): its ``execute_command`` calls are replayed in order in a fresh sandbox of
the task, then the tests run. Replay reproduces the episode as far as its commands are deterministic.
Model output never raises here; a sandbox that does not boot, a verifier that cannot finish and a task
that cannot be loaded or run are ``aborted``, never a 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.agents.contract import EnvironmentFailure
from infra.sandbox import SandboxUnavailable
from rewards.contract import RewardRequest, RewardResult, register_reward

#: Replays boot their sandbox when they need it: no spare is left running after the last one.
REPLAY_SPARES = 0


def _aborted(why: str) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure="environment", details={"error": why})


def replay_commands(transcript: Any) -> list[str]:
    """Return the transcript's ``execute_command`` commands in order (malformed calls, which the tool
    refused in the episode, are skipped)."""
    commands: list[str] = []
    for entry in transcript if isinstance(transcript, list) else []:
        if not isinstance(entry, dict) or entry.get("role") != "assistant":
            continue
        calls = entry.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict) or call.get("name") != "execute_command":
                continue
            args = call.get("input")
            command = args.get("command") if isinstance(args, dict) else None
            if isinstance(command, str) and command.strip():
                commands.append(command)
    return commands


@register_reward("harbor_tests")
def harbor_tests(request: RewardRequest) -> RewardResult:
    """Return 1.0 when the task's tests pass after replaying the transcript's commands, else 0.0."""
    from infra.agents.harbor.env import RuntimeOptions, local_problems, open_session, runtime_cache
    from infra.agents.harbor.task import TaskFormatError, load_task

    meta = request.metadata
    transcript = request.transcript if request.transcript is not None else meta.get("transcript")
    missing = [k for k in ("task_dir",) if k not in meta] + (["transcript"] if transcript is None else [])
    if missing:
        return _aborted(f"harbor_tests needs {missing} (the harbor environment scores its own episodes)")
    try:
        task = load_task(Path(str(meta["task_dir"])).resolve())
    except (TaskFormatError, OSError) as exc:
        return _aborted(f"harbor_tests: {exc}")
    problems = local_problems(task)
    if problems:
        return _aborted(f"harbor_tests: task {task.task_dir} cannot run here: {'; '.join(problems)}")
    cache = runtime_cache()
    try:
        key, session = open_session(task, RuntimeOptions(spares=REPLAY_SPARES), cache)
    except EnvironmentFailure as exc:
        return _aborted(str(exc))
    try:
        commands = replay_commands(transcript)
        for command in commands:
            session.execute(command)
        result = session.verify()
    except (EnvironmentFailure, SandboxUnavailable, OSError) as exc:
        return _aborted(f"harbor_tests: replay in {task.task_dir} failed: {exc}")
    finally:
        session.close()
        cache.release(key)
    details = {**result.details, "task": task.name, "replayed_commands": len(commands)}
    return result.model_copy(update={"details": details})
