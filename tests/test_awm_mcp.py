"""AWM over MCP: a sandboxed fastapi-mcp server per episode on stdio, reached with Strands' MCPClient."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from data_prep.awm_generate import generate
from infra.agents.awm.env import AwmEnv
from infra.agents.awm.mcp_client import McpScenarioServer
from infra.agents.awm.release import load_release
from infra.agents.awm.selfcheck import load_gold
from infra.agents.awm.server import AwmServerPool, VerifierRunner
from infra.agents.contract import EnvironmentFailure
from infra.agents.envs.base import load_environment

RELEASE = Path(__file__).parent / "fixtures" / "awm" / "release"
OBS, EOS = "<|observation|>", "<|endoftext|>"
# Appended to the fixture's server: one endpoint kills the process, one hangs, one reports its sandbox.
FAULTS = """

@app.post("/crash", operation_id="crash_server")
def crash_server():
    import os
    os._exit(3)


@app.get("/hang", operation_id="hang")
def hang():
    import time
    time.sleep(60)


@app.get("/whoami", operation_id="whoami")
def whoami():
    import os
    return {"uid": os.getuid(), "sees_host": os.path.exists(HOST_FILE), "cwd": os.getcwd()}
""".replace("HOST_FILE", repr(str(RELEASE / "gen_tasks.jsonl")))


@pytest.fixture(scope="module")
def scenario():
    return load_release(RELEASE)["tiny_music_streaming"]


@pytest.fixture(scope="module")
def verifier(sandbox_ok):
    runner = VerifierRunner(1, timeout_s=5.0)
    yield runner
    runner.close()


def test_mcp_lists_exactly_the_endpoint_tools_the_dispatch_path_has(sandbox_ok, scenario) -> None:
    server = McpScenarioServer(scenario)
    pool = AwmServerPool(1, call_timeout_s=20)
    try:
        lease = pool.acquire(scenario)
        dispatch = {s["name"]: s for s in lease.tool_specs}
        pool.release(lease)
        mcp = {s["name"]: s for s in server.tool_specs}
        assert list(mcp) == list(dispatch) == scenario.spec_operation_ids()
        for name in mcp:  # same required arguments and argument names on both paths
            a, b = mcp[name]["inputSchema"]["json"], dispatch[name]["inputSchema"]["json"]
            assert sorted(a.get("required", [])) == b["required"] and set(a["properties"]) == set(
                b["properties"]
            )
        assert [t.tool_name for t in server.tools()] == list(mcp)
    finally:
        server.close()
        pool.close()


def test_gold_actions_through_mcp_pass_the_verifier_and_doing_nothing_fails(
    sandbox_ok, verifier, tmp_path: Path
) -> None:
    generate(tmp_path, seed=1, tasks=4, domains=["team_calendar"])
    scenario = load_release(tmp_path)["team_calendar"]
    gold = load_gold(tmp_path)
    for idx in range(4):
        record = gold[("team_calendar", idx)]
        server = McpScenarioServer(scenario)  # one server per episode: a fresh database each time
        try:
            assert server.snapshot() == scenario.database()
            for action in record["actions"]:
                result = server.call_tool(action["tool"], action.get("arguments") or {})
                assert result["status"] == "success", (idx, action, result)
            final = server.snapshot()
        finally:
            server.close()
        code, initial = scenario.verifiers[idx], scenario.database()
        assert verifier.verify(code, initial, final, record["final_answer"]).score == 1.0, idx
        assert verifier.verify(code, initial, initial, "").score == 0.0, idx


def test_4xx_is_a_tool_error_and_5xx_aborts_the_episode(sandbox_ok, scenario) -> None:
    server = McpScenarioServer(scenario)
    try:
        missing = server.call_tool("add_track_to_playlist", {"playlist_id": 7, "track_id": 1})
        assert missing["status"] == "error" and missing["content"][0]["text"].startswith("HTTP 404:")
        invalid = server.call_tool("add_track_to_playlist", {"playlist_id": 1})
        assert invalid["status"] == "error" and "track_id" in invalid["content"][0]["text"]
        add = next(t for t in server.tools() if t.tool_name == "add_track_to_playlist")
        assert server.call_tool("create_playlist", {"name": "X"})["status"] == "success"
        use = {"toolUseId": "7", "name": "add_track_to_playlist", "input": {"playlist_id": 1, "track_id": 2}}
        assert add._tool_func(use)["status"] == "success"
        with pytest.raises(EnvironmentFailure, match="HTTP 500"):  # duplicate key: unhandled in the server
            add._tool_func(use)
        with pytest.raises(EnvironmentFailure, match="no longer usable"):
            server.call_tool("list_tracks", {})
    finally:
        server.close()


def test_a_crashed_or_hanging_server_is_an_environment_failure(sandbox_ok, scenario) -> None:
    faulty = dataclasses.replace(scenario, full_code=scenario.full_code + FAULTS)
    server = McpScenarioServer(faulty, call_timeout_s=1.0)
    try:
        with pytest.raises(EnvironmentFailure, match="hang"):
            server.call_tool("hang", {})
    finally:
        server.close()
    server = McpScenarioServer(faulty)
    try:
        seen = json.loads(server.call_tool("whoami", {})["content"][0]["text"])
        assert seen["uid"] >= 100_000 and not seen["sees_host"] and seen["cwd"] == "/scratch/awm"
        with pytest.raises(EnvironmentFailure, match="crash_server"):
            server.call_tool("crash_server", {})
        with pytest.raises(EnvironmentFailure):
            server.snapshot()
    finally:
        server.close()
    broken = dataclasses.replace(scenario, full_code="raise SystemExit('no app here')\n")
    with pytest.raises(EnvironmentFailure, match="did not start"):
        McpScenarioServer(broken, boot_timeout_s=20)


def test_env_transport_option_and_each_episode_gets_a_fresh_database(sandbox_ok, scenario) -> None:
    with pytest.raises(ValueError, match="transport='http'"):
        AwmEnv(str(RELEASE), transport="http")
    env = load_environment(f"awm:release={RELEASE},workers=1,transport=mcp")
    assert isinstance(env, AwmEnv) and env.transport == "mcp"
    task = env.tasks(1, seed=0)[0]
    for _ in range(2):
        asyncio.run(env.reset(task))
        assert env.mcp is not None and env.mcp.snapshot() == scenario.database()
        create = next(t for t in env.tools() if t.tool_name == "create_playlist")
        assert create._tool_func({"toolUseId": "1", "input": {"name": "Mine"}})["status"] == "success"
        assert env.mcp.snapshot() != scenario.database()
        asyncio.run(env.cleanup())
        assert env.mcp is None and env.tools() == []
