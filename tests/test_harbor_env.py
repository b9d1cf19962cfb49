"""The ``harbor`` agent environment and the ``harbor_tests`` reward, on tasks from data_prep.harbor_generate.

Episodes run through the real agent loop, tool layer and sandbox; only the generation backend behind
``/generate`` is scripted (:mod:`agents_scripted`), because an untrained model cannot be steered into tool
calls. Sandbox tests skip without root, like the runtime's. The boot failure is real, not a double: a task
whose files do not fit the sandbox's ``/app`` fails while its sandbox boots.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from data_prep.harbor_generate import generate
from infra.agents.contract import EnvironmentFailure, Termination
from infra.agents.envs.base import load_environment
from infra.agents.harbor.env import HarborEnv
from infra.agents.harbor.local_runtime import RuntimeCache, RuntimeOptions, build_workspace, open_session
from infra.agents.harbor.reward import harbor_tests
from infra.agents.harbor.task import load_task
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.environments import build_environment
from rewards.contract import RewardRequest

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
OBS, EOS = "<|observation|>", "<|endoftext|>"


def task_root(root: Path, n: int = 3) -> Path:
    """``n`` generated tasks, one malformed task dir and one task that needs a real image build."""
    generate(root, seed=0, n=n)
    shutil.copytree(FIXTURES / "malformed" / "unknown-table", root / "broken-task")
    build = shutil.copytree(root / "text-sort-0000", root / "needs-build")
    (build / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nRUN pip install numpy\n")
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return task_root(tmp_path_factory.mktemp("harbor-tasks"))


def test_spec_loads_tasks_and_names_each_dropped_task_once(tmp_path: Path, caplog) -> None:
    root = task_root(tmp_path / "tasks")
    spec = f"harbor:tasks={root},spares=1,command_timeout=20,max_iterations=6"
    with caplog.at_level(logging.WARNING, logger="infra.agents.harbor.env"):
        env = load_environment(spec)
        assert isinstance(env, HarborEnv) and env.catalog.counts == {
            "tasks": 3,
            "malformed": 1,
            "unrunnable": 1,
        }
        load_environment(spec).tasks(2)  # the same root again: loaded once per process
    lines = [r.getMessage() for r in caplog.records if r.name == "infra.agents.harbor.env"]
    assert len(lines) == 2
    assert sum("broken-task" in x and "unknown top-level table" in x for x in lines) == 1
    assert sum("needs-build" in x and "not files-only" in x for x in lines) == 1
    assert env.options == RuntimeOptions(spares=1, command_timeout=20.0)
    assert env.limits.max_iterations == 6 and env.tools() == []  # no tool outside an episode
    tasks = env.tasks(5, seed=3)
    assert [t.id for t in tasks] == [t.id for t in env.tasks(5, seed=3)]
    assert sorted(t.id for t in tasks[:3]) == [f"harbor-{n}" for n in sorted(env.catalog.tasks)]
    assert tasks[3].id.endswith("-r1") and tasks[3].id.startswith(tasks[0].id)
    first = load_task(tasks[0].metadata["task_dir"])
    assert tasks[0].messages[0]["role"] == "system" and "execute_command" in tasks[0].messages[0]["content"]
    assert tasks[0].messages[1] == {"role": "user", "content": first.instruction}
    assert tasks[0].metadata == {"env": "harbor", "task": first.name, "task_dir": str(first.task_dir)}
    with pytest.raises(KeyError, match="needs-build.*not files-only"):
        env.catalog.task("needs-build")
    stage_env = build_environment("agent", {"env": spec}, reward=None)
    assert stage_env.slime_settings()["agent_env"] == spec


def test_workspace_follows_the_dockerfile_copies(tmp_path: Path) -> None:
    task_dir = shutil.copytree(FIXTURES / "valid" / "count-words", tmp_path / "t")
    ctx = task_dir / "environment"
    (ctx / "extra.txt").write_text("x\n")
    (ctx / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nWORKDIR /app\nCOPY files/ /app/\nCOPY extra.txt sub/renamed.txt\n"
        "COPY extra.txt files/notes.txt /app/both/\n"
    )
    build_workspace(load_task(task_dir), tmp_path / "app")
    got = sorted(str(p.relative_to(tmp_path / "app")) for p in (tmp_path / "app").rglob("*") if p.is_file())
    assert got == ["both/extra.txt", "both/notes.txt", "notes.txt", "sub/renamed.txt"]


def _call(command: str) -> str:
    return f"<tool_call>execute_command<arg_key>command</arg_key><arg_value>{command}</arg_value></tool_call>"


def _episode(env: HarborEnv, task, turns: list[tuple[str, str]]):
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


@pytest.fixture(scope="module")
def episodes(sandbox_ok, root: Path):
    """The task's reference solution played as tool calls, and an episode that does nothing."""
    env = HarborEnv(str(root), spares=1, max_iterations=8)
    task = next(t for t in env.tasks(3) if t.metadata["task"] == "text-sort-0000")
    solve = Path(task.metadata["task_dir"], "solution", "solve.sh").read_text().splitlines()
    commands = [c for c in solve if c.strip() and not c.startswith("#")]
    solved = _episode(env, task, [*((_call(c), OBS) for c in commands), ("Done: sorted.txt written.", EOS)])
    idle = _episode(HarborEnv(str(root), spares=1), task, [("Nothing to do.", EOS)])
    return task, commands, solved, idle


def test_the_reference_solution_scores_one_and_doing_nothing_scores_zero(episodes) -> None:
    _, commands, solved, idle = episodes
    assert solved.termination is Termination.FINAL_ANSWER and solved.reward == 1.0, solved.error
    assert solved.metrics["tools_executed"] == len(commands) >= 1
    assert [c["name"] for e in solved.transcript for c in e.get("tool_calls", [])] == ["execute_command"]
    assert idle.termination is Termination.FINAL_ANSWER and idle.reward == 0.0
    assert idle.reward_details["failure"] == "tests_failed" and not idle.reward_details["aborted"]


def test_reward_outside_an_episode_replays_the_transcript_and_agrees(episodes) -> None:
    task, commands, solved, idle = episodes
    for result, replayed_commands in ((solved, len(commands)), (idle, 0)):
        request = RewardRequest(response="", metadata=dict(task.metadata), transcript=result.transcript)
        replayed = harbor_tests(request)
        assert (replayed.score, replayed.aborted) == (result.reward, False)
        assert replayed.details["replayed_commands"] == replayed_commands
    junk = [{"role": "assistant", "tool_calls": [5, {"name": "execute_command", "input": "ls"}]}, "x"]
    res = harbor_tests(RewardRequest(response="", metadata={"transcript": junk, **task.metadata}))
    assert (res.score, res.aborted, res.details["replayed_commands"]) == (0.0, False, 0)
    assert harbor_tests(RewardRequest(response="Done.", transcript=[])).aborted  # no task named
    gone = harbor_tests(RewardRequest(response="", metadata={"task_dir": "/nonexistent/t"}, transcript=[]))
    assert gone.aborted and "/nonexistent/t" in gone.details["error"]


def test_a_sandbox_that_does_not_boot_aborts_the_episode(sandbox_ok, tmp_path: Path) -> None:
    generate(tmp_path / "tasks", seed=0, n=1)
    files = tmp_path / "tasks" / "text-sort-0000" / "environment" / "files"
    (files / "big.bin").write_bytes(b"\0" * (2 << 20))  # does not fit a 1 MiB /app
    env = HarborEnv(str(tmp_path / "tasks"), spares=0, workspace_mb=1)
    [task] = env.tasks(1)
    with pytest.raises(EnvironmentFailure, match="sandbox did not boot.*copying the task's files"):
        asyncio.run(env.reset(task))
    result = _episode(env, task, [("never asked", EOS)])
    assert result.termination is Termination.ABORTED and result.reward is None
    assert "did not boot" in (result.error or "")


def test_runtime_cache_closes_idle_runtimes_past_its_capacity(sandbox_ok, root: Path) -> None:
    cache, opts = RuntimeCache(1), RuntimeOptions(spares=0)
    first, second = (load_task(root / name) for name in ("text-sort-0000", "python-name-0001"))
    key_a, session_a = open_session(first, opts, cache)
    key_b, session_b = open_session(second, opts, cache)
    assert cache.open_runtimes() == 2  # both in use: neither is closed
    rt_a = session_a.rt
    session_a.close()
    cache.release(key_a)
    assert cache.open_runtimes() == 1 and not rt_a.cache.exists()
    assert session_b.execute("ls").stdout == "sum.py\n"
    session_b.close()
    cache.release(key_b)
    cache.close()
    assert cache.open_runtimes() == 0
