"""Every number of recipe-facts §00–§06 (RA Table 16 and §3.1–§3.7) is pinned in the stage configs.

These read the production profile of each launch.yaml: the embedded profile only resizes, and
test_config checks that it keeps the algorithm.
"""

from __future__ import annotations

import pytest

from infra.recipe import REPO_ROOT, resolve_stage


def _stage(name: str):
    return resolve_stage(REPO_ROOT / "stages" / name, "production")


def _results(stage) -> dict[str, tuple[float, float, bool]]:
    return {r.metric: (r.before, r.after, r.guardrail) for r in stage.config.paper.results}


def test_00_sft_table16_and_section_3_1():
    s = _stage("00_sft").config
    o = s.optimizer
    assert (o.lr, o.min_lr, o.schedule, o.warmup_steps) == (5e-5, 5e-6, "cosine", 100)
    assert (o.betas, o.eps, o.weight_decay, o.clip_grad) == ((0.9, 0.95), 1e-8, 0.1, 1.0)
    assert (s.sft.global_batch, s.sft.epochs, s.sft.max_seq_len, s.sft.length_cap) == (
        4096,
        3,
        131072,
        120000,
    )
    assert s.sft.packing and s.sft.select_by == "heldout_plateau"
    assert s.data["length_cap"] == 120000
    assert s.production.nodes == 64 and s.production.node_hours == 832 * 24


def test_01_reasoning_rl_table16_and_section_3_2():
    s = _stage("01_reasoning_rl").config
    r, p, o = s.rl.rollout, s.rl.policy, s.optimizer
    assert (o.lr, o.schedule, o.weight_decay, o.betas, o.clip_grad) == (
        1e-6,
        "constant",
        0.1,
        (0.9, 0.98),
        1.0,
    )
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (256, 16, 2)
    assert r.prompts_per_step * r.samples_per_prompt // r.steps_per_rollout == 2048  # global batch
    assert (r.max_response_tokens, r.temperature, r.over_sampling_factor) == (30000, 1.0, 4)
    assert (p.estimator, p.use_tis, p.eps_clip, p.eps_clip_high) == ("gspo", True, 1e-3, 2e-3)
    assert (p.kl_coef, p.entropy_coef, p.mask_truncated) == (0.0, 0.0, True)
    assert s.rl.dynamic_sampling.filter == "band" and s.rl.dynamic_sampling.band == (0.0, 0.8)
    assert s.rl.shaping.kind == "shortest_correct_length"
    assert s.data["families"] == {"math": 57736, "science": 43199, "puzzle": 20226}
    assert sum(s.data["families"].values()) == 121161
    assert s.data["learnability"] == {"samples": 8, "drop_above": 0.8, "drop_zero": True}
    prod = s.production
    assert (prod.nodes, prod.colocate, prod.sglang.gpus_per_engine) == (8, True, 8)
    # FP8 rollouts, per-tensor: the paper's "first 3 layers in BF16" is a documented deviation (stage README)
    assert prod.sglang.fp8 and prod.sglang.fp8_strategy == "tensor" and prod.rollout_routing_replay
    assert _results(_stage("01_reasoning_rl")) == {
        "GPQA-Diamond": (68.18, 73.50, False),
        "AIME 25": (90.83, 88.02, True),
        "AIME 26": (90.00, 87.40, True),
    }


def test_02_coding_rl_table16_and_section_3_3():
    s = _stage("02_coding_rl").config
    r, p, o = s.rl.rollout, s.rl.policy, s.optimizer
    assert (o.lr, o.schedule, o.weight_decay, o.betas, o.clip_grad) == (
        1e-6,
        "constant",
        0.1,
        (0.9, 0.98),
        1.0,
    )
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (128, 64, 8)
    assert r.prompts_per_step * r.samples_per_prompt == 8192
    assert (r.max_response_tokens, r.num_rollouts) == (65536, 23)
    assert (p.estimator, p.use_tis, p.eps_clip, p.eps_clip_high, p.kl_coef) == ("gspo", True, 2e-3, 3e-3, 0.0)
    assert p.mask_truncated
    (phase,) = s.rl.phases
    # 128K context; response = 131,072 − 8,192 prompt − 1 (SGLang refuses prompt + new tokens >= context)
    assert phase.rollout["prompts_per_step"] == 64 and phase.rollout["max_context_tokens"] == 131072
    assert phase.rollout["max_response_tokens"] == 131072 - s.production.max_prompt_tokens - 1
    assert phase.policy["kl_coef"] == 1e-6
    assert s.data["sources"] == {"evolvecoder": 14743, "nemotron": 9393, "dolci": 3109, "adr": 2160}
    assert sum(s.data["sources"].values()) == 29405
    assert (s.data["max_tests"], s.data["warmup_samples"]) == (50, 4)
    assert s.data["lcb_leak"] == {"prefix_chars": 400, "ngram": 60, "min_shared_ngrams": 5}
    assert (s.production.nodes, s.production.colocate) == (32, True)
    assert _results(_stage("02_coding_rl")) == {
        "LiveCodeBench v6 pass@1": (68.6, 75.9, False),
        "LiveCodeBench v6 pass@8": (85.1, 87.4, False),
    }


def test_03_if_rl_table16_and_section_3_4():
    s = _stage("03_if_rl").config
    r, p = s.rl.rollout, s.rl.policy
    assert s.optimizer.lr == 1.5e-6
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (256, 16, 1)
    assert (r.max_response_tokens, r.num_rollouts, p.estimator) == (16384, 90, "grpo")
    assert (s.data["multi_constraint"], s.data["multi_turn"]) == (14000, 13000)
    assert s.data["constraints_per_prompt"] == [2, 6]
    assert s.data["difficulty"] == {"samples": 8, "drop_above": 0.8} and s.data["quality_attempts"] == 4
    assert s.production.nodes == 8
    res = _results(_stage("03_if_rl"))
    assert res["IFEval"] == (90.5, 94.5, False) and res["IFBench"] == (63.8, 77.8, False)
    assert res["Multi-challenge"] == (31.1, 55.8, False) and res["AdvancedIF"] == (45.5, 62.9, False)


def test_04_general_agent_table16_and_section_3_5():
    s = _stage("04_general_agent").config
    r, p = s.rl.rollout, s.rl.policy
    assert s.optimizer.lr == 1e-6 and s.production.nodes == 16 and s.production.rollout_routing_replay
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (48, 64, 1)
    assert r.max_context_tokens == 32768 and p.estimator == "grpo" and p.kl_coef == 0.0
    assert s.rl.dynamic_sampling.filter == "nonzero_std" and r.over_sampling_factor > 1  # DAPO with refill
    assert s.reward == "awm_verifier" and s.rl.environment.name == "agent"
    assert s.rl.environment.options["env"].startswith("awm:release=/mnt/rufus/data/04_general_agent/")
    assert len(s.data["source"]["revision"]) == 40  # AgentWorldModel-1K pinned to a commit
    res = _results(_stage("04_general_agent"))
    assert res["MCP-Atlas"] == (34.95, 42.75, False) and res["Tau2-Retail"] == (74.0, 83.8, False)


def test_05_coding_agent_table16_and_section_3_6():
    s = _stage("05_coding_agent").config
    r, p = s.rl.rollout, s.rl.policy
    assert s.optimizer.lr == 1e-6 and s.production.nodes == 16 and s.production.rollout_routing_replay
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (32, 32, 1)
    assert r.max_context_tokens == 61440  # Table 16: 60K
    assert p.estimator == "grpo" and p.kl_coef == 0.0 and p.entropy_coef == 0.0
    assert s.rl.dynamic_sampling.filter == "nonzero_std" and r.over_sampling_factor > 1  # DAPO with refill
    assert s.reward == "harbor_tests" and s.rl.environment.name == "agent"
    assert s.rl.environment.options["env"].startswith("harbor:tasks=/mnt/rufus/data/05_coding_agent/tasks,")
    assert s.rl.environment.options["ray_actors"] > 0  # episodes in Ray environment actors
    assert [src["name"] for src in s.data["sources"]] == ["endless_terminal", "seta_env", "scale_swe"]
    assert s.data["filter_samples"] > 0 and "teacher" not in s.data  # learnability on the policy alone
    assert s.eval.benchmarks.targets == ["swe_bench_verified", "terminal_bench_2_1"]
    res = _results(_stage("05_coding_agent"))
    assert res["SWE-bench Verified"] == (65.6, 67.8, False)
    assert res["Terminal-Bench 2.1"] == (38.76, 40.17, False)
    assert {k for k, v in res.items() if v[2]} == {"AIME 26", "IFEval", "LiveCodeBench"}


def test_06_search_agent_table16_and_section_3_7():
    s = _stage("06_search_agent").config
    r, p = s.rl.rollout, s.rl.policy
    assert s.optimizer.lr == 3e-6 and s.optimizer.schedule == "constant"
    assert s.production.nodes == 16 and s.production.rollout_routing_replay
    assert (r.prompts_per_step, r.samples_per_prompt, r.steps_per_rollout) == (32, 16, 2)  # global batch 256
    assert (r.max_response_tokens, r.max_context_tokens) == (32768, 131072)  # 32K/turn, 128K/trajectory
    assert (p.estimator, p.advantage, p.loss_reduction) == ("grpo", "mean_only", "sequence")
    assert p.kl_coef == 1e-3 and p.entropy_coef == 0.0
    assert s.reward == "search_judge" and "max_tool_calls=100," in s.rl.environment.options["env"]
    assert (s.data["tool_free_samples"], s.data["tool_samples"]) == (8, 8)
    assert s.data["judge_server"]["model"] == "Qwen/Qwen3-32B"  # RA's training judge
    res = _results(_stage("06_search_agent"))
    assert res == {
        "BrowseComp": (34.2, 37.2, False),
        "Seal-0": (48.6, 54.0, False),
        "HLE-Verified": (47.7, 51.1, False),
    }


STAGE_IDS = [
    "00_sft",
    "01_reasoning_rl",
    "02_coding_rl",
    "03_if_rl",
    "04_general_agent",
    "05_coding_agent",
    "06_search_agent",
]


@pytest.mark.parametrize("name", STAGE_IDS)
def test_embedded_profile_keeps_rewards_filters_and_objective(name: str):
    prod = resolve_stage(REPO_ROOT / "stages" / name, "production").config
    emb = resolve_stage(REPO_ROOT / "stages" / name, "embedded").config
    assert emb.reward == prod.reward and emb.kind == prod.kind
    if prod.rl is not None:
        assert emb.rl.policy == prod.rl.policy
        assert emb.rl.dynamic_sampling == prod.rl.dynamic_sampling
        assert emb.rl.shaping == prod.rl.shaping
        assert emb.rl.rollout.steps_per_rollout <= prod.rl.rollout.steps_per_rollout


def test_coding_rl_embedded_phases_are_resized_not_reshaped():
    emb = resolve_stage(REPO_ROOT / "stages" / "02_coding_rl", "embedded").config
    prod = resolve_stage(REPO_ROOT / "stages" / "02_coding_rl", "production").config
    (e_phase,) = emb.rl.phases
    (p_phase,) = prod.rl.phases
    assert e_phase.policy == p_phase.policy
    assert e_phase.rollout["max_response_tokens"] > emb.rl.rollout.max_response_tokens
    assert e_phase.rollout["prompts_per_step"] < emb.rl.rollout.prompts_per_step
