"""The stage-05 ``harbor`` environment over a benchmark's task folders, on a chosen runtime backend.

:class:`BenchEnv` is :class:`infra.agents.harbor.env.HarborEnv` (the system prompt naming the backend's
working directory, the one ``execute_command`` tool, its output budget and the episode limits of the stage's
env spec, the task's own tests as the reward) over the tasks the harness loaded, not the environment's
catalog; each attempt's sandbox comes from a backend of :mod:`infra.agents.harbor.backends` (``local``,
``docker``, ``e2b``; the harness bakes and boots ``rufus-eval-<task>`` templates). The harness turns a
backend's ``preflight()`` and ``problems(task)`` into missing results, never a 0.

Also here: :func:`load_bench` (a benchmark's task folders, either layout, each one that does not load
dropped with its one-line error; a SWE-bench folder must carry its instance row in ``tests/config.json``)
and :func:`env_options` (the stage's env spec as HarborEnv options, with the harness's overrides).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.harnesses.search_bench import ItemOutcome, run_items
from infra.agents.contract import AgentTask
from infra.agents.harbor.backends import Backend
from infra.agents.harbor.env import HarborEnv
from infra.agents.harbor.task import HarborTask, TaskFormatError, load_task

NO_CAP_S = 86_400.0  # verifier_timeout when not overridden: each task's own [verifier].timeout_sec applies
E2B_PREFIX = "rufus-eval"  # template aliases: <prefix>-<task name>, as data_prep.harbor_sources names them


class BenchEnv(HarborEnv):
    """The stage's ``harbor`` environment over the harness's tasks, its sandboxes from ``backend``."""

    name = "harbor_bench"

    def __init__(self, tasks: dict[str, HarborTask], backend: Backend, root: str, **options: Any) -> None:
        super().__init__(root, runtime=backend.name, **options)
        self.bench_tasks, self.backend = tasks, backend

    def harbor_task(self, task: AgentTask) -> HarborTask:
        """The harness's task of an agent task (not the environment's catalog)."""
        return self.bench_tasks[str(task.metadata["task"])]


# ---- the benchmark's task folders and the stage's env options -------------------------------------------
@dataclass
class LoadedTasks:
    """The task folders that loaded (sorted), the error line of each one dropped, SWE-bench instance ids."""

    tasks: list[HarborTask]
    dropped: list[str]
    instance_ids: dict[str, str] = field(default_factory=dict)


def _swe_instance(task: HarborTask) -> str:
    """Return the instance id of a SWE-bench adapter folder; TaskFormatError naming tests/config.json."""
    from eval.agent_loaders import swe_bench_verified
    from eval.records import BadRecord

    path = task.task_dir / "tests" / "config.json"
    try:
        row = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise TaskFormatError(  # noqa: B904 - the missing file is the whole story
            task.task_dir, "tests/config.json", "missing (the instance row the tests grade)"
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise TaskFormatError(task.task_dir, "tests/config.json", f"invalid JSON: {exc}") from None
    if not isinstance(row, dict):
        raise TaskFormatError(task.task_dir, "tests/config.json", "must be the instance's row (an object)")
    try:
        return swe_bench_verified(row).id
    except BadRecord as exc:
        raise TaskFormatError(task.task_dir, "tests/config.json", str(exc)) from None


def load_bench(bench: str, root: Path) -> LoadedTasks:
    """Load every task folder directly under ``root`` (sorted, dot-folders skipped) for ``bench``."""
    if not root.is_dir():
        raise FileNotFoundError(f"--data {root}: not a folder of task folders")
    loaded = LoadedTasks([], [])
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            task = load_task(sub)
            if bench == "swe_bench_verified":
                loaded.instance_ids[task.name] = _swe_instance(task)
        except TaskFormatError as exc:
            loaded.dropped.append(str(exc))
            continue
        loaded.tasks.append(task)
    return loaded


def env_options(stage_config: Path, overrides: list[str]) -> tuple[str, dict[str, Any]]:
    """Return ``(resolved env spec, HarborEnv options)``: the stage's harbor spec without ``tasks=`` and its
    runtime (the harness's ``--runtime`` picks that), then
    ``overrides`` (``KEY=VALUE``); the verifier gets each task's own timeout unless one is given, and
    partial credit is off (the benchmarks score binary)."""
    from infra.agents.envs.base import parse_env_spec
    from infra.layering import ConfigError, load_yaml

    cfg = load_yaml(stage_config)
    spec = (((cfg.get("rl") or {}).get("environment") or {}).get("options") or {}).get("env")
    if not isinstance(spec, str):
        raise ConfigError(
            f"{stage_config}: rl.environment.options.env: missing (the stage's harbor env spec)"
        )
    name, options = parse_env_spec(spec)
    if name != "harbor":
        raise ConfigError(
            f"{stage_config}: rl.environment.options.env: {name!r} is not the harbor environment"
        )
    for key in ("tasks", "runtime", "e2b_prefix"):  # --data, --runtime and --e2b-template-prefix give them
        options.pop(key, None)
    options["verifier_timeout"] = NO_CAP_S
    for item in overrides:
        key, eq, _ = item.partition("=")
        if not eq or not key or key in ("tasks", "runtime", "e2b_prefix"):
            raise ValueError(
                f"--env-option {item!r}: expected KEY=VALUE (not tasks=, runtime= or e2b_prefix=: "
                "--data, --runtime and --e2b-template-prefix give them)"
            )
        options.update(parse_env_spec(f"harbor:{item}")[1])
    options["partial_credit"] = False
    resolved = "harbor:" + ",".join(f"{k}={v}" for k, v in options.items())
    return resolved, options


def tasks_sha256(tasks: list[HarborTask]) -> str:
    """The sha256 of every file of the loaded task folders (relative paths and contents, in order)."""
    digest = hashlib.sha256()
    for task in tasks:
        for path in sorted(p for p in task.task_dir.rglob("*") if p.is_file()):
            digest.update(f"{task.name}/{path.relative_to(task.task_dir).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def run_trials(
    make_env: Callable[[], Any],
    tasks: list[Any],
    task_of: Callable[[Any], Any],
    endpoint: Any,
    *,
    trials: int,
    concurrency: int,
    attempts: int,
    seed: int,
) -> dict[str, list[ItemOutcome]]:
    """Run each of ``tasks`` (anything with a ``name``) ``trials`` times, each attempt an item of its own
    (``task_of(task)``'s id suffixed ``-t0`` .. ``-t{k-1}``); return ``{name: its outcomes in order}``."""
    items = [
        base.model_copy(update={"id": f"{base.id}-t{j}"})
        for base in (task_of(t) for t in tasks)
        for j in range(trials)
    ]
    outcomes = asyncio.run(
        run_items(make_env, items, endpoint, concurrency=concurrency, attempts=attempts, seed=seed)
    )
    return {t.name: outcomes[i * trials : (i + 1) * trials] for i, t in enumerate(tasks)}
