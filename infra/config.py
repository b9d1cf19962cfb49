"""Typed stage configuration: the one place where every stage setting and its default is defined.

A stage's ``launch.yaml`` is validated against :class:`StageConfig`; unknown keys are rejected and every
error names the file, the dotted key and what was expected. Layers are merged in a fixed order
(``infra.layering``): model defaults → stage ``launch.yaml`` → recipe overrides → ``--set key=value``.
The ``embedded`` section only resizes a stage (batch sizes, budgets, step counts, learning rate, data
counts); algorithms, rewards, filters and shaping are the production ones, which the type enforces.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from infra.later_fields import OmitLaterDefaults
from infra.production.config import ProductionConfig

#: Weights an embedded rollout or evaluation samples in (the trainer always keeps float32).
SamplerDtype = Literal["float32", "bfloat16"]


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


class RolloutConfig(OmitLaterDefaults, StrictModel):
    """Sizes of one RL rollout step (slime: rollout batch, n samples, steps per rollout)."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = (
        "max_sampling_attempts",
        "train_micro_batch",
        "shared_prompt_forward",
        "sampler_dtype",
        "update_dtype",
    )

    prompts_per_step: int = Field(description="Prompts per rollout (slime --rollout-batch-size).")
    samples_per_prompt: int = Field(description="Samples per prompt (group size).")
    steps_per_rollout: int = Field(default=1, ge=1, description="Optimizer steps per rollout.")
    max_response_tokens: int = Field(description="Response budget per sample.")
    max_context_tokens: int | None = Field(default=None, description="Trajectory budget (agents).")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling.")
    num_rollouts: int = Field(description="Rollout steps to train for.")
    over_sampling_factor: float = Field(
        default=1.0, ge=1, description="Prompts drawn per needed prompt when a dynamic-sampling filter is on."
    )
    max_sampling_attempts: int = Field(
        default=8,
        ge=1,
        description="Embedded: draws per step before training on fewer groups (slime draws until full).",
    )
    train_micro_batch: int | None = Field(
        default=None,
        ge=1,
        description="Embedded: episodes per training forward (gradient accumulation; the log-probability "
        "passes use the same split); None runs each optimizer step in one forward. A 49K-vocabulary base "
        "needs a few (production batches by token budget: parallelism.max_tokens_per_gpu).",
    )
    shared_prompt_forward: bool = Field(
        default=False,
        description="Embedded: the training and log-probability passes encode each group's shared prompt "
        "once and run its samples' responses against its keys/values (equal up to float rounding; several "
        "times less work with long agent prompts). Off by default: earlier measured runs reproduce bit for "
        "bit. Production: SGLang's radix cache shares prompts at sampling; Megatron trains whole sequences.",
    )
    sampler_dtype: SamplerDtype = Field(
        default="float32",
        description="Embedded: weights rollouts sample in; bfloat16 = a copy of the float32 weights synced "
        "before each rollout (2-4x faster with AMX/AVX512-BF16). Production: SGLang serves bf16.",
    )
    update_dtype: SamplerDtype = Field(
        default="float32",
        description="Embedded: dtype of the update's matrix products (reference, old-log-prob and training "
        "forwards and the backward); bfloat16 = CPU/CUDA autocast over float32 master weights, optimizer "
        "and loss (1.4x a SmolLM2 group's update with AMX; benchmarks/bench_lean_forward.py). float32 "
        "reproduces earlier runs bit for bit. Production: Megatron trains in bf16 with float32 master "
        "weights (--bf16).",
    )

    @model_validator(mode="after")
    def _batch_divides(self) -> RolloutConfig:
        total = self.prompts_per_step * self.samples_per_prompt
        if total % self.steps_per_rollout:
            raise ValueError(
                f"prompts_per_step × samples_per_prompt = {total} must be divisible by steps_per_rollout "
                f"= {self.steps_per_rollout} (slime: rollout_batch × n_samples = global_batch × steps)"
            )
        return self


class PolicyConfig(OmitLaterDefaults, StrictModel):
    """The RL objective (``infra.objectives`` implements each choice for both backends)."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = ("score_centering_top_k",)

    estimator: Literal["grpo", "gspo", "cispo"] = Field(description="Policy-loss form.")
    advantage: Literal["grpo", "mean_only", "fireflash"] = Field(
        default="grpo", description="grpo: (r-mean)/std; mean_only: r-mean (Dr. GRPO); fireflash: FF §3."
    )
    eps_clip: float = Field(default=0.2, gt=0, description="Lower clip ε.")
    eps_clip_high: float | None = Field(default=None, description="Upper clip ε (defaults to eps_clip).")
    use_tis: bool = Field(default=False, description="Truncated importance sampling trainer/rollout.")
    tis_clip_low: float = Field(default=0.0, ge=0, description="Lower TIS bound.")
    tis_clip_high: float = Field(default=2.0, gt=0, description="Upper TIS bound.")
    kl_coef: float = Field(default=0.0, ge=0, description="KL to the stage's initial policy (k3 form).")
    entropy_coef: float = Field(default=0.0, ge=0, description="Entropy bonus coefficient.")
    mask_truncated: bool = Field(default=False, description="Zero the loss of truncated samples.")
    loss_reduction: Literal["token", "sequence", "attempt"] = Field(
        default="token", description="token: mean over all tokens; sequence: per-sample mean; attempt: FF."
    )
    min_attempt_tokens: int | None = Field(
        default=None, description="FireFlash per-attempt denominator floor, max(tokens, this)."
    )
    score_centering_top_k: int | None = Field(
        default=None,
        ge=1,
        description="FireFlash score centering: subtract the sampler's expected score over its top-k "
        "candidates (FF: 32) from each token's score (infra.objectives.centering); None = off.",
    )


class DynamicSamplingConfig(StrictModel):
    """Online group filter applied while rolling out (DAPO-style)."""

    filter: Literal["none", "nonzero_std", "band"] = Field(default="none", description="Which filter.")
    band: tuple[float, float] | None = Field(default=None, description="Keep groups with mean in (lo, hi].")

    @model_validator(mode="after")
    def _band_given(self) -> DynamicSamplingConfig:
        if self.filter == "band" and self.band is None:
            raise ValueError("filter 'band' needs band: [lo, hi]")
        return self


class ShapingConfig(StrictModel):
    """Group-aware reward shaping applied after rewards and before advantages."""

    kind: Literal["none", "shortest_correct_length", "positive_length", "ultramarine"] = Field(
        default="none", description="Which shaping rule (see infra.objectives)."
    )
    coef: float = Field(default=0.0, ge=0, description="Penalty at the cap (length penalties).")
    params: dict[str, float] = Field(default_factory=dict, description="Rule-specific constants.")


class EnvironmentConfig(StrictModel):
    """The environment an RL stage trains in (``infra.environments``): its registered name and options.

    ``single_turn`` (the default) samples one response per prompt row and scores it with the row's
    registered reward; multi-turn environments (``agent``, or one a stage folder's ``env.py`` registers)
    own their tools and episode loop. ``options`` are validated by the environment's own ``Options`` model.
    """

    name: str = Field(default="single_turn", description="Registered environment name.")
    options: dict[str, Any] = Field(default_factory=dict, description="Environment options (its Options).")


class PhaseOverride(StrictModel):
    """One later RL phase: partial ``rollout``/``policy`` overrides of the phase before it.

    The partial dicts are checked when the stage loads, by :meth:`RLConfig.phase_settings` merging them
    onto the previous phase's settings (errors name ``rl.phases.<i>.rollout.<key>``).
    """

    rollout: dict[str, Any] = Field(default_factory=dict, description="Partial RolloutConfig.")
    policy: dict[str, Any] = Field(default_factory=dict, description="Partial PolicyConfig.")


def _relocated(exc: ValidationError, prefix: tuple[str | int, ...]) -> list[Any]:
    """The errors of ``exc`` with their locations prefixed (so they name the phase key that set them)."""
    errors: list[Any] = []
    for err in exc.errors(include_url=False):
        detail: dict[str, Any] = {"type": err["type"], "loc": (*prefix, *err["loc"]), "input": err["input"]}
        if "ctx" in err:
            detail["ctx"] = err["ctx"]
        errors.append(detail)
    return errors


class RLConfig(StrictModel):
    """Reinforcement-learning settings."""

    environment: EnvironmentConfig = Field(
        default_factory=EnvironmentConfig, description="Where episodes run (infra.environments)."
    )
    rollout: RolloutConfig
    policy: PolicyConfig
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    shaping: ShapingConfig = Field(default_factory=ShapingConfig)
    phases: list[PhaseOverride] = Field(
        default_factory=list,
        description="Later phases, each a partial `rollout`/`policy` override (Coding RL 64K→128K).",
    )

    def phase_settings(self) -> list[tuple[RolloutConfig, PolicyConfig]]:
        """The effective (rollout, policy) of each phase: 0 = the stage's own, i = i-1 + ``phases[i-1]``.

        Each phase overrides the previous one's fields; a bad override raises ``ValidationError`` located
        at ``phases.<i>.rollout.<key>`` / ``phases.<i>.policy.<key>``.
        """
        rollout, policy = self.rollout, self.policy
        out = [(rollout, policy)]
        for i, ph in enumerate(self.phases):
            errors: list[Any] = []
            try:
                rollout = RolloutConfig.model_validate({**rollout.model_dump(), **ph.rollout})
            except ValidationError as exc:
                errors += _relocated(exc, ("phases", i, "rollout"))
            try:
                policy = PolicyConfig.model_validate({**policy.model_dump(), **ph.policy})
            except ValidationError as exc:
                errors += _relocated(exc, ("phases", i, "policy"))
            if errors:
                raise ValidationError.from_exception_data(type(self).__name__, errors)
            out.append((rollout, policy))
        return out

    @model_validator(mode="after")
    def _phases_valid(self) -> RLConfig:
        self.phase_settings()
        return self


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
