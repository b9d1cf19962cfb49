"""Stage 04 General Agent: the tiny AWM family, lean scenarios, compact schemas, the reward and data prep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.awm_generate import generate as generate_release
from data_prep.tiny_tasks import awm as tiny_awm
from data_prep.tiny_tasks import generate, heldout_tasks
from data_prep.tiny_tasks.rl_prep import prompt_text
from infra import recipe
from infra.agents.awm.release import load_release
from infra.agents.awm.schemas import compact_schema
from infra.agents.awm.selfcheck import load_gold, replay, self_check
from infra.agents.awm.server import AwmServerPool
from infra.prep import PrepContext
from rewards import RewardRequest, get_reward

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def release(sandbox_ok) -> Path:
    return tiny_awm.tiny_release()


def test_lean_single_table_scenarios_have_five_tools_and_self_check(tmp_path: Path, sandbox_ok) -> None:
    names = generate_release(
        tmp_path, seed=2, tasks=4, domains=["team_calendar"], split_tables=True, lean=True
    )
    scenarios = load_release(tmp_path)
    assert sorted(names) == sorted(scenarios) and len(names) >= 3
    for s in scenarios.values():
        assert len(s.tables) == 1 and len(s.spec_operation_ids()) == 5
        assert "order_by" not in s.full_code and "description=" not in s.full_code
    assert self_check(tmp_path) == []


def test_compact_schema_keeps_arguments_and_drops_only_noise() -> None:
    raw = {
        "type": "object",
        "title": "Body",
        "properties": {
            "title": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Title"},
            "n": {"type": "integer", "minimum": 1, "default": 20, "title": "N", "description": "How many"},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["n"],
    }
    assert compact_schema(raw) == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},  # a property named "title" is an argument, kept
            "n": {"type": "integer", "minimum": 1, "default": 20, "description": "How many"},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},  # a real union stays
        },
        "required": ["n"],
    }


def test_family_splits_unseen_scenarios_and_unseen_tasks(release: Path) -> None:
    train = [t for t in generate(tiny_awm.FAMILY, 400, 0, "train") if not tiny_awm.is_repeat(t.id)]
    held = heldout_tasks(tiny_awm.METRIC, 400, 0)
    key = lambda t: (t.metadata["scenario"], t.metadata["task_idx"])  # noqa: E731
    assert not {key(t) for t in train} & {key(t) for t in held}
    unseen = {t.metadata["scenario"] for t in held} - {t.metadata["scenario"] for t in train}
    assert len(unseen) == tiny_awm.HELDOUT_SCENARIOS
    assert any(t.metadata["scenario"] not in unseen for t in held)  # unseen tasks of seen scenarios too
    for t in (train[0], held[0]):
        assert t.metadata["environment"] == "agent" and t.metadata["environment_options"]["env"] == "awm_tiny"
        assert t.metadata["reward"] == "awm_verifier" and t.prompt[0]["role"] == "system"
    assert [t.id for t in generate(tiny_awm.FAMILY, 20, 3, "train")] == [
        t.id for t in generate(tiny_awm.FAMILY, 20, 3, "train")
    ]


def test_train_tasks_split_into_sft_demonstrations_and_an_rl_third(release: Path) -> None:
    train = [t for t in generate(tiny_awm.FAMILY, 400, 0, "train") if not tiny_awm.is_repeat(t.id)]
    rl = [t for t in train if tiny_awm.rl_only(t.id)]
    demos = [t for t in train if tiny_awm.sft_demo(t)]
    assert len(rl) + len(demos) == len(train) and not {t.id for t in rl} & {t.id for t in demos}
    assert 0.3 < len(rl) / len(train) < 0.37  # a third of each seen scenario's distinct train tasks
    assert {t.metadata["scenario"] for t in rl} == {t.metadata["scenario"] for t in demos}
    assert all(t.metadata["task_idx"] == tiny_awm.task_index(t.id) for t in train)
    repeat = generate(tiny_awm.FAMILY, len(train) + 1, 0, "train")[-1]
    assert tiny_awm.is_repeat(repeat.id) and not tiny_awm.rl_only(repeat.id) and not tiny_awm.sft_demo(repeat)


def test_every_split_holds_every_kind_of_task(release: Path) -> None:
    # The generator cycles task kinds with the task index; a split on the same cycle would give SFT only
    # creates/updates, RL only deletes and the seen-scenario held-out only look-ups (found in session 26).
    from infra.agents.awm.selfcheck import load_gold

    gold = load_gold(release)

    def kind(t) -> str:  # the operation of the task's last gold call: create, update, delete or list
        return gold[(t.metadata["scenario"], t.metadata["task_idx"])]["actions"][-1]["tool"].split("_")[0]

    train = [t for t in generate(tiny_awm.FAMILY, 400, 0, "train") if not tiny_awm.is_repeat(t.id)]
    held = heldout_tasks(tiny_awm.METRIC, 400, 0)
    unseen = {t.metadata["scenario"] for t in held} - {t.metadata["scenario"] for t in train}
    splits = {
        "sft": [t for t in train if tiny_awm.sft_demo(t)],
        "rl": [t for t in train if tiny_awm.rl_only(t.id)],
        "held-out, seen scenarios": [t for t in held if t.metadata["scenario"] not in unseen],
    }
    for name, tasks in splits.items():
        assert {kind(t) for t in tasks} == {"create", "update", "delete", "list"}, name


def test_gold_conversations_carry_the_servers_real_replies(release: Path) -> None:
    tasks = [
        t for t in generate(tiny_awm.FAMILY, 60, 0, "train") if t.prompt[1]["content"].startswith("Delete")
    ]
    rows = tiny_awm.gold_conversations(tasks[:3])
    assert len(rows) == 3
    for row in rows:
        calls = [m for m in row["messages"] if m.get("tool_calls")]
        replies = [m for m in row["messages"] if m["role"] == "tool"]
        assert [c["tool_calls"][0]["function"]["name"].split("_")[0] for c in calls] == ["list", "delete"]
        found = json.loads(replies[0]["content"])  # the list call's real reply names the row to delete
        target = json.loads(calls[1]["tool_calls"][0]["function"]["arguments"])["item_id"]
        assert [r["id"] for r in found] == [target] and json.loads(replies[1]["content"]) == {
            "deleted": target
        }
        assert {t["function"]["name"] for t in row["tools"]} >= {
            "get_" + calls[1]["tool_calls"][0]["function"]["name"].split("_", 1)[1]
        }
        assert row["messages"][-1] == {"role": "assistant", "content": tiny_awm.DONE}


def test_screens_read_the_request_not_the_scenario_system_turn() -> None:
    system = {"role": "system", "content": "You act for user 1 in the app."}
    user = {"role": "user", "content": "Delete the track 'Glass Golden'."}
    agent = {"prompt": [system, user], "metadata": {"environment": "agent"}}
    plain = {"prompt": [system, user], "metadata": {}}
    assert "user 1" not in prompt_text(agent) and "Glass Golden" in prompt_text(agent)
    assert "user 1" in prompt_text(plain)


def test_awm_verifier_scores_the_final_database_and_aborts_without_one(release: Path, tmp_path: Path) -> None:
    reward = get_reward("awm_verifier")
    assert reward(RewardRequest(response="Done.")).aborted
    scenarios, gold = load_release(release), load_gold(release)
    (name, idx), record = next(iter(gold.items()))
    pool = AwmServerPool(1)
    try:
        final, rejected = replay(pool, scenarios[name], record["actions"])
    finally:
        pool.close()
    assert not rejected
    (tmp_path / "final.db").write_bytes(final)
    (tmp_path / "pristine.db").write_bytes(scenarios[name].database())
    meta = {"awm_release": str(release), "scenario": name, "task_idx": idx}
    answer = str(record.get("final_answer") or "Done.")
    done = reward(
        RewardRequest(response=answer, metadata={**meta, "final_db_path": str(tmp_path / "final.db")})
    )
    noop = reward(
        RewardRequest(response="", metadata={**meta, "final_db_path": str(tmp_path / "pristine.db")})
    )
    assert (done.score, done.aborted, noop.score, noop.aborted) == (1.0, False, 0.0, False)
    missing = reward(
        RewardRequest(response="", metadata={**meta, "final_db_path": str(tmp_path / "gone.db")})
    )
    assert missing.aborted and "gone.db" in missing.details["error"]


def test_embedded_data_prep_writes_verified_rows_and_counts_every_step(release: Path, tmp_path: Path) -> None:
    stage = recipe.resolve_stage(ROOT / "stages" / "04_general_agent", "embedded")
    ctx = PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="embedded")
    summary = stage.module("data_prep").prepare(ctx)
    rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert summary["train"] == len(rows) == 86 and summary["families"] == {tiny_awm.FAMILY: len(rows)}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    steps = [s["step"] for s in manifest["steps"]]
    assert steps == ["generated", "heldout_overlap", "decontamination", "rl_split", "correctness_teacher",
                     "correctness_difficulty"]  # fmt: skip
    # Every train task is drawn; RL keeps the third that SFT never demonstrates (awm.rl_only).
    counts = {s["step"]: s["count"] for s in manifest["steps"]}
    assert counts["generated"] == 263 and counts["rl_split"] == 86
    assert all(tiny_awm.rl_only(r["id"]) for r in rows)
    held = {
        json.loads(x)["id"]
        for x in (tmp_path / "heldout" / "agent_task_success.jsonl").read_text().splitlines()
    }
    assert held and not held & {r["id"] for r in rows}
    assert all(r["metadata"]["environment_options"]["env"] == "awm_tiny" for r in rows)


def test_embedded_difficulty_filter_keeps_a_task_only_the_gold_teacher_passes(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The correctness rule asks the teacher (the gold replay) about tasks the policy never passed.

    The policy is a double (a checkpoint's episodes take minutes here): it passes the first task always,
    the second never and the third once in two. It samples in the rollouts' dtype.
    """
    from data_prep import agent_filters
    from rewards.contract import RewardResult

    dtypes: list[str] = []

    def policy_double(self, tasks, n):  # noqa: ANN001, ANN202 - CheckpointRunner.__call__'s signature
        dtypes.append(self.dtype)
        plan = [[True, True], [False, False], [True, False]]
        return [[RewardResult(score=float(p)) for p in plan[i % 3][:n]] for i in range(len(tasks))]

    monkeypatch.setattr(agent_filters.CheckpointRunner, "__call__", policy_double)
    sets = {"data.filter_samples": 2, "rl.rollout.sampler_dtype": "bfloat16"}
    stage = recipe.resolve_stage(ROOT / "stages" / "04_general_agent", "embedded", sets=sets)
    ctx = PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="embedded", tokenizer_dir=tmp_path)
    stage.module("data_prep").prepare(ctx)
    (step,) = [s for s in json.loads((tmp_path / "manifest.json").read_text())["steps"]
               if s["step"] == "correctness_difficulty"]  # fmt: skip
    assert step["dropped_always_passed"] == 29 and step["dropped_never_passed"] == 0
    assert step["teacher_pass_histogram"] == {"1/1": 29} and step["kept"] == 86 - 29
    assert dtypes and set(dtypes) == {"bfloat16"}


def test_embedded_turn_budget_holds_every_gold_tool_call(release: Path) -> None:
    """A gold call longer than the per-turn budget makes its task unsolvable (it is cut mid-call)."""
    from infra.embedded.chat_format import render_with_loss_mask
    from tests.agents_scripted import micro_tokenizer

    tok = micro_tokenizer()
    stage = recipe.resolve_stage(ROOT / "stages" / "04_general_agent", "embedded")
    budget = stage.config.rl.rollout.max_response_tokens
    longest = 0
    for g in load_gold(release).values():
        for action in g["actions"]:
            fn = {"name": action["tool"], "arguments": action["arguments"]}
            call = {"id": "c", "type": "function", "function": fn}
            turn = {"role": "assistant", "content": "", "tool_calls": [call]}
            _, mask = render_with_loss_mask(tok, [{"role": "user", "content": "x"}, turn])
            longest = max(longest, sum(mask))
    assert longest <= budget, f"the longest gold call is {longest} tokens, the per-turn budget {budget}"
