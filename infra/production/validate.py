"""Checks of a rendered plan, run by ``rufus plan --check`` and the tests.

1. Every flag of every ``train.py`` command is in the pinned flag table and its values fit the flag's
   kind and choices (slime drops unknown flags silently, so this is the only typo guard).
2. slime's cross-flag rules (``slime_validate_args``, SGLang/Megatron ``validate_args``) hold.
3. The parallel layout fits the node count and GLM-4.5-Air (heads, query groups, experts, layers).
4. Every Table 16 number of the stage (RA) appears in its command under the flag that carries it.
5. Rules the flag table cannot see, found by reading slime and SGLang: the context budget (prompt +
   response < context, for rollouts and evals; slime does not clamp and SGLang refuses), FP8 block shapes
   against the SGLang engine's TP/EP, and GSPO without per-token loss reduction.
"""

from __future__ import annotations

from typing import Any

from infra.production.flags import check_argv, parse_namespace
from infra.production.model_args import (
    MODEL_CONTEXT,
    MOE_FFN_HIDDEN,
    NUM_ATTENTION_HEADS,
    NUM_EXPERTS,
    NUM_QUERY_GROUPS,
    SHARED_EXPERT_HIDDEN,
)

#: RA Table 16 by paper section: lr, batch (prompts, or sequences for SFT), samples/prompt, optimizer
#: steps/rollout, response budgets (tokens; 128K context for SFT), nodes.
TABLE16: dict[str, dict[str, Any]] = {
    "3.1": {"lr": [5e-5], "min_lr": 5e-6, "warmup": 100, "batch": [4096], "budget": [131072], "nodes": 64},
    "3.2": {"lr": [1e-6], "batch": [256], "n": 16, "steps": 2, "budget": [30000], "nodes": 8},
    "3.3": {"lr": [1e-6], "batch": [128, 64], "n": 64, "steps": 8, "budget": [65536, 131072], "nodes": 32},
    "3.4": {"lr": [1.5e-6], "batch": [256], "n": 16, "steps": 1, "budget": [16384], "nodes": 8},
    "3.5": {"lr": [1e-6], "batch": [48], "n": 64, "steps": 1, "budget": [32768], "nodes": 16},
    "3.6": {"lr": [1e-6], "batch": [32], "n": 32, "steps": 1, "budget": [61440], "nodes": 16},
    "3.7": {"lr": [3e-6], "batch": [32], "n": 16, "steps": 2, "budget": [32768], "nodes": 16},
    "3.8": {"lr": [1e-6], "batch": [768], "n": 5, "steps": 2, "budget": [30000], "nodes": 8},
}


def cross_flag_problems(argv: list[str], entry: str = "train.py") -> list[str]:
    """slime's cross-flag rules (slime-cli-flags.README.md) applied to one argv."""
    a = parse_namespace(argv)
    p: list[str] = []
    rbs, n = a.get("rollout_batch_size"), a.get("n_samples_per_prompt", 1)
    if rbs is None:
        p.append("--rollout-batch-size is required")
    if a.get("rollout_temperature", 1.0) <= 0:
        p.append("--rollout-temperature must be > 0")
    steps, gbs = a.get("num_steps_per_rollout"), a.get("global_batch_size")
    if steps is not None and rbs is not None:
        want = rbs * n // steps
        if rbs * n % steps:
            p.append(f"rollout_batch × n = {rbs * n} is not divisible by --num-steps-per-rollout {steps}")
        if gbs is not None and gbs != want:
            p.append(f"--global-batch-size {gbs} != rollout_batch × n / steps = {want}")
    if (
        a.get("over_sampling_batch_size") is not None
        and rbs is not None
        and a["over_sampling_batch_size"] < rbs
    ):
        p.append("--over-sampling-batch-size must be >= --rollout-batch-size")
    if a.get("num_rollout") is None and a.get("num_epoch") is None:
        p.append("one of --num-rollout / --num-epoch is required")
    if a.get("eval_interval") is not None and not a.get("eval_prompt_data") and not a.get("eval_config"):
        p.append("--eval-interval needs --eval-prompt-data or --eval-config")
    if a.get("eval_prompt_data") and len(a["eval_prompt_data"]) % 2:
        p.append("--eval-prompt-data needs name/path pairs")
    if a.get("save_interval") is not None and not a.get("save"):
        p.append("--save-interval needs --save")
    if a.get("kl_coef", 0.0) and a.get("kl_loss_coef", 0.0):
        p.append("--kl-coef and --kl-loss-coef cannot both be non-zero")
    if (a.get("kl_coef", 0.0) or a.get("use_kl_loss")) and not a.get("ref_load"):
        p.append("KL needs --ref-load")
    if a.get("use_rollout_logprobs") and a.get("use_tis"):
        p.append("--use-rollout-logprobs cannot be combined with --use-tis")
    if a.get("use_dynamic_batch_size") and not a.get("max_tokens_per_gpu"):
        p.append("--use-dynamic-batch-size needs --max-tokens-per-gpu")
    if a.get("debug_rollout_only") and a.get("debug_train_only"):
        p.append("--debug-rollout-only and --debug-train-only cannot both be set")
    ctx, plen = a.get("rollout_max_context_len"), a.get("rollout_max_prompt_len")
    if ctx is not None and plen is not None and plen > ctx - 1:
        p.append(f"--rollout-max-prompt-len {plen} must be <= --rollout-max-context-len - 1 = {ctx - 1}")
    if a.get("sglang_dp_size", 1) > 1 and not a.get("sglang_enable_dp_attention"):
        p.append("--sglang-dp-size > 1 needs --sglang-enable-dp-attention")
    if a.get("pipeline_model_parallel_size", 1) == 1 and (
        a.get("decoder_first_pipeline_num_layers") or a.get("decoder_last_pipeline_num_layers")
    ):
        p.append("--decoder-first/last-pipeline-num-layers need a pipeline size > 1")
    if entry == "train_async.py" and a.get("colocate"):
        p.append("train_async.py refuses --colocate")
    if a.get("enable_mtp_training") and not a.get("mtp_num_layers"):
        p.append("--enable-mtp-training needs --mtp-num-layers")
    if str(a.get("advantage_estimator", "")).startswith("reinforce_plus_plus") and not a.get(
        "normalize_advantages"
    ):
        p.append("reinforce_plus_plus estimators need --normalize-advantages")
    return p


def layout_problems(argv: list[str], longest_sequence: int) -> list[str]:
    """Parallel layout vs. node count and GLM-4.5-Air shapes; token budget vs. the longest sequence."""
    a = parse_namespace(argv)
    tp, pp = a.get("tensor_model_parallel_size", 1), a.get("pipeline_model_parallel_size", 1)
    cp, ep = a.get("context_parallel_size", 1), a.get("expert_model_parallel_size", 1)
    etp = a.get("expert_tensor_parallel_size") or tp
    world = a.get("actor_num_nodes", 1) * a.get("actor_num_gpus_per_node", 8)
    p: list[str] = []
    if world % (tp * pp * cp):
        p.append(f"world {world} not divisible by tp×pp×cp = {tp * pp * cp}")
    if (world // pp) % (ep * etp):
        p.append(f"world/pp = {world // pp} not divisible by ep×etp = {ep * etp}")
    if NUM_ATTENTION_HEADS % tp or NUM_QUERY_GROUPS % tp:
        p.append(f"tp {tp} must divide {NUM_ATTENTION_HEADS} heads and {NUM_QUERY_GROUPS} query groups")
    if NUM_EXPERTS % ep:
        p.append(f"ep {ep} must divide {NUM_EXPERTS} experts")
    if a.get("sequence_parallel") and tp == 1:
        p.append("--sequence-parallel needs tp > 1")
    budget = a.get("max_tokens_per_gpu")
    if budget and budget * cp < longest_sequence:
        p.append(f"max_tokens_per_gpu × cp = {budget * cp} < longest sequence {longest_sequence}")
    engine = a.get("rollout_num_gpus_per_engine")
    if engine and a.get("colocate") and world % engine:
        p.append(f"{world} GPUs do not split into SGLang engines of {engine}")
    if a.get("loss_type") == "custom_loss" and cp != 1:
        p.append("the FireFlash custom loss needs context parallel size 1")
    return p


def _values(argv: list[str], flag: str) -> list[float]:
    return [float(argv[i + 1]) for i, t in enumerate(argv[:-1]) if t == flag]


def table16_problems(section: str, kind: str, trains: list[list[str]]) -> list[str]:
    """Each Table 16 number of the stage must appear in its commands under the carrying flag."""
    want = TABLE16.get(section)
    if want is None:
        return []
    batch_flag = "--global-batch-size" if kind == "sft" else "--rollout-batch-size"
    # An RL budget is a response budget, or a context one where it reaches the model's 128K (02's phase 2).
    budget_flags = (
        ("--rollout-max-context-len",)
        if kind == "sft"
        else ("--rollout-max-response-len", "--rollout-max-context-len")
    )
    checks = [
        ("--lr", want["lr"]),
        (batch_flag, want["batch"]),
        (budget_flags[0], want["budget"]),
        ("--actor-num-nodes", [want["nodes"]]),
    ]
    for key, flag in (
        ("n", "--n-samples-per-prompt"),
        ("steps", "--num-steps-per-rollout"),
        ("min_lr", "--min-lr"),
        ("warmup", "--lr-warmup-iters"),
    ):
        if key in want:
            checks.append((flag, [want[key]]))
    found = {flag: {v for argv in trains for v in _values(argv, flag)} for flag, _ in checks}
    found[budget_flags[0]] = {v for argv in trains for f in budget_flags for v in _values(argv, f)}
    return [
        f"Table 16 ({section}): {flag} {v:g} missing (command has {sorted(found[flag])})"
        for flag, vals in checks
        for v in vals
        if not any(abs(x - v) <= 1e-12 * max(1, abs(v)) for x in found[flag])
    ]


def context_problems(argv: list[str]) -> list[str]:
    """Prompt + response budgets must stay below the context, for rollouts and held-out evals.

    slime passes ``--rollout-max-response-len`` as ``max_new_tokens`` unclamped, and SGLang refuses a
    request whose prompt + ``max_new_tokens`` reaches its context (the model's 131,072 tokens).
    """
    a = parse_namespace(argv)
    prompt = a.get("rollout_max_prompt_len")
    if prompt is None or a.get("debug_train_only"):
        return []
    context = min(a.get("rollout_max_context_len") or MODEL_CONTEXT, MODEL_CONTEXT)
    out = []
    for flag, dest in (
        ("--rollout-max-response-len", "rollout_max_response_len"),
        ("--eval-max-response-len", "eval_max_response_len"),
    ):
        resp = a.get(dest)
        if resp is not None and prompt + resp > context - 1:
            out.append(
                f"--rollout-max-prompt-len {prompt} + {flag} {resp} = {prompt + resp} must be < context "
                f"{context} (SGLang refuses prompt + max_new_tokens >= context; budget the response as "
                f"context − prompt − 1 = {context - prompt - 1})"
            )
    return out


def fp8_problems(convert_argv: list[str], train_argv: list[str]) -> list[str]:
    """Block FP8 needs every per-GPU MoE / shared-expert width to be a multiple of the block edge.

    SGLang's block-FP8 weight creation refuses a partitioned width that is not. An engine of TP t and
    expert parallel e splits routed experts t/e ways and shared experts t ways.
    """
    if "--block-size" not in convert_argv:
        return []
    block = int(convert_argv[convert_argv.index("--block-size") + 1])
    a = parse_namespace(train_argv)
    tp = int(a.get("rollout_num_gpus_per_engine") or 1)
    ep = int(a.get("sglang_ep_size") or 1)
    out = []
    for what, width, split in (
        ("routed-expert", MOE_FFN_HIDDEN, max(tp // ep, 1)),
        ("shared-expert", SHARED_EXPERT_HIDDEN, tp),
    ):
        if width % split or (width // split) % block:
            out.append(
                f"block FP8 ({block}×{block}): {what} width {width}/{split} = {width / split:g} per GPU is "
                f"not a multiple of {block} at engine TP {tp}, EP {ep}; use production.sglang.fp8_strategy "
                "tensor"
            )
    return out


def loss_reduction_problems(argv: list[str]) -> list[str]:
    """GSPO is a mean of per-sequence terms: slime's per-token loss flag would length-weight them."""
    a = parse_namespace(argv)
    if a.get("advantage_estimator") == "gspo" and a.get("calculate_per_token_loss"):
        return ["--advantage-estimator gspo with --calculate-per-token-loss weights sequences by length"]
    return []


def validate_plan(plans: list[Any]) -> list[str]:
    """All problems of a plan, each prefixed with its stage (and phase)."""
    out: list[str] = []
    for plan in plans:
        for t in plan.trains:
            tag = f"{plan.stage} phase {t.phase}"
            a = parse_namespace(t.argv)
            longest = a.get("rollout_max_context_len") or (
                a.get("rollout_max_prompt_len", 0) + a.get("rollout_max_response_len", 0)
            )
            probs = (
                check_argv(t.argv) + cross_flag_problems(t.argv, t.entry) + layout_problems(t.argv, longest)
            )
            probs += context_problems(t.argv) + loss_reduction_problems(t.argv)
            for step in getattr(plan, "steps", []):
                if step.name.startswith("fp8_convert"):
                    probs += fp8_problems(step.argv, t.argv)
            out += [f"{tag}: {m}" for m in probs]
        source, section = plan.paper
        if source == "rufus-air":
            out += [
                f"{plan.stage}: {m}"
                for m in table16_problems(section, plan.kind, [t.argv for t in plan.trains])
            ]
    return out
