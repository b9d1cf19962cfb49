"""Typed stage configuration: the one place where every stage setting and its default is defined
(the ``rl:`` section's models in :mod:`infra.config_rl`, re-exported here).

A stage's ``launch.yaml`` is validated against :class:`StageConfig`; unknown keys are rejected and every
error names the file, the dotted key and what was expected. Layers are merged in a fixed order
(``infra.layering``): model defaults → stage ``launch.yaml`` → recipe overrides → ``--set key=value``.
The ``embedded`` section only resizes a stage (batch sizes, budgets, step counts, learning rate, data
counts); algorithms, rewards, filters and shaping are the production ones, which the type enforces.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from infra.config_base import SamplerDtype, StrictModel  # noqa: F401 - SamplerDtype re-exported
from infra.config_rl import (  # noqa: F401 - re-exported: the RL section's models live in infra.config_rl
    DynamicSamplingConfig,
    EnvironmentConfig,
    PhaseOverride,
    PolicyConfig,
    RLConfig,
    RolloutConfig,
    ShapingConfig,
)
from infra.later_fields import OmitLaterDefaults
from infra.production.config import ProductionConfig


class PaperResult(StrictModel):
    """A headline number the paper reports for the stage (before → after)."""

    metric: str = Field(description="Benchmark/metric name as the paper prints it.")
    before: float = Field(description="Score of the stage's input checkpoint.")
    after: float = Field(description="Score of the stage's output checkpoint.")
    guardrail: bool = Field(default=False, description="True when the paper tracks it as a guardrail.")


class PaperRef(StrictModel):
    """Where the stage comes from."""

    source: Literal["rufus-air", "ultramarine", "fireflash", "example"] = Field(
        description="Which paper; 'example' for a stage that illustrates the framework and is in no paper."
    )
    section: str = Field(description="Section of that paper, e.g. '3.2'.")
    results: list[PaperResult] = Field(default_factory=list, description="Reported before/after numbers.")


class OptimizerConfig(StrictModel):
    """AdamW with warmup and a constant or cosine schedule (Table 16)."""

    lr: float = Field(description="Peak learning rate.")
    min_lr: float = Field(default=0.0, description="Floor of the cosine schedule.")
    schedule: Literal["constant", "cosine"] = Field(default="constant", description="Decay after warmup.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warmup steps.")
    weight_decay: float = Field(default=0.1, ge=0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field(default=(0.9, 0.98), description="Adam (β1, β2).")
    eps: float = Field(default=1e-8, gt=0, description="Adam ε.")
    clip_grad: float = Field(default=1.0, gt=0, description="Global gradient-norm clip.")


class SFTConfig(OmitLaterDefaults, StrictModel):
    """Supervised fine-tuning settings."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = ("lean_forward", "update_dtype")

    global_batch: int = Field(description="Sequences per optimizer step.")
    micro_batch: int = Field(
        default=1, ge=1, description="Sequences per forward pass (gradient accumulation)."
    )
    epochs: int = Field(description="Passes over the mix.")
    max_seq_len: int = Field(description="Packed context length in tokens.")
    length_cap: int = Field(description="Samples longer than this (after the chat template) are dropped.")
    packing: bool = Field(default=True, description="Pack several samples per sequence.")
    eval_interval: int = Field(description="Held-out evaluation every N optimizer steps.")
    select_by: Literal["heldout_plateau", "last"] = Field(
        default="heldout_plateau", description="Checkpoint carried forward: best held-out score, or the last."
    )
    plateau_patience: int = Field(
        default=3, ge=1, description="Evaluations without improvement after which the score is on a plateau."
    )
    lean_forward: bool = Field(
        default=False,
        description="Embedded: project onto the vocabulary only at supervised positions, and use the plain "
        "causal mask where each row is one unpadded sample (the same loss up to float rounding; ~1.5-1.7× "
        "faster steps with a 49K-vocabulary base on agent rows). Off by default: earlier measured runs "
        "reproduce bit for bit.",
    )
    update_dtype: SamplerDtype = Field(
        default="float32",
        description="Embedded: dtype of the training and held-out forwards' matrix products; bfloat16 = "
        "autocast over float32 master weights, optimizer and loss (rl.rollout.update_dtype). float32 "
        "reproduces earlier runs bit for bit. Production: Megatron trains in bf16 (--bf16).",
    )


class BenchmarkRoles(StrictModel):
    """The paper benchmarks (``eval.registry`` names) a stage raises and guards, scored in production.

    Production evaluates the stage's input and output checkpoints on ``targets`` then ``guardrails``
    (``infra.production.plan.benchmark_eval_steps``); the embedded scale scores ``eval.targets`` /
    ``eval.guardrails``, which name embedded held-out metrics.
    """

    targets: list[str] = Field(default_factory=list, description="Benchmarks the stage must raise.")
    guardrails: list[str] = Field(default_factory=list, description="Benchmarks it must not break.")

    @field_validator("targets", "guardrails")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        from eval.registry import BENCHMARKS

        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            raise ValueError(f"unknown benchmark(s) {unknown}; known: {', '.join(sorted(BENCHMARKS))}")
        return names

    @model_validator(mode="after")
    def _one_role_each(self) -> BenchmarkRoles:
        both = sorted(set(self.targets) & set(self.guardrails))
        if both:
            raise ValueError(f"benchmark(s) {both} listed as both targets and guardrails")
        return self

    def names(self) -> list[str]:
        """Targets then guardrails, each once, in order."""
        return list(dict.fromkeys([*self.targets, *self.guardrails]))


class EvalConfig(OmitLaterDefaults, StrictModel):
    """What the driver evaluates on the stage's input and output checkpoints, and how RL picks its export."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = (
        "select_by",
        "validation_interval",
        "validation_per_metric",
        "validation_samples",
        "validation_targets",
        "validation_split",
        "sampler_dtype",
        "drop_finished_rows",
        "eager_decode",
    )

    targets: list[str] = Field(description="Metrics the stage must raise.")
    guardrails: list[str] = Field(default_factory=list, description="Metrics it must not break.")
    benchmarks: BenchmarkRoles = Field(
        default_factory=BenchmarkRoles, description="Paper benchmarks it targets and guards (production)."
    )
    samples_per_prompt: int = Field(default=1, ge=1, description="Samples per held-out prompt (avg@k).")
    max_response_tokens: int | None = Field(default=None, description="Defaults to the training budget.")
    temperature: float = Field(default=0.0, ge=0, description="0 = greedy.")
    sampler_dtype: SamplerDtype = Field(
        default="float32",
        description="Embedded: the dtype the evaluated checkpoints sample in (rl.rollout.sampler_dtype).",
    )
    drop_finished_rows: bool = Field(
        default=False, description="Embedded, multi-turn: as rl.rollout.drop_finished_rows, when scoring."
    )
    eager_decode: bool = Field(
        default=False, description="Embedded, multi-turn: as rl.rollout.eager_decode, when scoring."
    )
    select_by: Literal["last", "validation"] = Field(
        default="last",
        description="RL checkpoint carried forward: the last, or the best on a validation split of the "
        "targets scored every `validation_interval` rollouts (embedded trainer only).",
    )
    validation_interval: int = Field(default=5, ge=1, description="Rollouts between validation scores.")
    validation_per_metric: int = Field(
        default=96, ge=1, description="Validation prompts per target (held-out prompts left out)."
    )
    validation_samples: int = Field(default=4, ge=1, description="Samples per validation prompt (avg@k).")
    validation_targets: list[str] | None = Field(
        default=None,
        description="Targets whose mean validation score selects (default: all; name one when their "
        "scales differ, e.g. a rate and a raw reward-model score).",
    )
    validation_split: Literal["heldout", "train"] = Field(
        default="heldout",
        description="Tiny-task split the validation prompts are drawn from at another seed, held-out "
        "prompts left out: the held-out one, or `train` where the held-out prompts are a fixed set of "
        "cells that another seed would only repeat (07's chat prompts).",
    )

    @model_validator(mode="after")
    def _validation_targets_are_targets(self) -> EvalConfig:
        unknown = [m for m in self.validation_targets or [] if m not in self.targets]
        if unknown:
            raise ValueError(f"validation_targets {unknown} are not among targets {self.targets}")
        return self

    @property
    def selecting_targets(self) -> list[str]:
        """The targets scored on their validation sets for RL checkpoint selection."""
        return list(self.validation_targets or self.targets)


#: Policy settings that are sizes (token counts), the only ones an ``embedded`` section may change.
EMBEDDED_POLICY_SIZES = ("min_attempt_tokens",)


class EmbeddedOverrides(OmitLaterDefaults, StrictModel):
    """Size-only overrides for the embedded (CPU) profile; merged onto the stage before validation."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = ("policy",)

    optimizer: dict[str, Any] = Field(default_factory=dict, description="Partial OptimizerConfig.")
    sft: dict[str, Any] = Field(default_factory=dict, description="Partial SFTConfig.")
    rollout: dict[str, Any] = Field(default_factory=dict, description="Partial RolloutConfig.")
    environment: dict[str, Any] = Field(
        default_factory=dict,
        description="Partial rl.environment, e.g. options naming an offline task set (no hub at this scale).",
    )
    data: dict[str, Any] = Field(default_factory=dict, description="Partial data parameters (counts).")
    eval: dict[str, Any] = Field(default_factory=dict, description="Partial EvalConfig.")
    policy: dict[str, Any] | None = Field(
        default=None,
        description="Partial PolicyConfig, sizes only (e.g. FireFlash's per-attempt token floor, which "
        "scales with the response budget).",
    )
    phases: list[PhaseOverride] | None = Field(
        default=None, description="Resized RL phases (replaces `rl.phases`; keep the same policy values)."
    )

    @field_validator("policy")
    @classmethod
    def _policy_sizes_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """The embedded scale keeps the objective; it may only resize the policy's token-count settings."""
        for key in value or {}:
            if key not in EMBEDDED_POLICY_SIZES:
                raise ValueError(
                    f"unknown key {key!r}: an embedded section keeps the objective and may only resize "
                    f"{', '.join(EMBEDDED_POLICY_SIZES)}"
                )
        return value


class StageConfig(StrictModel):
    """One stage of the recipe, as written in ``stages/NN_name/launch.yaml``."""

    name: str = Field(description="Stage id, equal to the folder name, e.g. '01_reasoning_rl'.")
    title: str = Field(description="Human title.")
    kind: Literal["sft", "rl"] = Field(description="Training kind.")
    teaches: str = Field(default="", description="One line: what the stage teaches.")
    paper: PaperRef
    reward: str = Field(description="Name of the reward in the registry (rewards.contract).")
    data: dict[str, Any] = Field(
        default_factory=dict, description="Data-prep parameters, validated by the stage's data_prep.Params."
    )
    optimizer: OptimizerConfig
    sft: SFTConfig | None = None
    rl: RLConfig | None = None
    eval: EvalConfig
    production: ProductionConfig
    embedded: EmbeddedOverrides = Field(default_factory=EmbeddedOverrides)

    @model_validator(mode="after")
    def _kind_matches(self) -> StageConfig:
        if self.kind == "sft" and self.sft is None:
            raise ValueError("kind 'sft' needs an `sft` section")
        if self.kind == "rl" and self.rl is None:
            raise ValueError("kind 'rl' needs an `rl` section")
        if self.eval.select_by == "validation" and self.kind != "rl":
            raise ValueError("eval.select_by 'validation' picks an RL checkpoint; SFT uses sft.select_by")
        return self


Profile = Literal["production", "embedded"]
