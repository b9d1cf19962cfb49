"""Stage 00 data prep: the embedded mix from local sources of four formats, masks, screens, manifest; the
production path's source specs and its refusal of unpinned sources and missing benchmark files.

The embedded prep runs once per module with the launch.yaml sizes and the micro model's tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.io import read_jsonl, sha256_file, write_jsonl
from data_prep.schema import SFTSample
from data_prep.sources import CATEGORIES, SFT_SOURCES
from data_prep.tiny_tasks import heldout_tasks
from data_prep.tiny_tasks.sft_sources import calculate
from data_prep.validators import validate_sample
from infra import recipe
from infra.embedded.chat_format import render_with_loss_mask
from infra.embedded.models import load_tokenizer, materialize
from infra.prep import PrepContext
from rewards import RewardRequest, safe_score

FOLDER = recipe.REPO_ROOT / "stages" / "00_sft"


def _resolve(profile: str):
    with pytest.MonkeyPatch.context() as mp:
        if not (FOLDER / "README.md").is_file():  # the README is written separately
            mp.setattr(recipe, "STAGE_FILES", ("data_prep.py", "reward.py", "launch.yaml"))
        return recipe.resolve_stage(FOLDER, profile)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    return materialize("micro", tmp_path_factory.mktemp("ckpt") / "micro", seed=0)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A local source with copies of held-out prompts (this stage's and a later stage's) + a clean row."""
    own = heldout_tasks("sft_format", 48, 0)
    own_prompts = {t.prompt[-1]["content"] for t in own}
    copies = {
        "leak-math": heldout_tasks("math_acc", 48, 0)[3],
        "leak-format": next(t for t in own if t.metadata["family"] == "science"),
        # in a later stage's set only, so it is charged to that set
        "leak-code": next(t for t in heldout_tasks("code_pass1", 200, 0)[100:] if t.prompt[-1]["content"]
                          not in own_prompts),
    }  # fmt: skip
    rows = [
        {"id": rid, "prompt": t.prompt[-1]["content"], "response": t.answer, "reasoning": t.reasoning}
        for rid, t in copies.items()
    ]
    rows.append(
        {"id": "clean", "prompt": "Name the colour of grass.", "response": "Green.", "reasoning": "g"}
    )
    path = tmp_path_factory.mktemp("planted") / "planted.jsonl"
    write_jsonl(path, rows)
    return path, {rid: t.prompt[-1]["content"] for rid, t in copies.items()}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tok_dir, planted):
    stage = _resolve("embedded")
    mod = stage.module("data_prep")
    extra = mod.LocalSource(path=str(planted[0]), name="planted", format="prompt_response", category="Math")
    # with the AWM trajectories on (stage 04 at tiny scale; the main tiny chain leaves them off)
    update = {"extra_sources": [extra], "awm_conversations": 160, "length_cap": 1280}
    stage.data_params = stage.data_params.model_copy(update=update)
    out = tmp_path_factory.mktemp("data")
    summary = mod.prepare(
        PrepContext(stage=stage, out_dir=out, seed=0, profile="embedded", tokenizer_dir=tok_dir)
    )
    train = [SFTSample.model_validate(r) for _, r in read_jsonl(out / "train.jsonl")]
    held = [SFTSample.model_validate(r) for _, r in read_jsonl(out / "heldout_sft.jsonl")]
    manifest = json.loads((out / "manifest.json").read_text())
    return out, summary, train, held, manifest


def test_rows_validate_with_assistant_only_loss(prepared):
    out, summary, train, held, _ = prepared
    assert summary["train"] == len(train) and summary["heldout_sft"] == len(held)
    assert 2000 < len(train) + len(held) < 4000 and 0.02 < len(held) / len(train) < 0.1
    for row in train + held:
        assert validate_sample(row) == [], row.id
        assert all(m.role == "assistant" for m in row.messages if m.loss == 1), row.id
        assert row.messages[-1].role == "assistant" and row.messages[-1].loss == 1
        assert 0 < row.num_tokens <= 1280  # the embedded length cap (AWM trajectories run to ~900)
    conv = {r.id.rsplit("#", 1)[0] for r in train}
    assert not conv & {r.id.rsplit("#", 1)[0] for r in held}  # the held-out slice is whole conversations
    assert not (out / "sft.jsonl").exists()
    assert {p.name: len(p.read_text().splitlines()) for p in (out / "heldout").glob("*.jsonl")} == {
        "sft_format.jsonl": 48,
        "math_acc.jsonl": 48,
    }
    by_source = {r.source for r in train}
    assert {"sharegpt_math", "openai_science", "prompt_response_if", "openai_calculator"} <= by_source
    awm = [r for r in train + held if r.source == "openai_awm_agent"]
    assert awm and all(r.category == "General Agent" and len(r.tools or []) == 5 for r in awm)
    calls = [m.tool_calls[0].name for r in awm for m in r.messages if m.tool_calls]
    assert calls and all(c.split("_", 1)[0] in {"list", "get", "create", "update", "delete"} for c in calls)


def test_tool_turns_split_and_masked(prepared, tok_dir):
    _, _, train, held, _ = prepared
    rows = {r.id: r for r in train + held}
    two = [r for r in rows.values() if r.source == "openai_calculator" and r.id.endswith("#1")]
    assert two, "two-request calculator chats must split into two examples"
    second = two[0]
    first = rows[second.id[:-1] + "0"]
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "assistant"]
    assert [m.loss for m in first.messages] == [0, 1, 0, 1]
    assert first.messages[1].tool_calls[0].name == "calculator" and first.messages[1].reasoning
    assert first.messages[2].content == first.messages[3].content.removeprefix("\\boxed{").removesuffix("}")
    assert [m.loss for m in second.messages] == [0, 0, 0, 0, 0, 1, 0, 1]
    assert second.messages[1].reasoning is None and second.messages[3].reasoning is None  # stripped context
    assert second.tools[0]["function"]["name"] == "calculator"
    ids, mask = render_with_loss_mask(load_tokenizer(tok_dir), second.messages, second.tools)
    supervised = load_tokenizer(tok_dir).decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "<tool_response>" not in supervised and second.messages[0].content not in supervised
    assert "calculator" in supervised and second.messages[-1].content in supervised
    runner = next(r for r in train if r.source == "sharegpt_test_runner")
    assert [m.role for m in runner.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert runner.tools[0]["function"]["name"] == "run_tests" and "<tools>" not in runner.messages[0].content
    assert json.loads(runner.messages[3].content) == {"passed": 3, "failed": 0}


def test_malformed_rows_dropped_and_counted_repairs_applied(prepared):
    _, _, _, _, manifest = prepared
    planted = manifest["embedded_sources"]["malformed_planted"]
    assert len(planted) == 8 and sum(planted.values()) > 50
    assert manifest["malformed"]["by_reason"] == planted
    assert {"system_control_line_removed", "end_token_suffix_removed", "answer_tags_unwrapped",
            "missing_think_open", "think_tags_moved"} <= set(manifest["repairs_applied"])  # fmt: skip
    steps = {s["step"]: s["count"] for s in manifest["steps"]}
    assert (
        steps["rows_read"] - steps["rows_converted"]
        == sum(planted.values()) - planted["invalid_json"] - (planted["not_an_object"])
    )


def test_planted_heldout_copies_removed(prepared, planted):
    _, summary, train, held, manifest = prepared
    report = manifest["heldout_decontamination"]
    assert "drop_shared" in report["rule"]  # the held-out sets' template phrases are not evidence
    assert sorted(report["removed_ids"]) == [
        "planted/leak-code#0",
        "planted/leak-format#0",
        "planted/leak-math#0",
    ]
    assert (
        report["removed_per_benchmark"]["heldout:code_pass1"] == 1 and summary["heldout_screen_removed"] == 3
    )
    kept = {r.id for r in train + held}
    assert "planted/clean#0" in kept and not any(r.startswith("planted/leak") for r in kept)
    prompts = {m.content for r in train + held for m in r.messages if m.role == "user"}
    assert not prompts & set(planted[1].values())
    screened = manifest["embedded_sources"]["heldout_prescreen"]
    assert screened["code"]["generated"] > screened["code"]["kept"] == 400


def test_mixture_report_and_manifest(prepared):
    out, _, train, held, manifest = prepared
    md = (out / "mixture.md").read_text()
    for category in CATEGORIES:
        assert f"| {category} |" in md
    assert f"| Total | {len(train) + len(held):,} |" in md and (out / "mixture.png").stat().st_size > 1000
    assert {r["category"] for r in manifest["mixture"]} == set(CATEGORIES)
    assert manifest["outputs"]["train.jsonl"]["sha256"] == sha256_file(out / "train.jsonl")
    assert set(manifest["outputs"]) >= {"heldout_sft.jsonl", "heldout/sft_format.jsonl", "mixture.md"}
    assert len(manifest["stage"]["data_prep_sha256"]) == 64 and len(manifest["sources"]) == 10
    assert all(s["license"].startswith("generated") for s in manifest["sources"][:9])


def test_production_specs_pins_and_refusals(tmp_path):
    stage = _resolve("production")
    mod = stage.module("data_prep")
    params = stage.data_params
    specs = mod.production_specs(params)
    assert [s.hub_id for s in specs] == [s.hub_id for s in SFT_SOURCES] and len(specs) == 17
    with pytest.raises(ValueError, match="17 SFT source") as err:
        mod.check_pinned(specs, allow_unpinned=False)
    assert all(s.hub_id in str(err.value) for s in SFT_SOURCES)
    mod.check_pinned(specs, allow_unpinned=True)
    pins = {s.name: "a" * 40 for s in SFT_SOURCES[1:]}
    with pytest.raises(ValueError, match=r"1 SFT source\(s\).*inclusionAI/Ring-lite-sft-data"):
        mod.check_pinned(mod.production_specs(params.model_copy(update={"revisions": pins})), False)
    local = params.model_copy(update={"revisions": pins, "local_files": {"Ring-lite-sft-data": ["x.jsonl"]}})
    mod.check_pinned(mod.production_specs(local), False)
    ctx = PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="production")
    with pytest.raises(ValueError, match="no pinned revision"):
        mod.prepare(ctx)
    stage.data_params = params.model_copy(update={"revisions": {s.name: "b" * 40 for s in SFT_SOURCES}})
    with pytest.raises(FileNotFoundError, match="terminal-bench-2.0.*mcp-atlas"):
        mod.prepare(ctx)
    assert not list(tmp_path.iterdir())  # refused before writing anything
    with pytest.raises(ValueError, match="unknown sources"):
        mod.Params(sources=["not-a-source"])
    with pytest.raises(ValueError, match="unknown families"):
        mod.Params(families={"poetry": 3})


def test_reward_and_calculator():
    stage = _resolve("embedded")
    reward = stage.module("reward").reward
    meta = {"family": "math"}
    good = RewardRequest(response="<think>2 + 2 = 4.</think>\n\\boxed{4}", metadata=meta)
    assert safe_score(reward, good).score == 1.0
    for bad in ("\\boxed{4}", "<think>x</think>\n4", "<think>unclosed \\boxed{4}", ""):
        assert safe_score(reward, RewardRequest(response=bad, metadata=meta)).score == 0.0
    calc = calculate
    assert (calc("6 / 3"), calc("2 * 3 + 1"), calc("7 / 2"), calc("-4 + 1")) == ("2", "7", "3.5", "-3")
    with pytest.raises(ValueError, match="unsupported"):
        calc("__import__('os')")
