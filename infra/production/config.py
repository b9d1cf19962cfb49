"""Typed production (8×H200, slime) settings of one stage: nodes, placement, parallelism, SGLang engines.

The numbers come from the paper's Table 16 and §3; ``infra.production.render`` turns them into the exact
``train.py`` command line for the pinned slime.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.later_fields import OmitLaterDefaults


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Parallelism(_Strict):
    """Megatron model parallelism for the trainer."""

    tp: int = Field(default=1, description="Tensor parallel size.")
    pp: int = Field(default=1, description="Pipeline parallel size.")
    cp: int = Field(default=1, description="Context parallel size.")
    ep: int = Field(default=1, description="Expert parallel size.")
    etp: int = Field(default=1, description="Expert tensor parallel size.")
    sequence_parallel: bool = Field(default=True, description="Megatron sequence parallelism (needs tp > 1).")
    recompute: Literal["none", "full", "selective"] = Field(
        default="full", description="Activation recompute."
    )
    max_tokens_per_gpu: int = Field(default=16384, description="Dynamic batch size token budget per GPU.")


class SGLangEngines(_Strict):
    """Rollout engines."""

    gpus_per_engine: int = Field(default=8, description="GPUs per SGLang engine (its TP size).")
    dp_attention: bool = Field(default=False, description="Enable SGLang DP attention.")
    dp_size: int = Field(default=1, description="SGLang DP size (needs dp_attention when > 1).")
    ep_size: int = Field(default=1, description="SGLang expert parallel size.")
    mem_fraction_static: float = Field(default=0.7, description="SGLang static memory fraction.")
    fp8: bool = Field(default=False, description="Serve an FP8 copy of the policy for rollouts.")
    fp8_strategy: Literal["tensor", "block"] = Field(
        default="tensor",
        description=(
            "slime convert_hf_to_fp8 strategy: per-tensor scales, or 128×128 blocks (needs every per-GPU "
            "linear width to be a multiple of 128, which GLM-4.5-Air's 1408-wide experts at TP 8 are not)."
        ),
    )


class ProductionConfig(OmitLaterDefaults, _Strict):
    """How a stage runs on a cluster of 8×H200 nodes with slime."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = ("max_policy_staleness",)

    nodes: int = Field(description="Number of 8×H200 nodes for the stage (Table 16).")
    gpus_per_node: int = Field(default=8, description="GPUs per node.")
    extra_nodes: dict[str, int] = Field(
        default_factory=dict, description="Auxiliary nodes by role, e.g. {'reward_model': 1} for RLHF."
    )
    colocate: bool = Field(default=True, description="Trainer and rollout engines share the GPUs.")
    async_training: bool = Field(default=False, description="Use train_async.py (one-step off-policy).")
    max_policy_staleness: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Async only: rollouts come from weights at most this many optimizer steps old (slime "
            "--update-weights-interval N with train_async.py gives staleness 1..N; FireFlash: 6)."
        ),
    )
    parallelism: Parallelism = Field(default_factory=Parallelism)
    sglang: SGLangEngines = Field(default_factory=SGLangEngines)
    rollout_routing_replay: bool = Field(default=False, description="R3: replay routed experts from rollout.")
    offload: bool = Field(default=False, description="Offload engines/trainer between phases.")
    forward_env: list[str] = Field(
        default_factory=list,
        description="Head-node environment variables passed into the Ray runtime env (e.g. judge endpoints).",
    )
    save_interval: int = Field(default=10, description="Checkpoint every N rollouts (or SFT steps).")
    node_hours: float | None = Field(default=None, description="Node-hours the paper reports, if stated.")
    extra_args: dict[str, Any] = Field(
        default_factory=dict, description="Further slime flags (validated against the pinned flag table)."
    )
    max_prompt_tokens: int = Field(
        default=8192,
        description="Prompts longer than this are dropped at load (slime --rollout-max-prompt-len).",
    )
    eval_interval: int | None = Field(
        default=None, description="RL: held-out eval every N rollouts (defaults to save_interval)."
    )
    lr_decay_iters: int | None = Field(
        default=None, description="Optimizer steps a cosine schedule decays over (SFT: steps/epoch × epochs)."
    )

    @model_validator(mode="after")
    def _staleness_needs_async(self) -> ProductionConfig:
        if self.max_policy_staleness is not None and not self.async_training:
            raise ValueError("max_policy_staleness needs async_training: true (train_async.py)")
        if self.max_policy_staleness is not None and self.colocate:
            raise ValueError("max_policy_staleness needs colocate: false (train_async.py refuses --colocate)")
        return self
