"""The AWM environment layer: release loader, sandboxed server and verifier, the ``awm`` agent environment."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from infra.agents.awm.env import AwmEnv, endpoint_tool
from infra.agents.awm.release import ReleaseError, load_release
from infra.agents.awm.server import AwmServerPool, VerifierRunner
from infra.agents.contract import EnvironmentFailure, Termination
from infra.agents.envs.base import load_environment
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.environments import build_environment

RELEASE = Path(__file__).parent / "fixtures" / "awm" / "release"
OBS, EOS = "<|observation|>", "<|endoftext|>"


@pytest.fixture(scope="module")
def scenario():
    return load_release(RELEASE)["tiny_music_streaming"]


@pytest.fixture(scope="module")
def servers(sandbox_ok):
    pool = AwmServerPool(1, call_timeout_s=20)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def verifier(sandbox_ok):
    runner = VerifierRunner(1, timeout_s=2.0)
    yield runner
    runner.close()


def test_loader_reads_the_public_release_format(scenario) -> None:
    assert scenario.description.startswith("A small music")
    assert [t["name"] for t in scenario.tables] == ["users", "tracks", "playlists", "playlist_tracks"]
    assert sorted(scenario.verifiers) == [0, 1] and len(scenario.verified_tasks()) == 2
    assert scenario.spec_operation_ids() == ["list_tracks", "create_playlist", "add_track_to_playlist"]
    assert scenario.database()[:15] == b"SQLite format 3" and scenario.inserts[1][0] == "tracks"


def test_loader_errors_name_the_file_line_and_key(tmp_path: Path) -> None:
    shutil.copytree(RELEASE, tmp_path / "r")
    (tmp_path / "r" / "gen_envs.jsonl").unlink()
    with pytest.raises(ReleaseError, match="gen_envs.jsonl: missing"):
        load_release(tmp_path / "r")
    shutil.copy(RELEASE / "gen_envs.jsonl", tmp_path / "r")
    bad = json.loads((RELEASE / "gen_tasks.jsonl").read_text())
    bad["tasks"] = "not a list"
    (tmp_path / "r" / "gen_tasks.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(ReleaseError, match=r"gen_tasks.jsonl:1: key 'tasks' must be list"):
        load_release(tmp_path / "r")


def test_each_endpoint_is_a_tool_and_each_episode_gets_a_fresh_database(servers, scenario) -> None:
    lease = servers.acquire(scenario)
    try:
        assert [s["name"] for s in lease.tool_specs] == scenario.spec_operation_ids()
        add = next(s for s in lease.tool_specs if s["name"] == "add_track_to_playlist")
        assert add["inputSchema"]["json"]["required"] == ["playlist_id", "track_id"]
        assert lease.call_tool("create_playlist", json.dumps({"name": "X"}))["status"] == 200
        assert lease.call_tool("add_track_to_playlist", '{"playlist_id": 7, "track_id": 1}')["status"] == 404
        assert lease.call_tool("nope", "{}")["status"] == 404
        assert lease.snapshot() != scenario.database()
    finally:
        servers.release(lease)
    again = servers.acquire(scenario)  # the same warm worker, reset to the pristine database
    try:
        assert again is lease and again.snapshot() == scenario.database()
    finally:
        servers.release(again)


def test_a_server_error_is_an_environment_failure_not_a_tool_error(servers, scenario) -> None:
    lease = servers.acquire(scenario)
    try:
        add = endpoint_tool(lease, next(s for s in lease.tool_specs if s["name"] == "add_track_to_playlist"))
        lease.call_tool("create_playlist", '{"name": "X"}')
        use = {"toolUseId": "1", "input": {"playlist_id": 1, "track_id": 2}}
        assert add._tool_func(use)["status"] == "success"
        with pytest.raises(EnvironmentFailure, match="HTTP 500"):  # duplicate key: unhandled in the server
            add._tool_func(use)
    finally:
        servers.release(lease)


def test_verifier_runs_sandboxed_on_read_only_copies_and_fails_closed(verifier, scenario) -> None:
    db = scenario.database()
    isolated = (
        "def verify_task_completion(initial_db_path, final_db_path, final_answer=None):\n"
        "    try:\n"
        "        sqlite3.connect(final_db_path).execute('DELETE FROM tracks').connection.commit()\n"
        "        return {'result': 'others'}\n"
        "    except sqlite3.OperationalError:\n"
        "        pass\n"
        f"    hidden = not os.path.exists({str(RELEASE / 'gen_tasks.jsonl')!r}) and os.getuid() != 0\n"
        "    return {'result': 'complete' if hidden else 'others'}\n"
    )
    assert verifier.verify(isolated, db, db, "").score == 1.0
    assert verifier.verify(scenario.verifiers[1], db, db, "It is Night Drive.").score == 1.0
    assert verifier.verify(scenario.verifiers[1], db, db, "").failure == "incomplete"
    crash = "def verify_task_completion(a, b, c):\n    return 1 / 0\n"
    loop = "def verify_task_completion(a, b, c):\n    while True:\n        pass\n"
    odd = "def verify_task_completion(a, b, c):\n    return {'result': 'maybe'}\n"
    for code, failure in ((crash, "verifier_error"), (loop, "verifier_error"), (odd, "verifier_result")):
        res = verifier.verify(code, db, db, "")
        assert res.aborted and res.failure == failure, res


def test_awm_is_a_registered_agent_environment_with_verified_tasks() -> None:
    env = load_environment(f"awm:release={RELEASE},workers=1")
    assert isinstance(env, AwmEnv)
    tasks = env.tasks(3, seed=0)
    assert [t.metadata["scenario"] for t in tasks] == ["tiny_music_streaming"] * 3
    assert tasks[2].id.endswith("-r1") and tasks[0].messages[0]["role"] == "system"
    stage_env = build_environment("agent", {"env": f"awm:release={RELEASE}"}, reward=None)
    assert stage_env.slime_settings()["agent_env"] == f"awm:release={RELEASE}"


def _call(tool: str, **args: object) -> str:
    body = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{tool}{body}</tool_call>"


@pytest.mark.parametrize("transport", ["dispatch", "mcp"])
def test_episode_calls_tools_by_name_and_is_scored_by_the_verifier(sandbox_ok, transport: str) -> None:
    env = AwmEnv(str(RELEASE), workers=1, transport=transport, max_iterations=8)
    task = next(t for t in env.tasks(2, seed=0) if t.metadata["task_idx"] == 0)
    turns = [
        (_call("list_tracks", artist="Nova", limit=2), OBS),
        (_call("create_playlist", name="Nova Best"), OBS),
        (_call("add_track_to_playlist", playlist_id=1, track_id=2), OBS),
        (_call("add_track_to_playlist", playlist_id=1, track_id=3), OBS),
        ("Done: the playlist has Night Drive and Glass.", EOS),
    ]
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        result = asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))
        first_prompt = tok.decode(server.requests[0]["input_ids"])
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.error
    assert result.metrics["tools_executed"] == 4 and result.metrics["tool_errors"] == 0
    for name in ("list_tracks", "create_playlist", "add_track_to_playlist"):
        assert name in first_prompt  # every tool schema is in the system prompt, by name
    assert "list_tools" not in first_prompt and "call_tool" not in first_prompt
    assert "awm://" not in first_prompt  # MCP's database resource is not a tool
