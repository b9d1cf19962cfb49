"""Harbor task loader (both layouts, malformed tasks named in errors) and the offline tiny-task generator."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from data_prep.harbor_generate import KINDS, generate, main, make_task
from infra.agents.harbor.task import (
    HARBOR_SCHEMA_VERSION,
    TaskFormatError,
    load_task,
    load_tasks,
    structural_problems,
)

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
HARBOR_TASK = FIXTURES / "valid" / "count-words"
TB_TASK = FIXTURES / "valid" / "tb-hello-world"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_harbor_layout_fixture_is_normalised() -> None:
    task = load_task(HARBOR_TASK)
    assert (task.layout, task.name, task.schema_version) == ("harbor", "count-words", "1.4")
    assert task.package_name == "rufus-fixtures/count-words"
    assert (
        task.instruction
        == "Count the words in /app/notes.txt and write the number, alone, to /app/count.txt."
    )
    assert (task.agent_timeout_sec, task.verifier_timeout_sec) == (300.0, 120.0)
    assert task.verifier_env == {"LC_ALL": "C"} and task.verifier_mode == "shared"
    assert task.reward_source == "reward_file" and task.test_command == "bash /tests/test.sh"
    assert task.test_script == HARBOR_TASK.absolute() / "tests" / "test.sh"
    assert task.solution_command == "bash /solution/solve.sh" and task.solution_env == {"SOLVER": "oracle"}
    assert task.metadata["tags"] == ["wc"]
    env = task.environment
    assert (
        env.dockerfile == HARBOR_TASK.absolute() / "environment" / "Dockerfile" and env.compose_file is None
    )
    assert (env.network_mode, env.workdir, env.cpus, env.memory_mb, env.storage_mb) == (
        "no-network", "/app", 1.0, 1024, 2048,
    )  # fmt: skip
    assert env.base_image == "ubuntu:24.04" and env.image_env == {"LANG": "C.UTF-8", "PAGER": "cat"}
    assert env.task_env == {"GREETING": "${GREETING:-hello}"}
    [copy] = env.copies
    assert copy.dest == "/app/" and copy.sources == ((HARBOR_TASK / "environment" / "files").resolve(),)
    assert env.files_only and not env.multi_container
    # An extension key inside a known table is kept, and listed as unknown to the spec.
    assert task.unknown_keys == ("environment.scratch_note",)
    assert task.config["environment"]["scratch_note"] == "an extension key Harbor ignores"
    assert structural_problems(task) == []


def test_terminal_bench_layout_fixture_is_normalised() -> None:
    task = load_task(TB_TASK)
    assert (task.layout, task.schema_version) == ("terminal-bench", None)
    assert task.instruction == 'Create a file called /app/hello.txt. Write "Hello, world!" to it.'
    assert (task.agent_timeout_sec, task.verifier_timeout_sec) == (900.0, 180.0)
    assert task.reward_source == "exit_code" and task.test_command == "bash /tests/run-tests.sh"
    assert task.test_script == TB_TASK.absolute() / "run-tests.sh" and task.verifier_env == {
        "TEST_DIR": "/tests"
    }
    assert task.tests_dir == TB_TASK.absolute() / "tests"
    assert task.solution_command == "bash /solution/solution.sh" and task.solution_dir is None
    assert task.metadata["difficulty"] == "easy" and task.metadata["parser_name"] == "pytest"
    env = task.environment
    assert env.services == ("client",) and not env.multi_container
    assert env.compose_file == TB_TASK.absolute() / "docker-compose.yaml"
    # The compose `image:` is a harness variable, not a prebuilt image.
    assert env.docker_image is None and env.base_image == "python:3.11-slim" and env.workdir == "/app"
    assert not env.files_only  # it RUNs apt-get
    assert structural_problems(task) == []


def test_malformed_tasks_are_named_with_file_and_key_and_the_rest_still_load(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    shutil.copytree(FIXTURES / "malformed", root)
    for task in ("count-words", "tb-hello-world"):
        shutil.copytree(FIXTURES / "valid" / task, root / task)
    tasks, errors = load_tasks(root)
    assert sorted(t.name for t in tasks) == ["count-words", "tb-hello-world"]
    expected = {
        "bad-toml": "task.toml: invalid TOML: ",
        "bad-type": "task.toml: [environment].cpus: Input should be a valid number",
        "missing-test-sh": "tests/test.sh: missing",
        "tb-no-instruction": "task.yaml: instruction: Field required",
        "unknown-table": "task.toml: [runtime]: unknown top-level table",
    }
    assert len(errors) == len(expected)
    for error, (name, fragment) in zip(errors, sorted(expected.items()), strict=True):
        assert error.startswith(f"{root.absolute() / name}: {fragment}"), error
        assert "\n" not in error
    assert "(at line 4, column 15)" in errors[0]


def test_require_files_false_defers_missing_files_to_the_structural_filter(tmp_path: Path) -> None:
    task_dir = _copy(HARBOR_TASK, tmp_path / "t")
    (task_dir / "tests" / "test.sh").unlink()
    (task_dir / "instruction.md").write_text("<!-- canary GUID x -->\n\n")
    with pytest.raises(TaskFormatError, match=r"/t: instruction.md: missing or empty"):
        load_task(task_dir)
    task = load_task(task_dir, require_files=False)
    assert structural_problems(task) == ["missing instruction", "missing test script tests/test.sh"]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("compose-two", "multi-container environment (services: main, db)"),
        ("no-environment", "no environment (no Dockerfile, compose file or docker_image)"),
        ("steps", "multi-step task"),
        ("separate-verifier", "separate verifier environment"),
        ("image-only", None),
    ],
)
def test_structural_problems(tmp_path: Path, edit: str, problem: str | None) -> None:
    task_dir = _copy(HARBOR_TASK, tmp_path / "t")
    toml = task_dir / "task.toml"
    if edit == "compose-two":
        (task_dir / "environment" / "docker-compose.yaml").write_text(
            "services:\n  main:\n    build: .\n  db:\n    image: postgres:16\n"
        )
    elif edit in ("no-environment", "image-only"):
        shutil.rmtree(task_dir / "environment")
        if edit == "image-only":
            toml.write_text(
                toml.read_text().replace("[environment]\n", '[environment]\ndocker_image = "u:1"\n')
            )
    elif edit == "steps":
        toml.write_text('steps = [{ name = "one" }]\n' + toml.read_text())
    else:
        toml.write_text(toml.read_text() + '\n[verifier.environment]\ndocker_image = "checker:1"\n')
    task = load_task(task_dir)
    assert structural_problems(task) == ([problem] if problem else [])


def test_terminal_bench_multi_container_and_early_descriptions_form(tmp_path: Path) -> None:
    task_dir = _copy(TB_TASK, tmp_path / "tb")
    compose = task_dir / "docker-compose.yaml"
    compose.write_text(compose.read_text() + "  redis:\n    image: redis:7\n")
    (task_dir / "task.yaml").write_text(
        "descriptions:\n  - key: base\n    description: Say hi.\ndifficulty: easy\nlegacy_flag: true\n"
    )
    task = load_task(task_dir)
    assert task.instruction == "Say hi." and task.unknown_keys == ("legacy_flag",)
    assert (task.agent_timeout_sec, task.verifier_timeout_sec) == (360.0, 60.0)  # Terminal-Bench defaults
    assert structural_problems(task) == ["multi-container environment (services: client, redis)"]


def test_legacy_task_toml_fields_are_mapped(tmp_path: Path) -> None:
    task_dir = _copy(HARBOR_TASK, tmp_path / "t")
    (task_dir / "task.toml").write_text(
        'version = "1.0"\n[environment]\nmemory = "2G"\nstorage = "512M"\nallow_internet = false\n'
    )
    task = load_task(task_dir)
    assert (
        task.schema_version == "1.0" and task.verifier_timeout_sec == 600.0 and task.agent_timeout_sec is None
    )
    env = task.environment
    assert (env.memory_mb, env.storage_mb, env.network_mode, env.workdir) == (2048, 512, "no-network", "/app")
    (task_dir / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(TaskFormatError, match=r"task.toml: \[environment\].memory: size 'lots'"):
        load_task(task_dir)


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        (
            "FROM a\nCOPY ../tests/test.sh /x\n",
            "line 2: COPY source '../tests/test.sh' escapes the build context",
        ),
        ("FROM a\n\nCOPY nope.txt /x\n", "line 3: COPY source 'nope.txt' not found"),
        ("FROM a\nADD\n", "line 2: ADD needs a source and a destination"),
    ],
)
def test_dockerfile_errors_name_the_line(tmp_path: Path, dockerfile: str, message: str) -> None:
    task_dir = _copy(HARBOR_TASK, tmp_path / "t")
    (task_dir / "environment" / "Dockerfile").write_text(dockerfile)
    with pytest.raises(TaskFormatError) as info:
        load_task(task_dir)
    assert str(info.value).startswith(f"{task_dir.absolute()}: environment/Dockerfile: {message}")


def test_dockerfile_continuations_workdir_and_stages(tmp_path: Path) -> None:
    task_dir = _copy(HARBOR_TASK, tmp_path / "t")
    dockerfile = task_dir / "environment" / "Dockerfile"
    dockerfile.write_text(
        "# syntax=docker/dockerfile:1\nFROM python:3.11-slim AS base\nWORKDIR /srv\nWORKDIR data\n"
        'COPY --chown=1000:1000 files/notes.txt \\\n     ./in/\nCOPY ["files", "/opt/f"]\n'
    )
    task = load_task(task_dir)
    env = task.environment
    assert env.workdir == "/app"  # [environment].workdir wins over the Dockerfile's
    assert [(c.line, c.dest) for c in env.copies] == [(5, "/srv/data/in/"), (7, "/opt/f")]
    assert env.files_only
    dockerfile.write_text(dockerfile.read_text() + "FROM base AS final\nCOPY --from=base /srv /srv\n")
    assert not load_task(task_dir).environment.files_only
    dockerfile.write_text("FROM a\nRUN pip install requests\n")
    assert not load_task(task_dir).environment.files_only


def test_generator_is_deterministic_and_its_tasks_pass_the_loader(tmp_path: Path) -> None:
    names = generate(tmp_path / "a", seed=7, n=12)
    generate(tmp_path / "b", seed=7, n=12)
    generate(tmp_path / "c", seed=8, n=12)

    def tree(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert tree(tmp_path / "a") == tree(tmp_path / "b") != tree(tmp_path / "c")
    tasks, errors = load_tasks(tmp_path / "a")
    assert errors == [] and [t.name for t in tasks] == sorted(names)
    assert {t.metadata["kind"] for t in tasks} == set(KINDS)
    for task in tasks:
        assert structural_problems(task) == [] and task.environment.files_only
        assert task.schema_version == HARBOR_SCHEMA_VERSION and task.environment.network_mode == "no-network"
        assert len(task.instruction.split()) <= 40
        solve = task.solution_script.read_text().splitlines()
        assert 1 <= len([line for line in solve if line and not line.startswith("#")]) <= 2
        test_sh = task.test_script.read_text()
        assert "/logs/verifier/reward.txt" in test_sh
        assert not any(word in test_sh for word in ("curl", "wget", "pip ", "apt", "uv "))


def test_cli_writes_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--seed", "3", "--n", "4"]) == 0
    assert "wrote 4 Harbor tasks" in capsys.readouterr().out
    assert len(load_tasks(tmp_path)[0]) == 4
    assert main(["--out", str(tmp_path), "--seed", "3", "--n", "4"]) == 0  # a rerun overwrites its own tasks
    assert main(["--out", str(tmp_path), "--seed", "4", "--n", "4"]) == 2  # another run would mix in
    assert "holds entries this run would not write" in capsys.readouterr().err


def _run_trusted(task_dir: Path, work: Path, solve: bool) -> str:
    app, logs = work / "app", work / "logs" / "verifier"
    shutil.copytree(task_dir / "environment" / "files", app)
    logs.mkdir(parents=True)
    if solve:
        subprocess.run(["bash", str(task_dir / "solution" / "solve.sh")], cwd=app, check=True, timeout=30)
    test_sh = work / "test.sh"
    test_sh.write_text((task_dir / "tests" / "test.sh").read_text().replace("/logs/verifier", str(logs)))
    subprocess.run(["bash", str(test_sh)], cwd=app, timeout=30, capture_output=True)
    return (logs / "reward.txt").read_text().strip()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_generated_reference_passes_and_doing_nothing_fails(tmp_path: Path) -> None:
    """Generator self-check: solve.sh then test.sh gives reward 1; test.sh on the untouched workspace gives 0.

    This runs OUR OWN generated scripts (trusted: written by data_prep.harbor_generate in this repo) as plain
    subprocesses in a temporary copy, OUTSIDE the project sandbox; third-party task scripts never run this
    way (they go through the Harbor runtime on infra.sandbox). /logs/verifier is remapped into the copy.
    """
    generate(tmp_path / "tasks", seed=0, n=28)
    variants = set()
    for task_dir in sorted((tmp_path / "tasks").iterdir()):
        assert _run_trusted(task_dir, tmp_path / "ref" / task_dir.name, solve=True) == "1", task_dir.name
        assert _run_trusted(task_dir, tmp_path / "noop" / task_dir.name, solve=False) == "0", task_dir.name
        variants.add(task_dir.name.rsplit("-", 1)[0])
    assert len(variants) >= 12  # most variants of every kind are exercised
    assert {make_task(0, i).kind for i in range(4)} == set(KINDS)
