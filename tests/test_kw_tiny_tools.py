"""``kw_tiny``'s tool options and Feather's ``python3``: what the embedded scale offers, and what stays as is.

* The ``tools`` and ``compact_tools`` options of the ``kw`` environment: ``kw_tiny`` offers the four tools
  its gold plans call (read, write and bash with compact specs, the service's ``list_`` endpoint), stage
  08's embedded spec and the SFT demonstrations build the same environment, and production keeps all
  tools with their full specs. Compact specs show required arguments only and refuse the others.
* The gold workbook turn runs ``python3``, not the host interpreter's path, and Feather's sandbox resolves
  ``python3`` to an interpreter with openpyxl; the harbor runtime's ``PATH`` is unchanged.

The episode-level check (a gold replay through the agent loop scoring 1.0 with these options) is
``test_kw_sft_family.py``'s. Sandbox tests skip without root (``sandbox_ok``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from data_prep.tiny_tasks.knowledge_work import ENV_TYPES
from data_prep.tiny_tasks.knowledge_work_sft import gold_plan
from infra import recipe
from infra.agents.envs.base import load_environment
from infra.agents.feather import TOOLS, PolicyError, coerce_args, tool_specs
from infra.agents.feather.shell import BIN_IN_SANDBOX, FeatherRuntime
from infra.agents.harbor.runtime import LocalRuntime
from infra.agents.kw.env import KwEnv
from infra.agents.kw.family import OPTIONS, gold_actions
from infra.agents.kw.tiny import TinyKwEnv
from infra.sandbox.limits import SANDBOX_ENV

STAGE = recipe.REPO_ROOT / "stages" / "08_knowledge_work_rl"


@pytest.fixture(scope="module")
def env() -> TinyKwEnv:
    return TinyKwEnv()


@pytest.fixture(scope="module")
def specs(env: TinyKwEnv) -> dict[str, Any]:
    tasks = sorted(env.catalog.tasks.values(), key=lambda t: t.name)
    return {et: next(t for t in tasks if t.metadata["env_type"] == et) for et in ENV_TYPES}


def test_kw_tiny_offers_the_tools_every_gold_plan_calls(env: TinyKwEnv, specs: dict[str, Any]) -> None:
    for spec in specs.values():
        listing = next(op for s in spec.services for op in s.operation_ids() if op.startswith("list_"))
        assert env.offered(spec) == ["read", "write", "bash", listing]
        assert {name for name, _ in gold_plan(spec)} <= set(env.offered(spec))
    assert env.feather_options.compact and env.limits.max_new_tokens == OPTIONS["max_new_tokens"]


def test_the_stage_the_sft_family_and_production_build_their_environments_as_documented(
    tmp_path: Path, env: TinyKwEnv
) -> None:
    stage = recipe.resolve_stage(STAGE, "embedded").environment().agent_env()
    assert isinstance(stage, TinyKwEnv)  # stage 08's embedded RL: the same options as the SFT demonstrations
    assert (stage.tool_patterns, stage.feather_options, stage.limits) == (
        env.tool_patterns,
        env.feather_options,
        env.limits,
    )
    spec = recipe.resolve_stage(STAGE, "production").config.rl.environment.options["env"]
    prod = load_environment(spec.replace("/mnt/rufus/data/08_knowledge_work_rl/tasks", str(tmp_path)))
    assert isinstance(prod, KwEnv) and prod.tool_patterns == ["*"] and not prod.feather_options.compact
    assert prod.offered(next(iter(env.catalog.tasks.values())))[: len(TOOLS)] == list(TOOLS)


def test_a_bad_tools_option_is_refused_with_the_option_and_task_named(
    env: TinyKwEnv, specs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"kw option tools='read\+\+bash'"):
        TinyKwEnv(tools="read++bash")
    spec = specs["contract_dates_memo"]
    typo = TinyKwEnv(tools="read+wirte+list_*")
    with pytest.raises(ValueError, match=f"wirte matches none of task {spec.name}'s tools"):
        typo.task_of(spec)
    assert TinyKwEnv(tools="bash+*_contract*").offered(spec) == [
        "bash", *(op for s in spec.services for op in s.operation_ids())
    ]  # fmt: skip


def test_compact_specs_show_and_accept_only_the_required_arguments() -> None:
    full, compact = tool_specs(), tool_specs(compact=True)
    assert [s["name"] for s in compact] == [s["name"] for s in full]
    for f, c in zip(full, compact, strict=True):
        schema = c["inputSchema"]["json"]
        assert list(schema["properties"]) == f["inputSchema"]["json"]["required"] == schema["required"]
        assert len(c["description"]) < len(f["description"])
    assert coerce_args("bash", {"command": "ls", "timeout": 5})["timeout"] == 5.0  # the full spec's argument
    with pytest.raises(PolicyError, match="bash has no argument timeout; its arguments: command"):
        coerce_args("bash", {"command": "ls", "timeout": 5}, compact=True)


def test_the_gold_workbook_turn_names_no_host_path(specs: dict[str, Any]) -> None:
    actions = gold_actions(specs["invoice_ledger_reconciliation"].task_dir)
    (command,) = [args["command"] for name, args in actions if name == "bash"]
    assert command.startswith("python3 -c ") and "openpyxl" in command
    for spec in specs.values():
        text = json.dumps(gold_plan(spec))
        assert sys.executable not in text and sys.prefix not in text and str(recipe.REPO_ROOT) not in text


def _path_of(argv: list[str]) -> str:
    assert argv[-2] == "--config"
    return json.loads(argv[-1])["env"]["PATH"]


def test_feather_puts_python3_with_openpyxl_first_on_path_and_harbor_is_unchanged(
    tmp_path: Path, sandbox_ok
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("exit 0\n")
    harbor = LocalRuntime(tmp_path / "ws", tmp_path / "tests", spares=0)
    try:
        assert _path_of(harbor.argv(3)) == SANDBOX_ENV["PATH"] and BIN_IN_SANDBOX not in harbor.argv(3)
    finally:
        harbor.close()
    rt = FeatherRuntime(spares=0)
    try:
        assert _path_of(rt.argv(3)) == f"{BIN_IN_SANDBOX}:{SANDBOX_ENV['PATH']}"
        script = "command -v python3; python3 -c 'import openpyxl; print(openpyxl.__name__)'"
        with rt.start() as session:
            res = session.execute(script)
        assert res.exit_code == 0 and res.stdout.split() == [f"{BIN_IN_SANDBOX}/python3", "openpyxl"]
    finally:
        rt.close()


def test_an_episode_offers_the_compact_tools_and_refuses_arguments_they_do_not_show(
    env: TinyKwEnv, specs: dict[str, Any], sandbox_ok
) -> None:
    spec = specs["ticket_tracker_update"]

    async def run() -> tuple[list[dict[str, Any]], tuple[str, bool], tuple[str, bool]]:
        await env.reset(env.task_of(spec))
        try:
            shown = [t.tool_spec for t in env.tools()]
            background = env.harness.call("bash", {"command": "sleep 1", "run_in_background": True})
            return shown, background, env.harness.call("bash", {"command": "python3 -c 'print(6 * 7)'"})
        finally:
            await env.cleanup()

    shown, background, ran = asyncio.run(run())
    assert [s["name"] for s in shown] == ["read", "write", "bash", "list_tickets"]
    assert list(shown[2]["inputSchema"]["json"]["properties"]) == ["command"]
    assert background[1] and "no argument run_in_background" in background[0]
    assert ran == ("42", False)
