"""The RL section of a stage config (``rl:``): rollout sizes, policy loss, dynamic sampling, shaping,
the environment and phases. Split from :mod:`infra.config`, which re-exports every name here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from infra.config_base import SamplerDtype, StrictModel
from infra.later_fields import OmitLaterDefaults


class RolloutConfig(OmitLaterDefaults, StrictModel):
    """Sizes of one RL rollout step (slime: rollout batch, n samples, steps per rollout)."""

    _ADDED_LATER: ClassVar[tuple[str, ...]] = (
        "max_sampling_attempts",
        "train_micro_batch",
        "train_max_tokens",
        "shared_prompt_forward",
        "sampler_dtype",
        "update_dtype",
        "drop_finished_rows",
        "eager_decode",
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
    train_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Embedded: padded tokens per training forward (infra/embedded/micro_batching.py); "
        "episodes fill micro-batches in order up to it (and up to train_micro_batch episodes), one longer "
        "episode trains alone. Bounds the update's memory when episode lengths vary (agent stages). "
        "Production: --use-dynamic-batch-size --max-tokens-per-gpu.",
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
    drop_finished_rows: bool = Field(
        default=False,
        description="Embedded, multi-turn: a lockstep sampling batch drops a row once it stops instead of "
        "padding it until the longest row ends (2.2x a skewed 16-row SmolLM2 round). Smaller batches run "
        "other kernels, so log-probs move at float rounding: off by default, earlier measured runs "
        "reproduce bit for bit. Production: SGLang frees finished requests (continuous batching).",
    )
    eager_decode: bool = Field(
        default=False,
        description="Embedded, multi-turn: agent sampling's one-token decoding forwards use eager attention "
        "(infra/embedded/decode_attention.py: a grouped-query model's cached keys are read in place, not "
        "copied per head) instead of SDPA, whose CPU flash kernel is slow at one query token (1.9x a 16-row "
        "SmolLM2 decode step at 1.2K tokens of context; 3.8x a skewed round with drop_finished_rows; "
        "benchmarks/bench_agent_decode.py). Other rounding: off by default, earlier measured "
        "runs reproduce bit for bit. Production: SGLang's own decode kernels.",
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
