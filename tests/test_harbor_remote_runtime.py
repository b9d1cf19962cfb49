"""The ``harbor`` environment on a remote runtime (``runtime=e2b``): production's path for image-based tasks.

E2B cannot run here (no cluster, no API key), so the ``e2b`` SDK is replaced by a double at that boundary:
an in-memory cloud whose sandboxes record what they are asked (template, commands, uploads) and whose test
script "passes" when the agent wrote ``sorted.txt``. Everything above the SDK is the product's code: the
catalog's runtime filter, the template alias, the episode loop, the verifier protocol and aborts. The
policy's ``/generate`` is scripted (:mod:`agents_scripted`).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import types
from pathlib import Path

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from data_prep.harbor_generate import generate
from infra.agents.contract import EnvironmentFailure, Termination
from infra.agents.envs.base import load_environment
from infra.agents.harbor.backends import E2BBackend, template_specs
from infra.agents.harbor.env import HarborEnv
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode

OBS, EOS = "<|observation|>", "<|endoftext|>"


class FakeCloud:
    """A double of the E2B API: sandboxes in memory, the test script scored by what the agent ran."""

    def __init__(self, boot_error: str | None = None) -> None:
        self.boot_error = boot_error
        self.sandboxes: list[FakeSandbox] = []
        self.module = types.ModuleType("e2b")
        for name in ("SandboxException", "CommandExitException", "TimeoutException", "NotFoundException"):
            setattr(self.module, name, type(name, (Exception,), {}))
        cloud = self

        class Sandbox:
            @staticmethod
            def create(template: str, timeout: int, envs: dict, allow_internet_access: bool):
                if cloud.boot_error:
                    raise cloud.module.SandboxException(cloud.boot_error)
                box = FakeSandbox(cloud.module, template)
                cloud.sandboxes.append(box)
                return box

        self.module.Sandbox = Sandbox


class FakeSandbox:
    """One double sandbox: ``commands.run``, ``files.write/read`` and ``kill``, as the SDK's are called."""

    def __init__(self, module: types.ModuleType, template: str) -> None:
        self.template = template
        self.ran: list[tuple[str, str]] = []  # (command, cwd)
        self.store: dict[str, bytes] = {}
        self.killed = False
        ran, store = self.ran, self.store

        def run(command: str, cwd: str, user: str, envs: dict | None, timeout: float):
            ran.append((command, cwd))
            if command.endswith("test.sh"):  # the task's test command: passes iff sorted.txt was written
                wrote = any("sorted.txt" in c for c, _ in ran[:-1])
                store["/logs/verifier/reward.txt"] = b"1" if wrote else b"0"
            return types.SimpleNamespace(stdout="ok\n", stderr="", exit_code=0)

        def write(path: str, data: bytes, user: str) -> None:
            store[path] = data

        def read(path: str, user: str) -> str:
            if path not in store:
                raise module.NotFoundException(path)
            return store[path].decode()

        self.commands = types.SimpleNamespace(run=run)
        self.files = types.SimpleNamespace(write=write, read=read)

    def kill(self) -> None:
        self.killed = True


@pytest.fixture()
def tasks(tmp_path: Path) -> Path:
    """Two generated files-only tasks and one whose Dockerfile has a RUN step (needs its image)."""
    root = tmp_path / "tasks"
    generate(root, seed=0, n=2)
    build = shutil.copytree(root / "text-sort-0000", root / "needs-build")
    (build / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN pip install numpy\nWORKDIR /srv\nCOPY files/ /srv/\n"
    )
    toml = build / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"', 'workdir = "/srv"'))
    return root


def _episode(env: HarborEnv, task, turns: list[tuple[str, str]]):
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


def _call(command: str) -> str:
    return f"<tool_call>execute_command<arg_key>command</arg_key><arg_value>{command}</arg_value></tool_call>"


def test_e2b_runtime_keeps_image_tasks_and_boots_their_baked_template(tasks: Path, monkeypatch) -> None:
    cloud = FakeCloud()
    monkeypatch.setitem(sys.modules, "e2b", cloud.module)
    local = load_environment(f"harbor:tasks={tasks}")
    assert local.catalog.counts["unrunnable"] == 1 and "needs-build" not in local.catalog.tasks
    env = load_environment(f"harbor:tasks={tasks},runtime=e2b,e2b_prefix=rufus-05,max_iterations=4")
    assert isinstance(env, HarborEnv) and env.catalog.counts == {"tasks": 3, "malformed": 0, "unrunnable": 0}
    task = next(t for t in env.tasks(3) if t.metadata["task"] == "needs-build")
    assert "working directory is /srv" in task.messages[0]["content"]  # the image's WORKDIR, not /app

    solved = _episode(env, task, [(_call("sort in.txt > sorted.txt"), OBS), ("Done.", EOS)])
    assert solved.termination is Termination.FINAL_ANSWER and solved.reward == 1.0, solved.error
    [box] = cloud.sandboxes
    harbor_task = env.catalog.task("needs-build")
    assert box.template == template_specs([harbor_task], "rufus-05")[0]["alias"] == "rufus-05-needs-build"
    assert ("sort in.txt > sorted.txt", "/srv") in box.ran  # the agent's command, in the image's workdir
    assert any(path.startswith("/tests/") for path in box.store)  # tests uploaded only at verification
    assert box.killed and env.session is None  # one sandbox per episode, destroyed at the end

    idle = _episode(env, task, [("Nothing to do.", EOS)])
    assert idle.reward == 0.0 and not idle.reward_details["aborted"] and len(cloud.sandboxes) == 2


def test_a_template_that_does_not_boot_aborts_the_episode(tasks: Path, monkeypatch) -> None:
    cloud = FakeCloud(boot_error="template not found")
    monkeypatch.setitem(sys.modules, "e2b", cloud.module)
    env = HarborEnv(str(tasks), runtime="e2b")
    [task] = [t for t in env.tasks(3) if t.metadata["task"] == "needs-build"]
    with pytest.raises(EnvironmentFailure, match="rufus-05-needs-build.*did not boot"):
        asyncio.run(env.reset(task))
    result = _episode(env, task, [("never asked", EOS)])
    assert result.termination is Termination.ABORTED and result.reward is None
    assert "template not found" in (result.error or "")


def test_runtime_options_are_checked(tasks: Path) -> None:
    with pytest.raises(ValueError, match="runtime 'podman': expected one of local, docker, e2b"):
        HarborEnv(str(tasks), runtime="podman")
    with pytest.raises(ValueError, match="redirect_outputs/background_long_commands need runtime=local"):
        HarborEnv(str(tasks), runtime="e2b", redirect_outputs=1)
    assert isinstance(HarborEnv(str(tasks), runtime="e2b").backend, E2BBackend)


def test_stage_05_production_runs_on_e2b_and_its_preflight_needs_the_key(monkeypatch) -> None:
    from infra.production.preflight import check_environment
    from infra.recipe import REPO_ROOT, resolve_stage

    stage = resolve_stage(REPO_ROOT / "stages" / "05_coding_agent", "production")
    assert ",runtime=e2b,e2b_prefix=rufus-05," in stage.config.rl.environment.options["env"]
    monkeypatch.setitem(sys.modules, "e2b", FakeCloud().module)
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    check = check_environment(stage)
    assert check.status == "fail" and "E2B_API_KEY is not set" in check.detail, check
    monkeypatch.setenv("E2B_API_KEY", "test-key")  # with a key the environment builds (no sandbox is booted)
    assert check_environment(stage).status == "ok"
