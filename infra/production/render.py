"""Render one stage's slime ``train.py`` / ``train_async.py`` arguments from its config and the cluster.

Arguments are grouped the way slime's run scripts group them (MODEL, CKPT, ROLLOUT, EVAL, PERF, GRPO,
OPTIMIZER, WANDB, SGLANG, MISC) so the text runbook reads like one. Every number comes from the stage's
:class:`~infra.config.StageConfig` (optimizer, sft, rl, production sections); nothing is hard-coded
except slime's fixed entry points and the GLM-4.5-Air model flags. RL stages also get the hook YAML
(``--custom-config-path``) that carries the settings slime has no flag for (reward name, shaping, band,
advantage kind, truncation masking) to ``infra.production.slime_hooks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from infra.config import StageConfig
from infra.environments import stage_environment
from infra.production.cluster import ClusterProfile
from infra.production.model_args import GLM_STOP_TOKEN_IDS, MODEL_CONTEXT, NUM_LAYERS, glm45_air_model_args

HOOKS = "infra.production.slime_hooks"
SFT_ROLLOUT = "infra.production.sft_rollout.generate_rollout"


@dataclass
class TrainArgs:
    """The argument groups of one ``train.py`` invocation and the files it expects on shared storage."""

    entry: str
    sections: dict[str, list[str]]
    files: dict[str, str] = field(default_factory=dict)
    phase: int = 0

    @property
    def argv(self) -> list[str]:
        """All arguments after ``train.py``, in section order."""
        return [tok for sec in self.sections.values() for tok in sec]


def _num(x: float | int) -> str:
    """A number as slime's argparse reads it: ints plain, floats in the shortest exact form."""
    if isinstance(x, bool):
        raise TypeError("booleans are flags, not values")
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 1:
        return str(int(x))
    return repr(float(x))


def _flag(args: list[str], name: str, *values: Any) -> None:
    args.append(name)
    args.extend(v if isinstance(v, str) else _num(v) for v in values)


def _model(config: StageConfig) -> list[str]:
    return glm45_air_model_args()


def _perf(config: StageConfig) -> list[str]:
    p = config.production.parallelism
    out: list[str] = []
    _flag(out, "--tensor-model-parallel-size", p.tp)
    if p.sequence_parallel and p.tp > 1:
        out.append("--sequence-parallel")
    _flag(out, "--pipeline-model-parallel-size", p.pp)
    if p.pp > 1 and NUM_LAYERS % p.pp:
        # Uneven split: every stage but the last holds ceil(L/pp) layers; the last takes the rest.
        _flag(
            out, "--decoder-last-pipeline-num-layers", NUM_LAYERS - (p.pp - 1) * math.ceil(NUM_LAYERS / p.pp)
        )
    _flag(out, "--context-parallel-size", p.cp)
    _flag(out, "--expert-model-parallel-size", p.ep)
    _flag(out, "--expert-tensor-parallel-size", p.etp)
    if p.recompute == "full":
        out += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    elif p.recompute == "selective":
        out += ["--recompute-granularity", "selective"]
    out.append("--use-dynamic-batch-size")
    _flag(out, "--max-tokens-per-gpu", p.max_tokens_per_gpu)
    return out


def _optimizer(config: StageConfig) -> list[str]:
    o = config.optimizer
    out = ["--optimizer", "adam"]
    _flag(out, "--lr", o.lr)
    _flag(out, "--lr-decay-style", o.schedule)
    if o.schedule == "cosine":
        _flag(out, "--min-lr", o.min_lr)
        if config.production.lr_decay_iters:
            _flag(out, "--lr-decay-iters", config.production.lr_decay_iters)
    if o.warmup_steps:
        _flag(out, "--lr-warmup-iters", o.warmup_steps)
    _flag(out, "--weight-decay", o.weight_decay)
    _flag(out, "--adam-beta1", o.betas[0])
    _flag(out, "--adam-beta2", o.betas[1])
    _flag(out, "--adam-eps", o.eps)
    _flag(out, "--clip-grad", o.clip_grad)
    return out


def _ckpt(stage_id: str, config: StageConfig, cluster: ClusterProfile, init_hf: str, phase: int) -> list[str]:
    """Checkpoint flags: every phase loads and saves its own folder, so a restart resumes that phase.

    A later phase's folder is seeded from the previous phase's last iteration before its first start
    (``handoff seed-phase``); slime then starts at the loaded rollout id + 1. Only SFT writes ``--save-hf``
    snapshots (its held-out selection scores them); an RL snapshot would be an unused FP8 copy.
    """
    rollout_hf = (
        cluster.fp8_copy(stage_id) if config.production.sglang.fp8 and config.kind == "rl" else init_hf
    )
    own = cluster.torch_dist(stage_id, phase)
    out = ["--hf-checkpoint", rollout_hf, "--ref-load", init_hf, "--load", own, "--save", own]
    _flag(out, "--save-interval", config.production.save_interval)
    if config.kind == "sft":
        out += ["--save-hf", cluster.hf_snapshots(stage_id)]
    return out


def _placement(config: StageConfig) -> list[str]:
    prod = config.production
    out: list[str] = []
    _flag(out, "--actor-num-nodes", prod.nodes)
    _flag(out, "--actor-num-gpus-per-node", prod.gpus_per_node)
    _flag(out, "--num-gpus-per-node", prod.gpus_per_node)
    if config.kind == "rl":
        if prod.colocate:
            out.append("--colocate")
        else:
            rollout_nodes = prod.extra_nodes.get("rollout", 0)
            _flag(out, "--rollout-num-gpus", rollout_nodes * prod.gpus_per_node)
            if prod.offload:
                out.append("--offload-train")
    return out


def _sft_data(stage_id: str, config: StageConfig, cluster: ClusterProfile) -> list[str]:
    sft = config.sft
    assert sft is not None
    data = cluster.stage_data(stage_id)
    out = ["--rollout-function-path", SFT_ROLLOUT, "--prompt-data", str(data / "train.tokens.jsonl")]
    # Rows hold an id and an offset into train.tokens.bin (infra.production.sft_data), no messages.
    out += [
        "--input-key",
        "id",
        "--metadata-key",
        "metadata",
        "--tool-key",
        "tools",
        "--rollout-shuffle",
    ]
    _flag(out, "--num-epoch", sft.epochs)
    _flag(out, "--rollout-batch-size", sft.global_batch)
    _flag(out, "--global-batch-size", sft.global_batch)
    _flag(out, "--micro-batch-size", sft.micro_batch)
    _flag(out, "--rollout-max-context-len", sft.max_seq_len)
    out += [
        "--loss-type",
        "sft_loss",
        "--calculate-per-token-loss",
        "--disable-compute-advantages-and-returns",
    ]
    out += ["--debug-train-only"]
    return out


def _phase_rollout(config: StageConfig, phase: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rollout and policy settings of one phase (phase 0 = the stage's own, later = overrides applied).

    Dumped from :meth:`infra.config.RLConfig.phase_settings`, the validated settings both backends use.
    """
    assert config.rl is not None
    rollout, policy = config.rl.phase_settings()[phase]
    return rollout.model_dump(), policy.model_dump()


def _rl_rollout(stage_id: str, config: StageConfig, cluster: ClusterProfile, phase: int) -> list[str]:
    assert config.rl is not None
    ro, _ = _phase_rollout(config, phase)
    prod = config.production
    data = cluster.stage_data(stage_id)
    out = ["--prompt-data", str(data / "train.jsonl"), "--input-key", "prompt", "--label-key", "label"]
    out += ["--metadata-key", "metadata", "--tool-key", "tools", "--apply-chat-template", "--rollout-shuffle"]
    out += ["--custom-rm-path", f"{HOOKS}.reward"]
    out += ["--custom-reward-post-process-path", f"{HOOKS}.post_process_rewards"]
    out += ["--custom-config-path", str(cluster.launch_dir(stage_id) / f"hooks_phase{phase}.yaml")]
    if stage_environment(config).multi_turn:
        out += ["--custom-generate-function-path", f"{HOOKS}.generate"]
    # No --start-rollout-id: slime starts at the loaded checkpoint's rollout id + 1 (a later phase loads
    # its folder seeded with the previous phase's last iteration), so a restart resumes where it stopped.
    start = sum(int(_phase_rollout(config, k)[0]["num_rollouts"]) for k in range(phase))
    _flag(out, "--num-rollout", start + int(ro["num_rollouts"]))
    _flag(out, "--rollout-batch-size", ro["prompts_per_step"])
    _flag(out, "--n-samples-per-prompt", ro["samples_per_prompt"])
    _flag(out, "--num-steps-per-rollout", ro["steps_per_rollout"])
    _flag(
        out,
        "--global-batch-size",
        ro["prompts_per_step"] * ro["samples_per_prompt"] // ro["steps_per_rollout"],
    )
    _flag(out, "--rollout-max-response-len", ro["max_response_tokens"])
    _flag(out, "--rollout-max-prompt-len", prod.max_prompt_tokens)
    # slime does not clamp max_new_tokens to the context, and SGLang refuses prompt + max_new_tokens >=
    # its context: the stage's budgets must leave room (checked by validate.context_problems).
    context = min(
        MODEL_CONTEXT, ro["max_context_tokens"] or prod.max_prompt_tokens + ro["max_response_tokens"] + 1
    )
    _flag(out, "--rollout-max-context-len", context)
    _flag(out, "--rollout-temperature", ro["temperature"])
    _flag(out, "--rollout-top-p", ro["top_p"])
    _flag(out, "--rollout-stop-token-ids", *GLM_STOP_TOKEN_IDS)
    ds = config.rl.dynamic_sampling
    if ds.filter != "none":
        _flag(out, "--over-sampling-batch-size", round(ro["prompts_per_step"] * ro["over_sampling_factor"]))
        path = (
            f"{HOOKS}.band_filter"
            if ds.filter == "band"
            else ("slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std")
        )
        out += ["--dynamic-sampling-filter-path", path]
    return out


def _rl_algorithm(config: StageConfig, prod_r3: bool, phase: int) -> list[str]:
    _, po = _phase_rollout(config, phase)
    out = ["--advantage-estimator", po["estimator"]]
    _flag(out, "--eps-clip", po["eps_clip"])
    if po["eps_clip_high"] is not None:
        _flag(out, "--eps-clip-high", po["eps_clip_high"])
    if po["use_tis"] and po["advantage"] != "fireflash":
        out.append("--use-tis")
        _flag(out, "--tis-clip", po["tis_clip_high"])
        _flag(out, "--tis-clip-low", po["tis_clip_low"])
    if po["kl_coef"] > 0:
        out += ["--use-kl-loss", "--kl-loss-type", "low_var_kl"]
        _flag(out, "--kl-loss-coef", po["kl_coef"])
    else:
        _flag(out, "--kl-loss-coef", 0)
    _flag(out, "--kl-coef", 0)
    _flag(out, "--entropy-coef", po["entropy_coef"])
    if po["advantage"] == "fireflash" or po["loss_reduction"] == "attempt":
        out += ["--loss-type", "custom_loss", "--custom-loss-function-path", f"{HOOKS}.fireflash_loss"]
    elif po["loss_reduction"] == "token" and po["estimator"] != "gspo":
        # GSPO's objective is a mean of per-sequence terms; slime's per-token flag would weight each
        # sequence by its length (slime's own GSPO GLM script leaves it off).
        out.append("--calculate-per-token-loss")
    if prod_r3:
        out.append("--use-rollout-routing-replay")
    return out


def hook_settings(
    stage_id: str, config: StageConfig, phase: int = 0, stage_files: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The ``--custom-config-path`` YAML content: stage settings the slime hooks read as ``args.rufus_*``.

    ``rufus_environment`` names the stage's environment (multi-turn ones add their own keys, e.g.
    ``agent_env``); ``rufus_stage_files`` are the stage folder's ``reward.py``/``env.py`` on the cluster,
    imported by the hooks first so stage-local rewards and environments are registered there too.
    """
    assert config.rl is not None
    _, po = _phase_rollout(config, phase)
    out: dict[str, Any] = {
        "rufus_stage": stage_id,
        "rufus_reward": config.reward,
        "rufus_advantage": po["advantage"],
        "rufus_estimator": po["estimator"],
        "rufus_mask_truncated": bool(po["mask_truncated"]),
        "rufus_shaping": config.rl.shaping.model_dump(),
    }
    if po["advantage"] == "fireflash" or po["loss_reduction"] == "attempt":
        # The custom loss reads these; a zero lower bound is the schema's "unset", so FireFlash's 0.5 applies.
        out["rufus_tis_clip_high"] = po["tis_clip_high"]
        if po["tis_clip_low"] > 0:
            out["rufus_tis_clip_low"] = po["tis_clip_low"]
    if po["min_attempt_tokens"] is not None:
        out["rufus_min_attempt_tokens"] = po["min_attempt_tokens"]
    if po.get("score_centering_top_k") is not None:  # omitted from the dump when unset
        out["rufus_score_centering_top_k"] = po["score_centering_top_k"]
    if config.rl.dynamic_sampling.band is not None:
        out["rufus_band"] = list(config.rl.dynamic_sampling.band)
    out["rufus_environment"] = config.rl.environment.model_dump()
    out.update(stage_environment(config).slime_settings())
    if stage_files:
        out["rufus_stage_files"] = list(stage_files)
    return out


def _eval(stage_id: str, config: StageConfig, cluster: ClusterProfile, phase: int) -> list[str]:
    data = cluster.stage_data(stage_id) / "heldout"
    metrics = [*config.eval.targets, *config.eval.guardrails]
    out: list[str] = []
    if config.kind == "sft":
        # SFT is train-only in slime (--debug-train-only): no in-run eval. The plan's select_checkpoint step
        # scores the --save-hf snapshots on held-out loss afterwards (infra.production.sft_select).
        return out
    interval = config.production.eval_interval or config.production.save_interval
    _flag(out, "--eval-interval", interval)
    out.append("--eval-prompt-data")
    for m in metrics:
        out += [m, str(data / f"{m}.jsonl")]
    ro, _ = _phase_rollout(config, phase)
    greedy = config.eval.temperature <= 0
    # Greedy samples of one prompt are all the same answer: avg@k equals avg@1, so draw one.
    _flag(out, "--n-samples-per-eval-prompt", 1 if greedy else config.eval.samples_per_prompt)
    _flag(out, "--eval-max-response-len", config.eval.max_response_tokens or ro["max_response_tokens"])
    if greedy:
        out += ["--eval-temperature", "0.0", "--eval-top-k", "1"]
    else:
        _flag(out, "--eval-temperature", config.eval.temperature)
    return out


def _sglang(config: StageConfig) -> list[str]:
    if config.kind != "rl":
        return []
    s = config.production.sglang
    out: list[str] = []
    _flag(out, "--rollout-num-gpus-per-engine", s.gpus_per_engine)
    _flag(out, "--sglang-mem-fraction-static", s.mem_fraction_static)
    if s.dp_attention:
        out += ["--sglang-enable-dp-attention", "--sglang-enable-dp-lm-head"]
        _flag(out, "--sglang-dp-size", s.dp_size)
    if s.ep_size > 1:
        _flag(out, "--sglang-ep-size", s.ep_size)
    return out


def _wandb(run_name: str, stage_id: str, cluster: ClusterProfile, phase: int) -> list[str]:
    group = f"{run_name}-{stage_id}" + (f"-phase{phase}" if phase else "")
    return [
        "--use-wandb",
        "--wandb-project",
        cluster.wandb_project,
        "--wandb-group",
        group,
        "--wandb-mode",
        cluster.wandb_mode,
        "--disable-wandb-random-suffix",
    ]


def _misc(config: StageConfig, seed: int) -> list[str]:
    out = ["--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--accumulate-allreduce-grads-in-fp32"]
    out += ["--attention-softmax-in-fp32", "--attention-backend", "flash"]
    # The recipe seed moves both of slime's seeds off their defaults (1234 for Megatron, 42 for data order).
    _flag(out, "--seed", seed + 1234)
    _flag(out, "--rollout-seed", seed + 42)
    for key, value in config.production.extra_args.items():
        flag = key if key.startswith("--") else "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            _flag(out, flag, *[v if isinstance(v, str) else v for v in value])
        elif value is not False and value is not None:
            _flag(out, flag, value if isinstance(value, str) else value)
    return out


def num_phases(config: StageConfig) -> int:
    """Training phases of a stage: 1, plus one per ``rl.phases`` entry (Coding RL's 128K continuation)."""
    return 1 + (len(config.rl.phases) if config.rl else 0)


def render_train_args(
    stage_id: str,
    config: StageConfig,
    cluster: ClusterProfile,
    init_hf: str,
    *,
    run_name: str = "rufus-air",
    seed: int = 0,
    phase: int = 0,
    stage_files: tuple[str, ...] = (),
) -> TrainArgs:
    """Return the grouped ``train.py`` arguments of one stage phase, reading from ``init_hf``."""
    entry = "train_async.py" if config.production.async_training else "train.py"
    if config.kind == "sft":
        rollout = _sft_data(stage_id, config, cluster)
        algo: list[str] = []
        files: dict[str, str] = {}
    else:
        rollout = _rl_rollout(stage_id, config, cluster, phase)
        if config.production.max_policy_staleness is not None:
            # train_async.py overlaps rollout k+1 with training k and syncs weights to SGLang every N
            # rollouts, so each rollout's policy is 1..N optimizer steps older than the trainer's (FF: 6).
            _flag(rollout, "--update-weights-interval", config.production.max_policy_staleness)
        algo = _rl_algorithm(config, config.production.rollout_routing_replay, phase)
        import yaml

        path = str(cluster.launch_dir(stage_id) / f"hooks_phase{phase}.yaml")
        settings = hook_settings(stage_id, config, phase, stage_files)
        files = {path: yaml.safe_dump(settings, sort_keys=True)}
    sections = {
        "MODEL_ARGS": _model(config),
        "PLACEMENT_ARGS": _placement(config),
        "CKPT_ARGS": _ckpt(stage_id, config, cluster, init_hf, phase),
        "ROLLOUT_ARGS": rollout,
        "EVAL_ARGS": _eval(stage_id, config, cluster, phase),
        "PERF_ARGS": _perf(config),
        "GRPO_ARGS": algo,
        "OPTIMIZER_ARGS": _optimizer(config),
        "WANDB_ARGS": _wandb(run_name, stage_id, cluster, phase),
        "SGLANG_ARGS": _sglang(config),
        "MISC_ARGS": _misc(config, seed),
    }
    return TrainArgs(entry=entry, sections={k: v for k, v in sections.items() if v}, files=files, phase=phase)
