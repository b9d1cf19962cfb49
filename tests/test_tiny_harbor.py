"""The ``terminal_agent`` tiny family (stage 05's embedded scale) and its ``harbor_tiny`` environment.

Tasks, sandboxes, tools, tests and the agent loop are real; only the generation backend behind
``/generate`` is scripted in the episode test (:mod:`agents_scripted`), because an untrained model cannot
be steered into tool calls. Sandbox tests skip without root (the ``sandbox_ok`` fixture).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from data_prep import tiny_tasks as tt
from data_prep.benchmarks import BenchmarkItem
from data_prep.converters import from_openai
from data_prep.decontaminate import build_index, scan_texts
from data_prep.tiny_tasks import harbor
from data_prep.tiny_tasks.harbor_env import TinyHarborEnv
from data_prep.tiny_tasks.harbor_specs import VARIANTS, make_task
from data_prep.tiny_tasks.rl_prep import prompt_text
from data_prep.tiny_tasks.sft_sources import screen_text
from infra.agents.contract import Termination
from infra.agents.envs.base import load_environment
from infra.agents.harbor.local_runtime import open_session, runtime_cache
from infra.agents.harbor.runtime import execute_command_tool
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.agents.slime_generate import task_from_parts
from infra.embedded.chat_format import install_glm_markup, render_with_loss_mask
from infra.embedded.tokenizer_build import build_micro_tokenizer

OBS, EOS = "<|observation|>", "<|endoftext|>"


def _names(split: str, seed: int = 0) -> list[str]:
    tasks = tt.generate(harbor.FAMILY, 400, seed, split)
    return [t.metadata["task"] for t in tasks if not harbor.is_repeat(t.id)]


def _variant(name: str) -> tuple[str, str]:
    """``(kind, variant)`` of a task folder named ``<kind>-<variant>-<index>``."""
    kind, rest = name.split("-", 1)
    return kind, rest.rsplit("-", 1)[0]


def test_registered_family_metric_and_environment() -> None:
    assert tt.GENERATORS[harbor.FAMILY] is harbor.generate and harbor.FAMILY in tt.SHARED_FAMILIES
    assert tt.METRIC_FAMILIES[harbor.METRIC] == (harbor.FAMILY,) and harbor.METRIC in tt.SHARED_METRICS
    env = load_environment("harbor_tiny")
    assert isinstance(env, TinyHarborEnv) and env.root == str(harbor.tiny_tasks_root().resolve())
    assert env.limits.max_new_tokens == 48 and env.limits.max_context_tokens == 1280
    assert env.catalog.counts == {"tasks": harbor.TASKS, "malformed": 0, "unrunnable": 0}
    root = harbor.tiny_tasks_root()
    assert (
        root.name.startswith(f"seed{harbor.ROOT_SEED}-t{harbor.TASKS}-") and harbor.tiny_tasks_root() == root
    )


def test_split_is_fixed_disjoint_and_generate_is_deterministic() -> None:
    train, held = _names("train"), _names("heldout")
    assert len(train) == len(set(train)) == 324 and len(held) == len(set(held)) == 156
    assert not set(train) & set(held) and len(train) + len(held) == harbor.TASKS
    seen = {_variant(n) for n in train}
    assert seen.isdisjoint(harbor.HELDOUT_VARIANTS) and len(seen) == len(VARIANTS) - 2
    per_variant = Counter(_variant(n) for n in held)
    assert all(per_variant[v] == (harbor.INSTANCES if v in harbor.HELDOUT_VARIANTS else 6) for v in VARIANTS)
    a, b = tt.generate(harbor.FAMILY, 30, 3), tt.generate(harbor.FAMILY, 30, 3)
    assert [t.prompt_row().model_dump() for t in a] == [t.prompt_row().model_dump() for t in b]
    assert [t.id for t in tt.generate(harbor.FAMILY, 30, 4)] != [t.id for t in a]
    assert sorted(_names("heldout", seed=5)) == sorted(held)  # the run seed orders tasks, never splits them
    for task in a:
        meta = task.metadata
        assert meta["environment"] == "agent" and meta["environment_options"]["env"] == harbor.ENV
        assert meta["reward"] == "harbor_tests" and meta["family"] == harbor.FAMILY
        assert [m["role"] for m in task.prompt] == ["system", "user"] and task.answer == harbor.DONE
    looped = tt.generate(harbor.FAMILY, 330, 0)
    assert harbor.is_repeat(looped[-1].id) and looped[-1].id == f"{looped[330 - 324 - 1].id}-r1"


def test_no_train_task_is_screened_out_by_the_heldout_set() -> None:
    """Instructions name their files and values, so the 8-gram screens drop no train task."""
    held = tt.heldout_tasks(harbor.METRIC, 200, 0)
    items = [BenchmarkItem(t.id, prompt_text(t.prompt_row())) for t in held]
    index = build_index([("heldout:terminal_task_success", items, False)])
    train = [t for t in tt.generate(harbor.FAMILY, 400, 0) if not harbor.is_repeat(t.id)]
    assert scan_texts(index, [screen_text(t) for t in train]) == [None] * len(train)
    instructions = [make_task(harbor.ROOT_SEED, i).spec.instruction for i in range(harbor.TASKS)]
    assert len(set(instructions)) == harbor.TASKS and max(len(s.split()) for s in instructions) <= 12


def test_reference_commands_fit_the_micro_budget() -> None:
    """The reference call (markup, command, stop token) fits the 48 tokens a call may generate."""
    tok = build_micro_tokenizer(0)
    install_glm_markup(tok)
    markup = "<think></think>\n\n<tool_call>execute_command<arg_key>command</arg_key><arg_value></arg_value>"
    overhead = len(tok(markup + "</tool_call>" + OBS, add_special_tokens=False)["input_ids"])
    worst = max(
        (len(tok(c, add_special_tokens=False)["input_ids"]), c)
        for i in range(harbor.TASKS)
        for c in make_task(harbor.ROOT_SEED, i).spec.solution
    )
    assert overhead + worst[0] <= harbor.LIMITS["max_new_tokens"], worst


def _self_check(env: TinyHarborEnv, name: str) -> tuple[str, float, float]:
    task, opts, cache = env.catalog.task(name), replace(env.options, spares=0), runtime_cache()
    scores = []
    for solve in (True, False):
        key, session = open_session(task, opts, cache)
        try:
            for command in harbor.reference_commands(task.task_dir) if solve else []:
                session.execute(command)
            result = session.verify()
        finally:
            session.close()
            cache.release(key)
        assert not result.aborted, (name, result.failure)
        scores.append(result.score)
    return name, scores[0], scores[1]


@pytest.mark.slow
def test_every_task_passes_its_reference_and_fails_doing_nothing(sandbox_ok) -> None:
    env = TinyHarborEnv()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda n: _self_check(env, n), sorted(env.catalog.tasks)))
    assert len(results) == harbor.TASKS
    assert [r for r in results if r[1:] != (1.0, 0.0)] == []


def test_gold_conversations_carry_real_tool_output(sandbox_ok, monkeypatch) -> None:
    train = tt.generate(harbor.FAMILY, 80, 0)
    one_each = list({t.metadata["task"].rsplit("-", 1)[0]: t for t in train}.values())
    rows = harbor.gold_conversations(one_each)
    assert len(rows) == len(one_each) == len(VARIANTS) - 2
    tok = build_micro_tokenizer(0)
    install_glm_markup(tok)
    for task, row in zip(one_each, rows, strict=True):
        roles = [m["role"] for m in row["messages"]]
        assert row["id"] == task.id and roles == ["system", "user", "assistant", "tool", "assistant"]
        [call] = row["messages"][2]["tool_calls"]
        [command] = harbor.reference_commands(task.metadata["task_dir"])
        assert call["function"]["name"] == "execute_command"
        assert json.loads(call["function"]["arguments"]) == {"command": command}
        assert row["messages"][3]["tool_call_id"] == call["id"] and row["messages"][3]["content"]
        assert row["messages"][-1] == {"role": "assistant", "content": harbor.DONE}
        assert row["tools"][0]["function"]["name"] == "execute_command"
        messages, tools = from_openai(row)  # the SFT builder's converter, then the GLM rendering
        messages = [m.model_copy(update={"loss": int(m.role == "assistant")}) for m in messages]
        ids, mask = render_with_loss_mask(tok, messages, tools)
        turns = "".join(map(str, mask)).split("0")
        assert sorted(len(s) for s in turns if s)[-1] <= 48 and len(ids) <= 480  # call, answer; length cap
    # the tool's text is the command's real output (stdout, stderr, exit code) from the task's sandbox
    env = TinyHarborEnv()
    name = next(n for n in sorted(env.catalog.tasks) if n.startswith("text-count-"))
    key, session = open_session(env.catalog.task(name), replace(env.options, spares=0), runtime_cache())
    try:
        tool = execute_command_tool(session, budget_tokens=env.options.output_tokens)
        src = make_task(harbor.ROOT_SEED, harbor.index_of(name)).spec.solution[0].split()[3]
        lines = session.execute(f"cat {src}").stdout.count("\n")
        assert harbor._call_tool(tool, "c0", f"wc -l < {src}") == str(lines)
        assert harbor._call_tool(tool, "c1", "ls nothing-here").startswith("[stderr]: ls:")
    finally:
        session.close()
        runtime_cache().release(key)
    # a reference that no longer passes the task's tests leaves its conversation out (fails closed)
    monkeypatch.setattr(harbor, "reference_commands", lambda task_dir: ["true"])
    assert harbor.gold_conversations(one_each[:2]) == []


def _episode(env: TinyHarborEnv, task, turns: list[tuple[str, str]]):
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=1280) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


def test_episode_scores_the_reference_one_and_doing_nothing_zero(sandbox_ok) -> None:
    row = next(
        t for t in tt.generate(harbor.FAMILY, 40, 0, "heldout") if t.metadata["task"].startswith("tests-")
    )
    task = task_from_parts(row.prompt, row.label, row.metadata, row.id)
    assert task.limits.max_new_tokens == 48 and task.metadata["env"] == harbor.ENV
    [command] = harbor.reference_commands(row.metadata["task_dir"])
    call = f"<tool_call>execute_command<arg_key>command</arg_key><arg_value>{command}</arg_value></tool_call>"
    env = load_environment(row.metadata["environment_options"]["env"])
    solved = _episode(env, task, [(call, OBS), (harbor.DONE, EOS)])
    assert solved.termination is Termination.FINAL_ANSWER and solved.reward == 1.0, solved.error
    assert solved.metrics["tools_executed"] == 1
    idle = _episode(load_environment(harbor.ENV), task, [(harbor.DONE, EOS)])
    assert idle.termination is Termination.FINAL_ANSWER and idle.reward == 0.0
    assert idle.reward_details["failure"] == "tests_failed" and not idle.reward_details["aborted"]


def test_stage_05_trains_on_a_third_of_train_tasks_that_sft_never_demonstrates() -> None:
    """SFT's terminal trajectories and stage 05's RL tasks are disjoint, and both are apart from held-out."""
    from data_prep.decontaminate import PhraseIndex
    from data_prep.tiny_tasks import generate, harbor
    from data_prep.tiny_tasks.sft_sources import screened_tasks

    train = {t.id for t in generate(harbor.FAMILY, 324, 0, "train")}
    held = {t.id for t in generate(harbor.FAMILY, 156, 0, "heldout")}
    rl = {n for n in train if harbor.rl_only(n)}
    assert len(train) == 324 and len(rl) == 108 and not (train & held)  # 18 seen variants x 6 instances
    demos, counts = screened_tasks(harbor.FAMILY, 400, 0, PhraseIndex().finalize(), 4, harbor.sft_demo)
    assert counts["kept"] == len(demos) == 216 and not {t.id for t in demos} & rl
    assert not any(harbor.rl_only(n) for n in held)
