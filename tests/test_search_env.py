"""The ``search`` and ``search_tiny`` agent environments (stage 06) through the real agent loop.

Episodes run the real loop, tool layer, tools (bm25s over the tiny world's page store, trafilatura), reward
(``search_judge`` with the deterministic judge) and sandbox; only the generation backend behind
``/generate`` is scripted (:mod:`agents_scripted`), because an untrained model cannot be steered into tool
calls. Serper and Jina Reader are remote APIs we cannot call here: the ``web`` backend's real clients talk
to :class:`ApiDouble` (from ``test_search_tools``), a loopback HTTP server standing in for each API.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer
from test_search_tools import ApiDouble

from data_prep.tiny_tasks import search
from data_prep.tiny_tasks.search_env import TinySearchEnv
from data_prep.tiny_tasks.search_world import world_root
from infra.agents.contract import AgentTask, EpisodeLimits, Termination
from infra.agents.envs.base import load_environment
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.agents.search import env as search_env
from infra.agents.search.env import SearchEnv, local_index
from infra.environments.agent import AgentOptions

OBS, EOS = "<|observation|>", "<|endoftext|>"


def call(name: str, **arguments: str) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in arguments.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def episode(env: Any, task: AgentTask, turns: list[tuple[str, str]]) -> Any:
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


def gold_turns(task: AgentTask) -> list[tuple[str, str]]:
    plan = task.metadata["gold"]["plan"]
    turns = [(call(step["name"], **step["arguments"]), OBS) for step in plan[:-1]]
    return turns + [(f"<think></think>\n<answer>{plan[-1]['arguments']['answer']}</answer>", EOS)]


def tool_texts(transcript: list[dict[str, Any]]) -> list[str]:
    return [e["content"] for e in transcript if e["role"] == "tool"]


@pytest.fixture(scope="module")
def tiny_tasks() -> dict[int, AgentTask]:
    """A 2-hop and a 4-hop training question of the tiny world, as ``search_tiny`` reads their rows."""
    tasks = load_environment("search_tiny").tasks(60, seed=0)
    return {hops: next(t for t in tasks if t.metadata["hops"] == hops) for hops in (2, 4)}


# The loop's ToolLimiter ends an episode once its last allowed call returns, so a plan of 2 * hops calls
# needs a budget of 2 * hops + 1 to leave a turn for the answer.


@pytest.mark.parametrize(
    "hops",
    [2, 4],
)
def test_the_gold_plan_scores_one_with_the_sft_conversations_tool_texts(tiny_tasks, hops: int) -> None:
    task = tiny_tasks[hops]
    assert task.tools == search.TOOLS_ENABLED and task.limits == EpisodeLimits(**search.LIMITS)
    result = episode(load_environment("search_tiny"), task, gold_turns(task))
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.error
    assert result.reward_details["components"]["successful_tool_calls"] == 2 * hops
    calls = [c["name"] for e in result.transcript for c in e.get("tool_calls", [])]
    assert calls == ["web_search", "web_scrape"] * hops and result.metrics["truncated_tool_results"] == 0
    # the environment's tool texts are exactly those the tiny SFT conversations were rendered with
    row = search.generate(60, 0)[[t.id for t in search.generate(60, 0)].index(task.id)]
    [sft] = search.gold_conversations([row])
    assert tool_texts(result.transcript) == [m["content"] for m in sft["messages"] if m["role"] == "tool"]
    assert [s["function"]["name"] for s in sft["tools"]] == calls[:2]


def test_answering_without_tools_scores_zero(tiny_tasks) -> None:
    task = tiny_tasks[2]
    answer = task.metadata["gold"]["answer"]
    result = episode(load_environment("search_tiny"), task, [(f"<answer>{answer}</answer>", EOS)])
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 0.0
    assert result.reward_details["failure"] == "too_few_tool_calls"
    assert result.reward_details["parsed"] == answer  # right answer, but no research


def test_malformed_calls_scale_the_reward_down(tiny_tasks) -> None:
    task = tiny_tasks[2]
    gold = gold_turns(task)
    unparsable = ("<tool_call>web_search<arg_key>query</arg_key>Numberel</tool_call>", OBS)
    no_query = (call("web_search", q="Numberel"), OBS)  # parses, but the tool needs 'query'
    for bad in (unparsable, no_query):
        result = episode(load_environment("search_tiny"), task, [bad, *gold])
        assert result.termination is Termination.FINAL_ANSWER, result.error
        assert tool_texts(result.transcript)[0].startswith("Error: malformed tool call")
        parts = result.reward_details["components"]
        assert (parts["malformed_tool_calls"], parts["tool_calls"]) == (1.0, 5.0)
        assert result.reward == pytest.approx(0.8)  # 1 - 1/5 of the calls failed
    # past the family's one tolerated error the episode ends without an answer
    result = episode(load_environment("search_tiny"), task, [unparsable, no_query, *gold])
    assert result.termination is Termination.TOOL_ERROR and result.reward == 0.0


def test_a_spent_tool_budget_without_an_answer_scores_minus_a_tenth(tiny_tasks) -> None:
    task = tiny_tasks[2]
    turns = [(call("web_search", query=q), OBS) for q in ("Erroren", "Numberel") * 6]
    result = episode(load_environment("search_tiny"), task, turns)
    assert result.termination in (Termination.TOOL_BUDGET, Termination.ITERATION_BUDGET), result.error
    assert result.metrics["tool_calls"] == search.LIMITS["max_tool_calls"]
    assert result.reward == pytest.approx(-0.1) and result.reward_details["failure"] == "budget_exhausted"


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("search:backend=bing", "search option backend='bing': expected local or web"),
        ("search:backend=local", "search option store: backend=local needs store=PATH"),
        ("search:backend=web,store=/x.jsonl", "search option store: only backend=local"),
        ("search:backend=web,results=20", "search option results=20: Input should be less than or equal"),
        ("search:backend=web,page_budget_tokens=8", "search option page_budget_tokens=8"),
        ("search:backend=web,python=2", "search option python=2: expected 1 or 0"),
        ("search:backend=web,summarize=maybe", "search option summarize='maybe'"),
        ("search:backend=web,api_retries=-1", "search option api_retries=-1"),
        ("search:backend=web,max_tool_calls=0", "search option max_tool_calls=0: Input should be greater"),
        ("search:backend=web,max_tokens=5", "search option max_tokens: unknown option"),
        ("search_tiny:store=/x.jsonl", "search_tiny option store: the page store is each task's world"),
        ("search_tiny:snippet_chars=10", "search_tiny option snippet_chars=10"),
    ],
)
def test_spec_errors_are_one_line_and_name_the_option(spec: str, error: str) -> None:
    with pytest.raises(ValueError, match="^" + error.replace("(", r"\(")) as info:
        load_environment(spec)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=error.split(":")[0]):
        AgentOptions(env=spec)


def test_specs_load_with_the_paper_budgets_and_the_tiny_settings() -> None:
    assert AgentOptions(env="search_tiny").env == "search_tiny"
    train = load_environment("search:backend=web")
    assert isinstance(train, SearchEnv) and train.available_tools() == ("web_search", "web_scrape")
    limits = train.limits
    assert (limits.max_tool_calls, limits.max_new_tokens, limits.max_context_tokens) == (100, 32_768, 131_072)
    assert limits.max_iterations is None and limits.max_tool_errors is None
    assert limits.tool_result_max_tokens == train.tools_config.page_budget_tokens + 512
    assert load_environment("search:backend=web,max_tool_calls=200").limits.max_tool_calls == 200
    tiny = load_environment("search_tiny")
    assert isinstance(tiny, TinySearchEnv) and tiny.limits == EpisodeLimits(**search.LIMITS)
    config = tiny.tools_config.model_dump()
    assert {k: config[k] for k in search.TOOLS_CONFIG} == search.TOOLS_CONFIG
    assert tiny.tools() == []  # no tool outside an episode
    with pytest.raises(ValueError, match="generates no tasks"):
        train.tasks(1)


def test_local_index_is_built_once_and_saved_where_index_points(tmp_path: Path, monkeypatch) -> None:
    store = str(world_root() / "pages.jsonl")
    first = local_index(store)
    assert local_index(store) is first  # one build per process and store
    saved = local_index(store, str(tmp_path / "index"))
    assert (tmp_path / "index" / "pages.json").is_file()
    monkeypatch.setattr(search_env, "_INDEXES", {})
    loaded = local_index(store, str(tmp_path / "index"))  # a fresh process reads the saved index
    assert loaded is not saved and loaded.search("Numberel", 3) == first.search("Numberel", 3)


def test_tools_follow_the_python_option_and_the_tasks_tools_enabled(tiny_tasks) -> None:
    store = world_root() / "pages.jsonl"
    task = tiny_tasks[2].model_copy(update={"tools": None})

    def names(spec: str, task: AgentTask) -> list[str]:
        env = load_environment(spec)
        asyncio.run(env.reset(task))
        try:
            return [t.tool_name for t in env.tools()]
        finally:
            asyncio.run(env.cleanup())

    assert names(f"search:backend=local,store={store}", task) == ["web_search", "web_scrape"]
    assert names(f"search:store={store},python=1", task) == ["web_search", "web_scrape", "python"]
    assert names(f"search:store={store},python=1", tiny_tasks[2]) == ["web_search", "web_scrape"]
    asks_python = task.model_copy(update={"tools": ["web_search", "python"]})
    assert names(f"search:store={store},python=1", asks_python) == ["web_search", "python"]
    with pytest.raises(ValueError, match=r"tools_enabled names \['python'\].*add python=1"):
        names(f"search:store={store}", asks_python)
    aborted = episode(load_environment(f"search:store={store}"), asks_python, [("never asked", EOS)])
    assert aborted.termination is Termination.ABORTED and aborted.reward is None


def test_python_tool_runs_in_the_sandbox_during_an_episode(sandbox_ok, tiny_tasks) -> None:
    env = load_environment(f"search:store={world_root() / 'pages.jsonl'},python=1")
    task = tiny_tasks[2].model_copy(update={"tools": None})
    turns = [(call("python", code="print(6 * 7)"), OBS), ("<answer>42</answer>", EOS)]
    result = episode(env, task, turns)
    assert result.termination is Termination.FINAL_ANSWER, result.error
    assert tool_texts(result.transcript) == ["42"] and result.metrics["tools_executed"] == 1


# ---------------------------------------------------------------- the web backend on loopback doubles

PAGE = "# Ada Vance\n\nAda Vance is a glassblower born on 14 March 1962 in Port Elsmere."
ORGANIC = [
    {"title": "Leaked answers", "link": "https://huggingface.co/datasets/leak/qa", "snippet": "Port Elsmere"},
    {"title": "Ada Vance", "link": "https://tiny.wiki/people/ada-vance", "snippet": "A glassblower."},
]


def _web_env(monkeypatch, serper_url: str, jina_url: str, key: str | None = "test-key") -> SearchEnv:
    if key is None:
        monkeypatch.delenv("SERPER_API_KEY", raising=False)
    else:
        monkeypatch.setenv("SERPER_API_KEY", key)
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    monkeypatch.setenv("RUFUS_SERPER_BASE_URL", serper_url)
    monkeypatch.setenv("RUFUS_JINA_BASE_URL", jina_url)
    spec = "search:backend=web,api_retries=0,api_timeout=5,max_new_tokens=64,max_context_tokens=4096"
    env = load_environment(spec)
    assert isinstance(env, SearchEnv)
    return env


def _web_task(env: SearchEnv) -> AgentTask:
    question = "Where was Ada Vance born?"
    return env.task_of("web-ada", question, ["Port Elsmere"], judge="deterministic")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_web_backend_searches_serper_reads_jina_and_applies_the_blocklist(monkeypatch) -> None:
    serper = ApiDouble([(200, {"organic": ORGANIC}, 0)])
    jina = ApiDouble([(200, PAGE, 0)])
    try:
        env = _web_env(monkeypatch, serper.url, jina.url)
        task = _web_task(env)
        assert task.messages[0]["content"] == env.system_prompt and task.metadata["judge"] == "deterministic"
        turns = [
            (call("web_search", query="Ada Vance birthplace"), OBS),
            (call("web_scrape", url="https://tiny.wiki/people/ada-vance"), OBS),
            ("<answer>Port Elsmere</answer>", EOS),
        ]
        result = episode(env, task, turns)
    finally:
        serper.close()
        jina.close()
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.error
    found, page = tool_texts(result.transcript)
    assert found.startswith("1. Ada Vance\n   URL: https://tiny.wiki/people/ada-vance")
    assert "huggingface" not in found  # the blocklisted hit is dropped before numbering
    assert page == PAGE
    [asked] = serper.requests
    assert asked["path"] == "/search" and asked["headers"]["X-API-KEY"] == "test-key"
    assert json.loads(asked["body"]) == {"q": "Ada Vance birthplace", "num": 10, "gl": "us", "hl": "en"}
    assert [r["path"] for r in jina.requests] == ["/https://tiny.wiki/people/ada-vance"]
    assert env.tools() == [] and env._clients == []  # cleanup closed the episode's clients


def test_an_unreachable_serper_or_a_missing_key_aborts_the_episode(monkeypatch) -> None:
    jina = ApiDouble([(200, PAGE, 0)])
    try:
        env = _web_env(monkeypatch, f"http://127.0.0.1:{_free_port()}", jina.url)
        result = episode(env, _web_task(env), [(call("web_search", query="Ada Vance"), OBS), ("late", EOS)])
        assert result.termination is Termination.ABORTED and result.reward is None
        assert "serper" in (result.error or "") and "gave up after 1 attempts" in (result.error or "")
        env = _web_env(monkeypatch, f"http://127.0.0.1:{_free_port()}", jina.url, key=None)
        result = episode(env, _web_task(env), [("never asked", EOS)])
        assert result.termination is Termination.ABORTED and "set SERPER_API_KEY" in (result.error or "")
    finally:
        jina.close()
