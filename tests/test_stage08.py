"""Stage 08 Knowledge-work RL: the config and its refusals, embedded data prep and its manifest, the reward.

Data prep runs the real tiny generators and filters (no teacher, no policy: at the embedded scale there is
none). The reward is graded on hand-made workspaces and transcripts with ``kw_rubric`` and the stage's
group penalties; nothing is mocked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data_prep.io import read_jsonl
from infra.layering import ConfigError
from infra.prep import PrepContext
from infra.production.preflight import check_reward, load_samples
from infra.recipe import REPO_ROOT, import_stage_file, resolve_stage
from rewards.contract import RewardRequest
from rewards.kw_penalties import KWPenaltyParams

STAGE = REPO_ROOT / "stages" / "08_knowledge_work_rl"
reward_module = import_stage_file(STAGE / "reward.py")


def test_config_is_the_papers_objective_and_rejects_unknown_keys() -> None:
    prod = resolve_stage(STAGE, "production").config
    rl = prod.rl
    assert (rl.policy.estimator, rl.policy.advantage, rl.policy.use_tis) == ("cispo", "mean_only", False)
    assert rl.rollout.steps_per_rollout == 1 and rl.dynamic_sampling.filter == "nonzero_std"
    assert rl.shaping.kind == "ultramarine" and prod.reward == "kw_rubric"
    assert prod.production.rollout_routing_replay and prod.production.async_training
    assert prod.production.extra_args == {"use_rollout_logprobs": True}
    assert rl.environment.options["env"].startswith("kw:tasks=/mnt/rufus/data/08_knowledge_work_rl/tasks,")
    embedded = resolve_stage(STAGE, "embedded").config
    assert embedded.rl.environment.options["env"] == "kw_tiny" and embedded.rl.policy == rl.policy
    for key in ("data.bogus", "data.synthesis.nope", "rl.policy.lora_rank"):
        with pytest.raises(ConfigError, match="unknown key"):
            resolve_stage(STAGE, "production", sets={key: 1})


def test_penalty_constants_come_from_launch_yaml_and_validate() -> None:
    params = reward_module.penalty_params()
    assert params == KWPenaltyParams()  # launch.yaml states the library defaults (our values, not UM's)
    assert params.shaping() == {
        "kind": "ultramarine",
        "params": {k: float(v) for k, v in params.model_dump().items()},
    }


def test_embedded_prep_writes_agent_rows_and_counts_every_filter(tmp_path: Path) -> None:
    sets = {"data.train_tasks": 9, "data.heldout_per_metric": 3, "eval.guardrails": []}
    stage = resolve_stage(STAGE, "embedded", sets=sets)
    prep = import_stage_file(STAGE / "data_prep.py")
    summary = prep.prepare(PrepContext(stage=stage, out_dir=tmp_path, seed=0, profile="embedded"))
    # Tasks 6-8 of the 9 are the RL third (knowledge_work_sft.rl_only): SFT demonstrates only the others.
    assert summary["train"] == 3 and summary["families"] == {"knowledge_work": 3}
    steps = {s["step"]: s for s in json.loads((tmp_path / "manifest.json").read_text())["steps"]}
    for name in ("kw_leakage", "kw_hacking"):
        assert steps[name]["count"] == 9 and steps[name]["dropped"]["total"] == 0 and steps[name]["kept"] == 9
    assert steps["kw_hacking"]["max_degenerate_score"] == 0.25
    assert steps["kw_curriculum"]["skipped"] is True and steps["kw_filtered_rows"]["count"] == 9
    assert steps["rl_split"]["count"] == 3
    rows = [r for _, r in read_jsonl(tmp_path / "train.jsonl")]
    row = rows[0]
    assert (
        row["metadata"]["environment_options"]["env"] == "kw_tiny"
        and row["metadata"]["reward"] == "kw_rubric"
    )
    assert row["label"]["rubric"] and row["label"]["deliverables"]
    assert all(
        c["requirement"] not in json.dumps(row["prompt"]) for c in row["label"]["rubric"]
    )  # rubric stays out
    heldout = [r for _, r in read_jsonl(tmp_path / "heldout" / "kw_rubric_score.jsonl")]
    assert len(heldout) == 3 and {r["metadata"]["split"] for r in heldout} == {"heldout"}
    assert not {r["metadata"]["task"] for r in heldout} & {r["metadata"]["task"] for r in rows}


def test_embedded_curriculum_band_scores_the_rl_tasks_with_the_input_checkpoint(
    tmp_path: Path, sandbox_ok
) -> None:
    """The band's episodes are the real input checkpoint's (the random-weight micro model, which writes no
    deliverable: every task scores 0), sampled as the stage's rollouts sample, 2 per task."""
    from infra.agents.local_server import micro_model_dir

    sets = {"data.train_tasks": 9, "data.heldout_per_metric": 3, "eval.guardrails": [],
            "data.embedded_curriculum": True, "data.synthesis.curriculum.samples": 2,
            "rl.rollout.max_response_tokens": 16}  # fmt: skip
    prep = import_stage_file(STAGE / "data_prep.py")

    def steps_at(low: float, out: Path) -> dict[str, Any]:
        stage = resolve_stage(STAGE, "embedded", sets={**sets, "data.synthesis.curriculum.low": low})
        model = micro_model_dir()
        ctx = PrepContext(stage=stage, out_dir=out, seed=0, profile="embedded", tokenizer_dir=model)
        summary = prep.prepare(ctx)
        steps = {s["step"]: s for s in json.loads((out / "manifest.json").read_text())["steps"]}
        assert steps["kw_curriculum"]["count"] == summary["train"]
        return steps["kw_curriculum"]

    kept = steps_at(0.0, tmp_path / "open")  # a band that admits 0 keeps all three
    assert kept["count"] == 3 and list(kept["means"].values()) == [0.0, 0.0, 0.0] and kept["samples"] == 2
    # the recipe's band: tasks the policy never scores on are too hard, and an empty set is refused by name
    with pytest.raises(ConfigError, match="step 'kw_curriculum' removed the last ones"):
        steps_at(0.05, tmp_path / "band")


# ---------------------------------------------------------------- the reward on hand-made episodes
LABEL = json.loads((STAGE / "preflight.json").read_text())["good"]["label"]
GOOD = STAGE / "preflight_workspace" / "good"
BAD = STAGE / "preflight_workspace" / "bad"


def transcript(turns: int, errors: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "Write acme_memo.md."}]
    for i in range(turns - 1):
        bad = i < errors
        use = {"id": f"c{i}", "name": "read", "input": {}}
        result = {"role": "tool", "tool_call_id": f"c{i}", "status": "error" if bad else "success"}
        result["content"] = "Error: read needs file_path" if bad else "ok"
        out += [{"role": "assistant", "content": "", "tool_calls": [use]}, result]
    return [*out, {"role": "assistant", "content": "Done."}]


def request(workspace: Path, turns: int = 2, errors: int = 0, label: Any = LABEL) -> RewardRequest:
    prompt = [{"role": "user", "content": "Write acme_memo.md."}]
    meta = {"workspace": str(workspace)}
    return RewardRequest(
        prompt=prompt, response="Done.", label=label, metadata=meta, transcript=transcript(turns, errors)
    )


def test_rubric_grades_the_deliverable() -> None:
    good = reward_module.reward(request(GOOD))
    assert good.score == 1.0 and not good.aborted and good.components["criterion_end"] == 1.0
    bad = reward_module.reward(request(BAD))
    assert bad.score == 0.0 and bad.components["criterion_not_terminated"] == 1.0  # the must-not fired
    missing = reward_module.reward(request(GOOD.parent / "absent"))
    assert missing.aborted and missing.failure == "no_workspace"


def test_group_penalties_on_transcripts(monkeypatch) -> None:
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    judged = {**LABEL, "rubric": [*LABEL["rubric"], {"id": "tone", "requirement": "Addressed to counsel.",
                                                      "weight": 1.0, "kind": "judge"}]}  # fmt: skip
    group = [
        (request(GOOD, turns=3), 1_000),  # full credit, few turns, short
        (request(GOOD, turns=70), 1_000),  # f(70) = (70 - 40) / 60 = 0.5: the reward fades to half
        (request(GOOD, turns=4, errors=3), 1_000),  # three invalid calls: -0.15
        (request(GOOD, turns=2), 32_768 + 16_384),  # 16K tokens over B: -0.1 * 16384 / 32768 = -0.05
        (request(BAD, turns=2), 1_000),  # 0: the must-nots cancel the credit
        (request(GOOD, label=judged), 1_000),  # judge criteria, no judge: aborted, leaves the group
    ]
    got = reward_module.group_rewards(group)
    assert got[:5] == pytest.approx([1.0, 0.5, 0.85, 0.95, 0.0]) and got[5] is None
    stats = reward_module.episode_stats(1.0, transcript(4, errors=3), 10)
    assert (stats.turns, stats.invalid_tool_calls) == (4, 3)
    # the output penalty is gated on the group's faded mean: an all-zero group is not charged for length
    zero = reward_module.group_rewards([(request(BAD), 200_000), (request(BAD), 1_000)])
    assert zero == [0.0, 0.0]


def test_preflight_samples_score_one_and_zero() -> None:
    check = check_reward(resolve_stage(STAGE, "production"), load_samples(STAGE))
    assert check.status == "ok", check.detail


def test_registry_holds_the_kw_entries() -> None:
    from eval.registry import BENCHMARKS, EMBEDDED_METRICS
    from eval.registry_kw import KW_EMBEDDED_METRICS, KW_ENTRIES

    import_stage_file(STAGE / "data_prep.py")  # registers kw_rubric_score as the stage runs it
    assert EMBEDDED_METRICS["kw_rubric_score"] == KW_EMBEDDED_METRICS["kw_rubric_score"]
    names = [b.name for b in KW_ENTRIES]
    assert len(set(names)) == 6 and all(BENCHMARKS[n] is b for n, b in zip(names, KW_ENTRIES, strict=True))
    assert all(b.harness == "agent" and b.source.revision is None and b.strip_thinking for b in KW_ENTRIES)
