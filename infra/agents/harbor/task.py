"""Load a terminal task directory (Harbor ``task.toml`` or Terminal-Bench ``task.yaml``) into one model.

``load_task(dir) -> HarborTask`` and ``load_tasks(root) -> (tasks, errors)``: a malformed task raises (in
``load_tasks``: is reported as) a one-line :class:`TaskFormatError` naming the task dir, the file and the key,
and the other tasks still load. :func:`structural_problems` says why a task that loads cannot run here (the
data-prep structural filter of stages 05 and 08).

Hand-written rather than importing ``harbor``: Harbor needs Python >= 3.12 and a container backend, and we
use only its task *format*. Field names and defaults follow harbor 0.26 ``models/task/config.py``
(``schema_version = "1.4"``) and terminal-bench 0.2.18 ``handlers/trial_handler.py``.

* Harbor: ``instruction.md``, ``task.toml``, ``environment/`` (build context: ``Dockerfile`` and/or
  ``docker-compose.yaml``, or none when ``[environment].docker_image`` is set), ``tests/test.sh`` (uploaded to
  ``/tests``, run from the working directory after the agent, writes ``/logs/verifier/reward.json`` or
  ``reward.txt``), optional ``solution/solve.sh`` (uploaded to ``/solution``).
* Terminal-Bench 1: ``task.yaml`` (instruction inside), ``docker-compose.yaml`` (service ``client``, build
  context the task dir), ``Dockerfile``, ``run-tests.sh`` (uploaded to ``/tests`` with ``tests/``; the task
  passes iff it exits 0, as Harbor's terminal_bench mapper scores it), ``solution.sh``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from infra.agents.harbor.dockerfile import (
    DockerfileError,
    DockerfileInfo,
    DockerfileStep,
    FileCopy,
    is_files_only,
    parse_dockerfile,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

NetworkMode = Literal["no-network", "public", "allowlist"]
HARBOR_SCHEMA_VERSION = "1.4"  # what `harbor init` (0.26) writes
TESTS_MOUNT = "/tests"  # tests/ (and Terminal-Bench's run-tests.sh) are uploaded here after the agent
SOLUTION_MOUNT = "/solution"  # solution/ (or solution.sh) is uploaded here for the oracle
VERIFIER_LOGS = "/logs/verifier"  # the test script writes reward.json (read first) or reward.txt here

# Harbor's TaskConfig: unknown top-level keys are errors; unknown keys inside a known table are kept (Harbor
# ignores them) and listed in HarborTask.unknown_keys. [metadata] is free-form.
_TOP_LEVEL = {"schema_version", "version", "source", "multi_step_reward_strategy", "steps", "artifacts"}
_TABLES: dict[str, set[str]] = {
    "task": {"name", "version", "description", "authors", "keywords"},
    "metadata": set(),
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "verifier": {"timeout_sec", "env", "user", "environment_mode", "environment", "collect"}
    | {"network_mode", "allowed_hosts"},
    "environment": {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus"}
    | {"gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir", "allow_internet"}
    | {"network_mode", "allowed_hosts", "memory", "storage"},
    "solution": {"env"},
}


class TaskFormatError(ValueError):
    """A task that does not load; ``str()`` is one line: ``<task dir>: <file>[: <key>]: <problem>``."""

    def __init__(self, task_dir: Path, file: str, problem: str, key: str | None = None) -> None:
        self.task_dir, self.file, self.key = task_dir, file, key
        where = f"{task_dir}: {file}" + (f": {key}" if key else "")
        super().__init__(f"{where}: {' '.join(str(problem).split())}")


class TaskEnvironment(BaseModel):
    """Where the task's filesystem comes from, and its limits."""

    model_config = ConfigDict(frozen=True)
    context_dir: Path | None  # Docker build context: environment/ (Harbor) or the task dir (Terminal-Bench)
    dockerfile: Path | None
    compose_file: Path | None
    services: tuple[str, ...] = ()  # compose service names
    multi_container: bool = False  # compose defines services besides the main one ("main" / "client")
    docker_image: str | None = None  # prebuilt image ([environment].docker_image, or a compose `image:`)
    base_image: str | None = None  # the Dockerfile's last FROM
    steps: tuple[DockerfileStep, ...] = ()  # the Dockerfile, parsed
    copies: tuple[FileCopy, ...] = ()  # its local COPY/ADD steps, sources resolved inside context_dir
    workdir: str | None = None  # [environment].workdir, else compose working_dir, else the last WORKDIR
    image_env: dict[str, str] = {}  # Dockerfile ENV and compose `environment:` (literal values only)
    task_env: dict[str, str] = {}  # [environment].env: resolved from the host, may hold ${VAR} templates
    network_mode: NetworkMode = "public"  # Harbor's default; legacy allow_internet=false is "no-network"
    allowed_hosts: tuple[str, ...] = ()
    os: str = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    build_timeout_sec: float = 600.0

    @property
    def defined(self) -> bool:
        """True when there is something to build or pull: a Dockerfile, a compose file or an image."""
        return bool(self.dockerfile or self.compose_file or self.docker_image)

    @property
    def files_only(self) -> bool:
        """True when one container's Dockerfile only copies local files onto its base image (no RUN, second
        stage or remote ADD): copying :attr:`copies` onto host tools then reproduces the environment."""
        return (
            self.dockerfile is not None
            and not self.multi_container
            and is_files_only(self.steps, self.copies)
        )


class HarborTask(BaseModel):
    """One terminal task in either layout, normalised. Paths are absolute host paths inside ``task_dir``.

    Running it: build ``environment``; give the agent ``instruction`` (cwd ``environment.workdir``); then
    upload ``tests_dir`` (and ``test_script``) to ``/tests``, run ``test_command`` from the working directory
    with ``verifier_env`` within ``verifier_timeout_sec``, and score by ``reward_source``. The oracle uploads
    ``solution_dir`` (or ``solution_script`` alone) to ``/solution`` and runs ``solution_command``.
    """

    model_config = ConfigDict(frozen=True)
    name: str  # the task dir's name: the task's id in this repo
    task_dir: Path
    layout: Literal["harbor", "terminal-bench"]
    schema_version: str | None  # task.toml schema_version (legacy `version`); None for task.yaml
    package_name: str | None = None  # Harbor [task].name ("org/name")
    instruction: str | None  # text handed to the agent, canary lines stripped; None only when missing
    agent_timeout_sec: float | None  # None: the task sets no limit
    verifier_timeout_sec: float
    agent_user: str | int | None = None
    verifier_user: str | int | None = None
    verifier_env: dict[str, str] = {}  # [verifier].env; TEST_DIR=/tests for Terminal-Bench
    verifier_mode: Literal["shared", "separate"] = "shared"  # separate: the verifier has its own image
    reward_source: Literal["reward_file", "exit_code"]  # reward.json / reward.txt (Harbor), exit 0 (TB)
    tests_dir: Path | None  # uploaded to TESTS_MOUNT after the agent finishes
    test_script: Path | None  # tests/test.sh (Harbor) or run-tests.sh (Terminal-Bench, beside tests/)
    test_command: str  # e.g. "bash /tests/test.sh"
    solution_dir: Path | None = None  # Harbor solution/, uploaded to SOLUTION_MOUNT
    solution_script: Path | None = None  # solution/solve.sh, or Terminal-Bench's solution.sh
    solution_command: str | None = None  # e.g. "bash /solution/solve.sh"; None without a solution script
    solution_env: dict[str, str] = {}
    environment: TaskEnvironment
    multi_step: bool = False  # Harbor `steps = [...]`: instructions and tests live in steps/<name>/
    metadata: dict[str, Any] = {}  # [metadata], or Terminal-Bench's author/difficulty/category/tags/...
    config: dict[str, Any] = {}  # the parsed task.toml / task.yaml, verbatim
    unknown_keys: tuple[str, ...] = ()  # keys the spec does not define (kept in `config`), "table.key"


# Section schemas: types of the fields we normalise; other keys pass through.
class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Agent(_Section):
    timeout_sec: float | None = None
    user: str | int | None = None


class _Verifier(_Section):
    timeout_sec: float = 600.0
    env: dict[str, str] = {}
    user: str | int | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict[str, Any] | None = None


class _Environment(_Section):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    env: dict[str, str] = {}
    workdir: str | None = None
    allow_internet: bool | None = None  # deprecated
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    memory: str | None = None  # deprecated "2G" style
    storage: str | None = None


class _Solution(_Section):
    env: dict[str, str] = {}


def _validate(model: type[BaseModel], data: Any, task_dir: Path, file: str, table: str | None) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        key = f"[{table}]" + (f".{loc}" if loc else "") if table else loc or None
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise TaskFormatError(task_dir, file, err["msg"] + more, key) from None


def _size_mb(value: str, task_dir: Path, key: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([GMK])B?\s*", value.upper())
    if not m:
        raise TaskFormatError(task_dir, "task.toml", f"size {value!r} is not like '2G' or '512M'", key)
    return int(float(m.group(1)) * {"G": 1024, "M": 1, "K": 1 / 1024}[m.group(2)])


def _strip_canary(text: str) -> str:
    lines = text.split("\n")
    while lines and re.match(r"^\s*(<!--.*canary.*-->|#.*canary.*)\s*$", lines[0], re.IGNORECASE):
        lines.pop(0)
    return "\n".join(lines).strip()


def _dockerfile(path: Path | None, context: Path, task_dir: Path) -> DockerfileInfo | None:
    if path is None:
        return None
    try:
        return parse_dockerfile(path.read_text(errors="replace"), context)
    except DockerfileError as exc:
        raise TaskFormatError(
            task_dir, str(path.relative_to(task_dir)), str(exc), f"line {exc.line}"
        ) from None


def _from_dockerfile(info: DockerfileInfo | None) -> dict[str, Any]:
    if info is None:
        return {}
    return {"steps": info.steps, "copies": info.copies, "base_image": info.base_image}


def _compose_services(path: Path, task_dir: Path) -> dict[str, dict[str, Any]]:
    file = str(path.relative_to(task_dir))
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskFormatError(task_dir, file, f"invalid YAML: {exc}") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise TaskFormatError(task_dir, file, "no services defined", "services")
    return {str(k): v if isinstance(v, dict) else {} for k, v in services.items()}


def _file(path: Path) -> Path | None:
    return path if path.is_file() else None


def _check_tables(cfg: dict[str, Any], task_dir: Path) -> list[str]:
    unknown: list[str] = []
    for key, value in cfg.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise TaskFormatError(task_dir, "task.toml", "must be a table", f"[{key}]")
            unknown += [f"{key}.{k}" for k in value if _TABLES[key] and k not in _TABLES[key]]
        elif key not in _TOP_LEVEL:
            kind = "table" if isinstance(value, dict) else "key"
            allowed = ", ".join(sorted(_TOP_LEVEL | set(_TABLES)))
            problem = f"unknown top-level {kind} (schema {HARBOR_SCHEMA_VERSION} allows {allowed})"
            raise TaskFormatError(task_dir, "task.toml", problem, f"[{key}]" if kind == "table" else key)
    return unknown


def _harbor(task_dir: Path, require_files: bool) -> HarborTask:
    try:
        cfg = tomllib.loads((task_dir / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(task_dir, "task.toml", f"invalid TOML: {exc}") from None
    unknown = _check_tables(cfg, task_dir)
    agent = _validate(_Agent, cfg.get("agent", {}), task_dir, "task.toml", "agent")
    ver = _validate(_Verifier, cfg.get("verifier", {}), task_dir, "task.toml", "verifier")
    env = _validate(_Environment, cfg.get("environment", {}), task_dir, "task.toml", "environment")
    sol = _validate(_Solution, cfg.get("solution", {}), task_dir, "task.toml", "solution")
    package = cfg.get("task", {})
    if package and not isinstance(package.get("name"), str):
        raise TaskFormatError(task_dir, "task.toml", "missing or not a string", "[task].name")
    if ver.environment_mode == "shared" and ver.environment is not None:
        problem = "'shared' conflicts with a [verifier.environment] table"
        raise TaskFormatError(task_dir, "task.toml", problem, "[verifier].environment_mode")
    memory_mb, storage_mb = env.memory_mb, env.storage_mb
    if env.memory is not None:
        memory_mb = _size_mb(env.memory, task_dir, "[environment].memory")
    if env.storage is not None:
        storage_mb = _size_mb(env.storage, task_dir, "[environment].storage")

    env_dir = task_dir / "environment"
    compose = _file(env_dir / "docker-compose.yaml")
    services = _compose_services(compose, task_dir) if compose else {}
    info = _dockerfile(_file(env_dir / "Dockerfile"), env_dir, task_dir)
    environment = TaskEnvironment(
        context_dir=env_dir if env_dir.is_dir() else None,
        dockerfile=_file(env_dir / "Dockerfile"),
        compose_file=compose,
        services=tuple(services),
        multi_container=any(s != "main" for s in services),
        docker_image=env.docker_image,
        workdir=env.workdir or (info.workdir if info else None),
        image_env=info.env if info else {},
        task_env=env.env,
        network_mode=env.network_mode or ("no-network" if env.allow_internet is False else "public"),
        allowed_hosts=tuple(env.allowed_hosts or ()),
        os=env.os,
        cpus=env.cpus,
        memory_mb=memory_mb,
        storage_mb=storage_mb,
        gpus=env.gpus,
        build_timeout_sec=env.build_timeout_sec,
        **_from_dockerfile(info),
    )
    multi_step = bool(cfg.get("steps"))
    instruction_md = _file(task_dir / "instruction.md")
    instruction = (
        (_strip_canary(instruction_md.read_text(errors="replace")) or None) if instruction_md else None
    )
    test_script = _file(task_dir / "tests" / "test.sh")
    if require_files and not multi_step:
        if instruction is None:
            raise TaskFormatError(task_dir, "instruction.md", "missing or empty")
        if test_script is None:
            raise TaskFormatError(task_dir, "tests/test.sh", "missing (the verifier's entry point)")
    solve = _file(task_dir / "solution" / "solve.sh")
    version = cfg.get("schema_version", cfg.get("version"))
    return HarborTask(
        name=task_dir.name,
        task_dir=task_dir,
        layout="harbor",
        schema_version=None if version is None else str(version),
        package_name=package.get("name"),
        instruction=instruction,
        agent_timeout_sec=agent.timeout_sec,
        verifier_timeout_sec=ver.timeout_sec,
        agent_user=agent.user,
        verifier_user=ver.user,
        verifier_env=ver.env,
        verifier_mode=ver.environment_mode or ("separate" if ver.environment is not None else "shared"),
        reward_source="reward_file",
        tests_dir=task_dir / "tests" if (task_dir / "tests").is_dir() else None,
        test_script=test_script,
        test_command=f"bash {TESTS_MOUNT}/test.sh",
        solution_dir=task_dir / "solution" if (task_dir / "solution").is_dir() else None,
        solution_script=solve,
        solution_command=f"bash {SOLUTION_MOUNT}/solve.sh" if solve else None,
        solution_env=sol.env,
        environment=environment,
        multi_step=multi_step,
        metadata=cfg.get("metadata", {}),
        config=cfg,
        unknown_keys=tuple(unknown),
    )


def load_task(task_dir: Path | str, require_files: bool = True) -> HarborTask:
    """Load one task dir (``task.toml`` wins over ``task.yaml``); raise :class:`TaskFormatError`.

    ``require_files=False`` also loads a task whose instruction or test script is missing (those fields are
    then None) so that :func:`structural_problems` can count it; a config that does not parse always raises.
    """
    task_dir = Path(task_dir).absolute()
    if not task_dir.is_dir():
        raise TaskFormatError(task_dir, ".", "not a directory")
    if (task_dir / "task.toml").is_file():
        return _harbor(task_dir, require_files)
    if (task_dir / "task.yaml").is_file():
        from infra.agents.harbor.terminal_bench import load_terminal_bench  # reads task.yaml (older layout)

        return load_terminal_bench(task_dir, require_files)
    raise TaskFormatError(task_dir, "task.toml", "missing (no task.toml or task.yaml)")


def load_tasks(root: Path | str, require_files: bool = True) -> tuple[list[HarborTask], list[str]]:
    """Load each task dir directly under ``root`` (sorted, dot-dirs skipped): the tasks that load, and one
    error line per task that does not."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: task root is not a directory")
    tasks: list[HarborTask] = []
    errors: list[str] = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            tasks.append(load_task(sub, require_files))
        except TaskFormatError as exc:
            errors.append(str(exc))
    return tasks, errors


def structural_problems(task: HarborTask) -> list[str]:
    """Return why ``task`` is not a runnable single-container, single-step terminal task ([] when it is)."""
    env = task.environment
    script = "tests/test.sh" if task.layout == "harbor" else "run-tests.sh"
    checks = [
        (task.instruction is None, "missing instruction"),
        (task.tests_dir is None and task.layout == "harbor", "missing tests/ directory"),
        (task.test_script is None, f"missing test script {script}"),
        (not env.defined, "no environment (no Dockerfile, compose file or docker_image)"),
        (env.multi_container, f"multi-container environment (services: {', '.join(env.services)})"),
        (task.multi_step, "multi-step task"),
        (env.os != "linux", f"{env.os} task"),
        (task.verifier_mode == "separate", "separate verifier environment"),
    ]
    return [problem for bad, problem in checks if bad]
