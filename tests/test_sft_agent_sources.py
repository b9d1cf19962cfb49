"""The SFT stage's embedded agent sources: terminal and search trajectories, written only when asked.

``write_embedded_sources`` with only the agent families on writes one OpenAI-format file per family, with
the gold trajectories of their tasks (terminal: reference commands run in the sandbox; search: the gold
plan through the real search tools) and the planted malformed rows the SFT builder must drop.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from data_prep.decontaminate import PhraseIndex
from data_prep.sft_mix import build_sft_mix
from data_prep.tiny_tasks.sft_sources import write_embedded_sources


def _params(**agents: object) -> SimpleNamespace:
    base = dict(families={}, calculator_conversations=0, test_runner_conversations=0, awm_conversations=0)
    return SimpleNamespace(**{**base, **agents}, oversample=4, malformed_every=2)


def test_agent_families_are_off_by_default_and_written_when_asked(tmp_path: Path, sandbox_ok) -> None:
    index = PhraseIndex().finalize()
    specs, info = write_embedded_sources(_params(terminal_conversations=0), 0, tmp_path / "a", index)
    assert specs == [] and not info.get("sources")
    specs, info = write_embedded_sources(
        _params(terminal_conversations=2, search_conversations=3), 0, tmp_path / "b", index
    )
    names = sorted(s.name for s in specs)
    assert names == ["openai_search_agent", "openai_terminal_agent"]
    good = []
    for line in (tmp_path / "b" / "openai_search_agent.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a planted malformed row
        if isinstance(row, dict) and isinstance(row.get("messages"), list):
            good.append(row)
    assert len(good) >= 3
    calls = [m for m in good[0]["messages"] if m.get("role") == "assistant" and m.get("tool_calls")]
    assert {c["tool_calls"][0]["function"]["name"] for c in calls} == {"web_search", "web_scrape"}
    assert "<answer>" in good[0]["messages"][-1]["content"]


def test_search_demonstrations_keep_their_answer_tag_through_the_sft_repairs(tmp_path: Path) -> None:
    """The search reward judges only an ``<answer>`` tag, so the SFT mix must teach the tag. Before the
    fix the generic repair unwrapped it (right for public rows wrapped whole in it) and the SFT policy
    answered untagged: every answer scored 0."""
    index = PhraseIndex().finalize()
    specs, _ = write_embedded_sources(
        _params(families={"math": 10}, search_conversations=3), 0, tmp_path / "src", index
    )
    assert {s.name: s.keep_answer_tags for s in specs} == {
        "sharegpt_math": False,
        "openai_search_agent": True,
    }
    manifest = build_sft_mix(specs, tmp_path / "mix")
    rows = [json.loads(line) for line in (tmp_path / "mix" / "sft.jsonl").read_text().splitlines()]
    finals = [r["messages"][-1]["content"] for r in rows if r["source"] == "openai_search_agent"]
    assert len(finals) >= 3 and all(f.startswith("<answer>") and f.endswith("</answer>") for f in finals)
    # the plain family's wrapped variant is still unwrapped
    math = [r["messages"][-1]["content"] for r in rows if r["source"] == "sharegpt_math"]
    assert math and not any("<answer>" in m for m in math)
    assert manifest["repairs_applied"].get("answer_tags_unwrapped", 0) >= 1


def test_awm_demonstrations_show_the_tools_exactly_as_the_rl_episode_does(sandbox_ok) -> None:
    """The SFT rows' tool list equals the env's tools as the agent registers them (Strands adds a
    description to every property that lacks one); before the fix the demonstrations omitted those."""
    import asyncio

    from data_prep.tiny_tasks import awm
    from infra.agents.awm.env import AwmEnv
    from infra.agents.tools import chat_tool_specs

    task = awm.generate(1, 0)[0]
    (row,) = awm.gold_conversations([task])
    env = AwmEnv(str(awm.tiny_release()), workers=1)
    agent_task = env.task_of(
        env.runtime.scenario(str(task.metadata["scenario"])), int(task.metadata["task_idx"])
    )

    async def shown() -> list:
        await env.reset(agent_task)
        try:
            return chat_tool_specs(env.tools())
        finally:
            await env.cleanup()

    expected = asyncio.run(shown())
    assert row["tools"] == expected
    described = [p for t in row["tools"] for p in t["function"]["parameters"]["properties"].values()]
    assert described and all("description" in p for p in described)
