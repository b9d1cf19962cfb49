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
from data_prep.tiny_tasks.sft_sources import write_embedded_sources


def _params(**agents: int) -> SimpleNamespace:
    base = dict(families={}, calculator_conversations=0, test_runner_conversations=0, awm_conversations=0)
    return SimpleNamespace(**base, **agents, oversample=4, malformed_every=2)


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
