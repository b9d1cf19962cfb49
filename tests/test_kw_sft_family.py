"""The SFT mix's workspace family: gold knowledge-work trajectories of the ``kw_tiny`` train tasks.

* The SFT/RL split of the train tasks is fixed, disjoint and a third per environment type.
* A gold conversation replays in the real agent loop (Strands, the GLM tool parser, the Feather sandbox,
  the system-of-record server, ``kw_rubric``) to a 1.0 score, and the SFT rendering of the conversation is
  token for token the RL episode's trajectory: the same system prompt, tool specs, prompt and tool results.
  Only ``/generate`` is scripted (:mod:`agents_scripted`: it replays the conversation's assistant turns),
  because an untrained model cannot be steered into tool calls.
  The episode runs ``kw_tiny`` with its own options (four tools, compact specs, the per-call budget), and
  every gold turn fits that budget.
* Stage 00's data prep, on a tiny config with ``workspace_conversations`` on, keeps the rows through its
  converters, validators and screens, and the token-length report says how many fit the agent SFT phase's
  ``length_cap`` of 1280 under the micro model's chat template (none yet: see the test).

Everything that runs an episode needs the sandbox (``sandbox_ok``: skipped without root).
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from data_prep.converters import convert_row
from data_prep.decontaminate import PhraseIndex
from data_prep.io import read_jsonl
from data_prep.schema import SFTSample
from data_prep.tiny_tasks import knowledge_work_sft as kw_sft
from data_prep.tiny_tasks import register_family
from data_prep.tiny_tasks.knowledge_work import ENV_TYPES
from data_prep.tiny_tasks.sft_sources import CATEGORY, screened_tasks
from data_prep.validators import validate_sample
from infra import recipe
from infra.agents.contract import Termination
from infra.agents.kw.family import LIMITS, TRAIN, gold_actions
from infra.agents.kw.family import generate as kw_generate
from infra.agents.kw.tiny import TinyKwEnv
from infra.agents.local_server import GenerateServer, micro_model_dir
from infra.agents.loop import ModelEndpoint, run_episode
from infra.embedded.chat_format import render, render_with_loss_mask
from infra.prep import PrepContext

AGENT_SFT_CAP = 1280  # recipes/tiny-agent.yaml's agent SFT phase (sft.length_cap and data.length_cap)
OBS, EOS = "<|observation|>", "<|endoftext|>"


@pytest.fixture(scope="module")
def train() -> list[Any]:
    return kw_generate(TRAIN, 0, "train")


def one_per_type(tasks: list[Any]) -> list[Any]:
    demos = [t for t in tasks if kw_sft.sft_demo(t)]
    return [next(t for t in demos if t.metadata["env_type"] == env_type) for env_type in ENV_TYPES]


def test_the_split_is_fixed_disjoint_and_a_third_of_each_environment_type(train: list[Any]) -> None:
    rl = {t.id for t in train if kw_sft.rl_only(t.id)}
    sft = {t.id for t in train if kw_sft.sft_demo(t)}
    assert not rl & sft and rl | sft == {t.id for t in train}
    for env_type in ENV_TYPES:
        of_type = [t.id for t in train if t.metadata["env_type"] == env_type]
        assert len(of_type) == TRAIN // 3 and sum(n in rl for n in of_type) == 26
    other = kw_generate(TRAIN, 1, "train")  # another seed orders the pool differently, the split stays
    assert [t.id for t in other] != [t.id for t in train]
    assert {t.id for t in other if kw_sft.rl_only(t.id)} == rl
    assert [t.id for t in kw_generate(TRAIN, 0, "train")] == [t.id for t in train]
    repeats = kw_generate(TRAIN + 3, 0, "train")[TRAIN:]
    assert all(t.id.endswith("-r1") and not kw_sft.sft_demo(t) and not kw_sft.rl_only(t.id) for t in repeats)
    held = kw_generate(6, 0, "heldout")
    assert not any(kw_sft.rl_only(t.id) or kw_sft.sft_demo(t) for t in held)
    with pytest.raises(ValueError, match="kw-nope"):
        kw_sft.rl_only("kw-nope")
    register_family(kw_sft.FAMILY, kw_generate)
    picked, counts = screened_tasks(kw_sft.FAMILY, 40, 3, PhraseIndex().finalize(), 4, kw_sft.sft_demo)
    assert counts["kept"] == 40 and not {t.id for t in picked} & rl


def turns_of(row: dict[str, Any], tok: Any) -> tuple[list[int], list[tuple[str, str]]]:
    """The row's token ids as SFT renders them and its assistant turns as text the model would sample."""
    messages, tools = convert_row(row, "openai")
    ids, _ = render_with_loss_mask(tok, messages, tools)
    turns = []
    for i, msg in enumerate(messages):
        if msg.role == "assistant":
            before = render(tok, messages[:i], tools, add_generation_prompt=True)
            turns.append(
                (render(tok, messages[: i + 1], tools)[len(before) :], OBS if msg.tool_calls else EOS)
            )
    return ids, turns


def test_gold_conversations_replay_to_one_token_for_token_in_the_agent_loop(
    train: list[Any], sandbox_ok
) -> None:
    tok = micro_tokenizer()
    tasks = one_per_type(train)
    rows = kw_sft.gold_conversations(tasks, tok)
    assert [r["id"] for r in rows] == [t.id for t in tasks]
    env = TinyKwEnv()  # kw_tiny as stage 08's RL runs it: the scripted turns are cut at its per-call budget
    for task, row in zip(tasks, rows, strict=True):
        spec = env.catalog.task(task.metadata["task"])
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                 for m in row["messages"] if m.get("tool_calls") for c in m["tool_calls"]]  # fmt: skip
        writes = [a for a in gold_actions(spec.task_dir) if a[0] != "read"]
        assert calls == kw_sft.gold_plan(spec) and calls[-len(writes) :] == writes
        assert row["messages"][:2] == task.prompt and row["messages"][-1] == {
            "role": "assistant",
            "content": "Done.",
        }
        props = [p for t in row["tools"] for p in t["function"]["parameters"]["properties"].values()]
        listing = next(n for n, _ in calls if n.startswith("list_"))
        assert [t["function"]["name"] for t in row["tools"]] == ["read", "write", "bash", listing]
        assert all("description" in p for p in props)  # as Strands completes them
        ids, turns = turns_of(row, tok)
        sampled = [len(tok(text, add_special_tokens=False)["input_ids"]) for text, _ in turns]
        assert max(sampled) < LIMITS["max_new_tokens"], sampled  # each turn, and its stop token, fits a call
        agent_task = env.task_of(spec)
        with GenerateServer(
            ScriptedBackend(tok, turns), tok, max_context_tokens=LIMITS["max_context_tokens"]
        ) as srv:
            result = asyncio.run(run_episode(env, agent_task, ModelEndpoint(srv.url, tok, retry_delay=0.01)))
        assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.reward_details
        assert result.metrics["tool_errors"] == 0 and result.metrics["tool_calls"] == len(calls)
        assert result.prompt_ids + result.response_ids == ids  # SFT shows exactly what RL presents
        tool_texts = [m["content"] for m in row["messages"] if m["role"] == "tool"]
        assert [e["content"] for e in result.transcript if e["role"] == "tool"] == tool_texts


def test_a_task_whose_deliverable_fails_is_left_out(train: list[Any], sandbox_ok, monkeypatch) -> None:
    task = one_per_type(train)[2]  # the contract memo: list, then write
    real = kw_sft.gold_plan

    def wrong_memo(spec: Any) -> list[tuple[str, dict[str, Any]]]:
        plan = real(spec)
        name, args = plan[-1]
        return [*plan[:-1], (name, {**args, "content": "# nothing found\n"})]

    monkeypatch.setattr(kw_sft, "gold_plan", wrong_memo)
    assert kw_sft.gold_conversations([task], micro_tokenizer()) == []


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, sandbox_ok) -> tuple[list[SFTSample], dict[str, Any], Path]:
    folder = recipe.REPO_ROOT / "stages" / "00_sft"
    stage = recipe.resolve_stage(folder, "embedded")
    mod = stage.module("data_prep")
    update = {
        "families": dict.fromkeys(stage.data_params.families, 0), "calculator_conversations": 0,
        "test_runner_conversations": 0, "workspace_conversations": 9, "malformed_every": 4,
        "length_cap": 8192, "heldout_per_metric": 4, "screen_metrics": ["math_acc"], "screen_per_metric": 8,
    }  # fmt: skip
    stage.data_params = stage.data_params.model_copy(update=update)
    out = tmp_path_factory.mktemp("sft")
    mod.prepare(
        PrepContext(stage=stage, out_dir=out, seed=0, profile="embedded", tokenizer_dir=micro_model_dir())
    )
    rows = [SFTSample.model_validate(r) for name in ("train.jsonl", "heldout_sft.jsonl")
            for _, r in read_jsonl(out / name)]  # fmt: skip
    return rows, json.loads((out / "manifest.json").read_text()), out


def test_stage_00_keeps_the_workspace_source_through_its_converters_and_screens(prepared) -> None:
    rows, manifest, out = prepared
    assert len(rows) == 9 and {r.source for r in rows} == {"openai_workspace_agent"}
    assert CATEGORY["workspace_agent"] == "General Agent" and {r.category for r in rows} == {"General Agent"}
    for row in rows:
        assert validate_sample(row) == [], row.id
        assert [m.role for m in row.messages[:2]] == ["system", "user"] and row.messages[
            -1
        ].content == "Done."
        assert all(m.loss == (m.role == "assistant") for m in row.messages), row.id
        assert all(m.tool_calls for m in row.messages[2:-1] if m.role == "assistant")
    info = manifest["embedded_sources"]["files"]["openai_workspace_agent"]
    planted = {"invalid_json": 1, "missing_messages": 1, "bad_tool_arguments": 1}
    assert info == {"format": "openai", "family": "workspace_agent", "rows": 9, "malformed_planted": planted}
    assert manifest["malformed"]["by_reason"] == info["malformed_planted"]
    assert (out / "sources" / "openai_workspace_agent.jsonl").is_file()


def test_token_length_report_under_the_micro_chat_template(prepared) -> None:
    """Lengths as the embedded trainer encodes them. ``kw_tiny``'s four compact tool specs take ~690 micro
    tokens (all fifteen full ones: ~3,100), yet the 1280 cap of the agent SFT phase still drops every row
    (measured on all 162 demonstrations: 1,357-2,085 tokens): the prompt, the tool results and the
    deliverable's turn add ~650-1,400 more."""
    rows, _, _ = prepared
    tok = micro_tokenizer()
    lengths = []
    for row in rows:
        ids, _ = render_with_loss_mask(tok, row.messages, row.tools)
        assert (
            len(ids) == row.num_tokens + 1
        )  # the builder's measure, and the trainer's closing <|endoftext|>
        lengths.append(len(ids))
    tools_only = len(
        tok(render(tok, rows[0].messages[:2], rows[0].tools), add_special_tokens=False)["input_ids"]
    )
    bare = len(tok(render(tok, rows[0].messages[:2]), add_special_tokens=False)["input_ids"])
    fit = sum(n <= AGENT_SFT_CAP for n in lengths)
    print(f"\nworkspace SFT conversations: n={len(lengths)} tokens min={min(lengths)} "
          f"median={statistics.median(lengths)} max={max(lengths)}; tool specs {tools_only - bare} tokens; "
          f"{fit}/{len(lengths)} fit length_cap {AGENT_SFT_CAP}")  # fmt: skip
    assert 500 < tools_only - bare < 800 and fit == 0  # the four compact specs (all fifteen full: ~3,100)
    assert max(lengths) <= LIMITS["max_context_tokens"]  # each fits the RL episode's context budget
