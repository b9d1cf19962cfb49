"""Terminal-Bench's older task layout, read into the same :class:`~infra.agents.harbor.task.HarborTask`.

``task.yaml`` (instruction, timeouts, metadata), ``docker-compose.yaml`` (the ``client`` service and its
build), ``run-tests.sh`` (the verifier: pass = exit code 0, tests uploaded to ``/tests``) and
``solution.sh``. :func:`infra.agents.harbor.task.load_task` calls :func:`load_terminal_bench` when a task dir
has ``task.yaml`` and no ``task.toml``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.agents.harbor.task import (
    SOLUTION_MOUNT,
    TESTS_MOUNT,
    HarborTask,
    TaskEnvironment,
    TaskFormatError,
    _compose_services,
    _dockerfile,
    _file,
    _from_dockerfile,
    _Section,
    _strip_canary,
    _validate,
)

_TB_CONFIG = {"instruction", "descriptions", "max_agent_timeout_sec", "max_test_timeout_sec"}
_TB_METADATA = {"author_name", "author_email", "difficulty", "category", "tags", "parser_name"} | {
    "run_tests_in_same_shell",
    "disable_asciinema",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
}


class _TaskYaml(_Section):
    instruction: str
    max_agent_timeout_sec: float = 360.0
    max_test_timeout_sec: float = 60.0
    tags: list[str] = []


def load_terminal_bench(task_dir: Path, require_files: bool) -> HarborTask:
    """Load a task dir in Terminal-Bench's layout; raise :class:`TaskFormatError` naming file and key."""
    try:
        data = yaml.safe_load((task_dir / "task.yaml").read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskFormatError(task_dir, "task.yaml", f"invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TaskFormatError(task_dir, "task.yaml", "must be a mapping of keys")
    if "instruction" not in data:  # early T-Bench: descriptions: [{key: base, description: ...}]
        base = [d for d in data.get("descriptions") or [] if isinstance(d, dict) and d.get("key") == "base"]
        if base or not require_files:
            data = {**data, "instruction": base[0].get("description", "") if base else ""}
    cfg = _validate(_TaskYaml, data, task_dir, "task.yaml", None)

    compose = _file(task_dir / "docker-compose.yaml")
    services = _compose_services(compose, task_dir) if compose else {}
    main = services.get("client") or next(iter(services.values()), {})
    build = main.get("build") or {}
    build = {"context": build} if isinstance(build, str) else build if isinstance(build, dict) else {}
    context = (task_dir / str(build.get("context", "."))).resolve()
    if context != task_dir.resolve() and task_dir.resolve() not in context.parents:
        raise TaskFormatError(task_dir, "docker-compose.yaml", "escapes the task dir", "build.context")
    dockerfile = _file(context / str(build.get("dockerfile", "Dockerfile")))
    info = _dockerfile(dockerfile, context, task_dir)
    workdir = str(main.get("working_dir", "")) if "${" not in str(main.get("working_dir", "")) else ""
    declared = main.get("environment") or []
    pairs = declared.items() if isinstance(declared, dict) else (str(e).partition("=")[::2] for e in declared)
    image = str(main.get("image", ""))
    environment = TaskEnvironment(
        context_dir=context if compose or dockerfile else None,
        dockerfile=dockerfile,
        compose_file=compose,
        services=tuple(services),
        multi_container=len(services) > 1,
        docker_image=image if image and "${" not in image and not build else None,
        workdir=workdir or (info.workdir if info else None),
        image_env={**(info.env if info else {}), **{str(k): str(v) for k, v in pairs if "${" not in str(v)}},
        **_from_dockerfile(info),
    )
    instruction = _strip_canary(cfg.instruction) or None
    run_tests = _file(task_dir / "run-tests.sh")
    if require_files:
        if instruction is None:
            raise TaskFormatError(task_dir, "task.yaml", "missing or empty", "instruction")
        if run_tests is None:
            raise TaskFormatError(task_dir, "run-tests.sh", "missing (the verifier's entry point)")
    solution = _file(task_dir / "solution.sh")
    return HarborTask(
        name=task_dir.name,
        task_dir=task_dir,
        layout="terminal-bench",
        schema_version=None,
        instruction=instruction,
        agent_timeout_sec=cfg.max_agent_timeout_sec,
        verifier_timeout_sec=cfg.max_test_timeout_sec,
        verifier_env={"TEST_DIR": TESTS_MOUNT},
        reward_source="exit_code",
        tests_dir=task_dir / "tests" if (task_dir / "tests").is_dir() else None,
        test_script=run_tests,
        test_command=f"bash {TESTS_MOUNT}/run-tests.sh",
        solution_script=solution,
        solution_command=f"bash {SOLUTION_MOUNT}/solution.sh" if solution else None,
        environment=environment,
        metadata={k: v for k, v in data.items() if k in _TB_METADATA},
        config=data,
        unknown_keys=tuple(k for k in data if k not in _TB_CONFIG | _TB_METADATA),
    )
