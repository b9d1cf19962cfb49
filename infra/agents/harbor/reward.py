"""The ``harbor_tests`` reward: a terminal task's own ``tests/test.sh`` on the final ``/app``, binary.

Stage 05's reward (and stage 08's terminal tasks): 1.0 iff the task's tests pass, no judge, no partial
credit. The FireFlash variant turns partial credit on (the verifier's reward clamped to [0, 1]) through
its env spec (``harbor:...,partial_credit=1``), or a request sets ``metadata["partial_credit"]``. Inside
an episode the ``harbor`` environment scores with the episode's live sandbox
(:meth:`infra.agents.harbor.env.HarborEnv.score`). Called directly (preflight, evaluation of a stored
episode), the request names the task in ``metadata["task_dir"]`` and gives the episode's ``transcript``
(or ``metadata["transcript"]``): its ``execute_command`` calls are replayed in order in a fresh sandbox of
the task, then the tests run. Replay reproduces the episode as far as its commands are deterministic. The
row's env spec (``metadata["environment_options"]["env"]``, which prompt rows carry) gives the scoring
mode and, when it turns a harness option on (saved outputs, background commands), the runtime options
the episode ran with. Model output never raises here; a sandbox that does not boot, a verifier that cannot
finish and a task that cannot be loaded or run are ``aborted``, never a 0.
"""

from __future__ import annotations

import functools
from dataclasses import replace
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


@functools.lru_cache(maxsize=16)
def replay_settings(spec: str | None) -> tuple[Any, bool]:
    """Return ``(RuntimeOptions, partial_credit)`` of a replay under env spec ``spec`` (None: stage 05's).

    The env's runtime options are used only when a harness option is on, so stage 05's replays run as
    they always have; ValueError when the spec does not load.
    """
    from infra.agents.envs.base import load_environment
    from infra.agents.harbor.env import HarborEnv
    from infra.agents.harbor.local_runtime import RuntimeOptions

    default = RuntimeOptions(spares=REPLAY_SPARES)
    if not spec:
        return default, False
    try:
        env = load_environment(spec)
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        raise ValueError(f"harbor_tests: env spec {spec!r} does not load: {exc}") from None
    if not isinstance(env, HarborEnv):
        return default, False
    opts = replace(env.options, spares=REPLAY_SPARES) if env.options.harness.enabled else default
    return opts, env.partial_credit


@register_reward("harbor_tests")
def harbor_tests(request: RewardRequest) -> RewardResult:
    """Return 1.0 when the task's tests pass after replaying the transcript's commands, else 0.0 (or the
    partial reward in [0, 1] when partial credit is on)."""
    from infra.agents.harbor.command_tool import flag_option
    from infra.agents.harbor.local_runtime import local_problems, open_session, runtime_cache
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
    env_options = meta.get("environment_options")
    spec = env_options.get("env") if isinstance(env_options, dict) else None
    try:
        opts, partial = replay_settings(spec if isinstance(spec, str) else None)
        if "partial_credit" in meta:
            partial = flag_option("harbor_tests", "partial_credit", meta["partial_credit"])
    except ValueError as exc:
        return _aborted(str(exc))
    cache = runtime_cache()
    try:
        key, session = open_session(task, opts, cache)
    except EnvironmentFailure as exc:
        return _aborted(str(exc))
    try:
        commands = replay_commands(transcript)
        for command in commands:
            session.execute(command, **opts.harness.execute_kwargs(opts.output_tokens))
        result = session.verify(partial_credit=partial)
    except (EnvironmentFailure, SandboxUnavailable, OSError) as exc:
        return _aborted(f"harbor_tests: replay in {task.task_dir} failed: {exc}")
    finally:
        session.close()
        cache.release(key)
    details = {**result.details, "task": task.name, "replayed_commands": len(commands)}
    return result.model_copy(update={"details": details})
