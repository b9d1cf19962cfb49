"""Stage 08's ``kw`` environment: fresh workspace and database per episode, gold vs idle episodes, aborts,
bash in the sandbox, and the task folders it refuses.

Episodes run the real agent loop, Feather harness, sandboxed system-of-record servers and ``kw_rubric``;
only ``/generate`` is scripted (:mod:`agents_scripted`), because an untrained model cannot be steered
into tool calls. Everything that needs the sandbox skips without root (``sandbox_ok``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from data_prep.kw_synthesis import write_tasks
from data_prep.tiny_tasks.knowledge_work import kw_tasks
from infra.agents.contract import Termination
from infra.agents.envs.base import ENVIRONMENTS, load_environment
from infra.agents.kw.env import KwEnv
from infra.agents.kw.family import LIMITS, gold_actions
from infra.agents.kw.tasks import KwCatalog
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.embedded.generation import Generation
from infra.recipe import REPO_ROOT
from rewards.contract import RewardRequest

OBS, EOS = "<|observation|>", "<|endoftext|>"
#: The tiny budgets, with room for a gold turn that writes a whole deliverable in one model call.
EPISODE = {**LIMITS, "max_new_tokens": 1536}


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kw") / "release"
    write_tasks(root, kw_tasks(3, 0))  # one task of each environment type
    return root


@pytest.fixture(scope="module")
def env(release: Path, sandbox_ok) -> KwEnv:
    return KwEnv(str(release), spares=1, servers=2, workspace_mb=16, **EPISODE)


def by_type(env: KwEnv, env_type: str) -> Any:
    return next(t for t in env.tasks(3) if t.metadata["env_type"] == env_type)


def call(name: str, args: dict[str, Any]) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def episode(env: KwEnv, task: Any, backend: Any) -> Any:
    tok = micro_tokenizer()
    with GenerateServer(backend, tok, max_context_tokens=8192) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


async def use(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    events = [e async for e in tool.stream({"toolUseId": "t", "name": tool.tool_name, "input": args}, {})]
    return events[-1]["tool_result"]


def test_both_names_are_registered_and_a_spec_needs_no_tasks_to_build(tmp_path: Path) -> None:
    assert ENVIRONMENTS["kw"] == "infra.agents.kw.env:KwEnv"
    assert ENVIRONMENTS["kw_tiny"] == "infra.agents.kw.tiny:TinyKwEnv"
    env = load_environment(f"kw:tasks={tmp_path / 'absent'},transport=mcp,max_tool_calls=9")
    assert (
        isinstance(env, KwEnv) and env.limits.max_tool_calls == 9 and env.runtime_options.transport == "mcp"
    )
    with pytest.raises(ValueError, match="transport='http'"):
        KwEnv(str(tmp_path), transport="http")


def test_catalog_drops_folders_it_cannot_run(release: Path, tmp_path: Path) -> None:
    root = tmp_path / "rel"
    shutil.copytree(release, root)
    names = sorted(p.name for p in root.iterdir())
    shutil.rmtree(root / names[0] / "environment" / "services")
    tools = next((root / names[1] / "environment" / "services").iterdir()) / "tools.json"
    spec = json.loads(tools.read_text())
    spec["api_groups"][0]["endpoints"][0]["operation_id"] = "bash"  # would shadow Feather's bash
    tools.write_text(json.dumps(spec))
    cat = KwCatalog(str(root))
    assert sorted(cat.tasks) == [names[2]] and cat.counts == {"tasks": 1, "dropped": 2}
    assert "server.py is missing" in cat.dropped[names[0]] and "['bash']" in cat.dropped[names[1]]
    with pytest.raises(KeyError, match="server.py is missing"):
        cat.task(names[0])
    label = cat.tasks[names[2]].label
    assert label.deliverables and all(c.kind == "code" for c in label.rubric)


def test_each_episode_gets_a_fresh_workspace_and_database(env: KwEnv) -> None:
    task = by_type(env, "ticket_tracker_update")
    spec = env.catalog.task(task.metadata["task"])
    tracker = next(p.name for p in spec.files_dir.iterdir())

    async def first() -> None:
        await env.reset(task)
        tools = {t.tool_name: t for t in env.tools()}
        assert not env.harness.call("bash", {"command": f"rm {tracker} && echo scribble > notes.txt"})[1]
        assert (await use(tools["delete_ticket"], {"item_id": 1}))["status"] == "success"
        rows = json.loads((await use(tools["list_tickets"], {}))["content"][0]["text"])
        assert 1 not in [r["id"] for r in rows]
        await env.cleanup()

    async def second() -> tuple[str, list[int]]:
        await env.reset(task)
        try:
            listing, _ = env.harness.call("glob", {"pattern": "*"})
            rows = json.loads(
                (await use({t.tool_name: t for t in env.tools()}["list_tickets"], {}))["content"][0]["text"]
            )
            return listing, [r["id"] for r in rows]
        finally:
            await env.cleanup()

    asyncio.run(first())
    listing, ids = asyncio.run(second())  # a new event loop: the warm server must have survived the last one
    assert listing.splitlines() == [tracker, "truncated: false"] and 1 in ids


@pytest.mark.parametrize(
    "env_type", ["invoice_ledger_reconciliation", "contract_dates_memo", "ticket_tracker_update"]
)
def test_gold_tool_calls_score_one_and_doing_nothing_scores_zero(env: KwEnv, env_type: str) -> None:
    task = by_type(env, env_type)
    spec = env.catalog.task(task.metadata["task"])
    listing = next(op for s in spec.services for op in s.operation_ids() if op.startswith("list_"))
    gold = "<think>look, then write</think>\n" + call(listing, {})
    gold += "".join(call(name, args) for name, args in gold_actions(spec.task_dir))
    done = episode(env, task, ScriptedBackend(micro_tokenizer(), [(gold, OBS), ("Done.", EOS)]))
    assert done.termination is Termination.FINAL_ANSWER and done.reward == 1.0, done.reward_details
    assert done.metrics["tool_errors"] == 0 and done.metrics["tool_calls"] == 1 + len(
        gold_actions(spec.task_dir)
    )
    idle = episode(env, task, ScriptedBackend(micro_tokenizer(), [("Done.", EOS)]))
    assert idle.termination is Termination.FINAL_ANSWER and idle.reward == 0.0
    assert idle.reward_details["aborted"] is False


def test_a_broken_sandbox_aborts_the_episode_instead_of_scoring_zero(env: KwEnv) -> None:
    task = by_type(env, "contract_dates_memo")
    tok = micro_tokenizer()
    script = ScriptedBackend(tok, [(call("bash", {"command": "ls"}), OBS), ("Done.", EOS)])

    def backend(ids: list[int], **kw: Any) -> Generation:
        if script.calls == 0:
            env.session._box.proc.kill()  # the sandbox dies under the episode (the environment's fault)
        return script(ids, **kw)

    result = episode(env, task, backend)
    assert result.termination is Termination.ABORTED and result.reward is None
    assert "harbor sandbox failed" in (result.error or ""), result.error


def test_scoring_aborts_when_the_workspace_cannot_be_copied_or_a_judge_is_missing(
    env: KwEnv, monkeypatch
) -> None:
    task = by_type(env, "contract_dates_memo")
    request = RewardRequest(
        prompt=task.messages, response="Done.", label=task.ground_truth, metadata=task.metadata
    )
    tone = {"id": "tone", "requirement": "Addressed to general counsel.", "weight": 1.0, "kind": "judge"}
    judged = {**task.ground_truth, "rubric": [*task.ground_truth["rubric"], tone]}
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("RUFUS_JUDGE_MODEL", raising=False)

    async def run() -> tuple[Any, Any]:
        await env.reset(task)
        try:
            no_judge = env.score(task, request.model_copy(update={"label": judged}))
            env.session._box.proc.kill()
            return no_judge, env.score(task, request)
        finally:
            await env.cleanup()

    no_judge, dead = asyncio.run(run())
    assert no_judge.aborted and no_judge.failure == "judge_unavailable"
    assert dead.aborted and dead.failure == "environment" and "sandbox failed" in dead.details["error"]


def test_bash_runs_in_the_sandbox_not_on_the_host(env: KwEnv) -> None:
    task = by_type(env, "invoice_ledger_reconciliation")
    spec = env.catalog.task(task.metadata["task"])
    private = spec.task_dir / "tests" / "rubric.json"
    repo_file = (
        REPO_ROOT / "pyproject.toml"
    )  # the interpreter's venv may be bound in, the working tree is not

    async def run() -> str:
        await env.reset(task)
        try:
            script = f"id -u; test -e {repo_file} && echo repo || echo no-repo; "
            script += f"test -e {private} && echo rubric || echo no-rubric; pwd"
            text, failed = env.harness.call("bash", {"command": script})
            assert not failed, text
            return text
        finally:
            await env.cleanup()

    uid, repo, rubric, cwd = asyncio.run(run()).splitlines()[:4]
    assert int(uid) >= 100_000 and (repo, rubric, cwd) == ("no-repo", "no-rubric", "/app")


def test_a_rollout_refuses_more_workers_than_the_service_runners_it_can_hold(release: Path) -> None:
    """With fewer runners than lockstep workers the rollout stalled (episodes waiting on each other)."""
    from infra.environments.agent import AgentOptions, AgentToolEnvironment
    from infra.layering import ConfigError

    spec = f"kw:tasks={release},servers=2"
    assert load_environment(spec).episode_capacity() == 2
    assert load_environment(f"{spec},transport=mcp").episode_capacity() is None  # a server per episode
    env = AgentToolEnvironment(AgentOptions(env=spec, concurrency=4))
    assert env.worker_slots(1) == 1  # one episode needs one worker
    with pytest.raises(ConfigError, match=r"rl.environment.options.concurrency=4: .* only 2 episodes"):
        env.worker_slots(64)
    assert AgentToolEnvironment(AgentOptions(env="kw_tiny", concurrency=4)).worker_slots(64) == 4
