"""The one reward contract of the recipe.

Every stage's reward is a plain function ``fn(request: RewardRequest) -> RewardResult`` registered by name
with :func:`register_reward`. The embedded trainer calls it directly, the production backend wraps it in
slime's ``async rm(args, sample)`` hook (``infra.production.slime_hooks``), and evaluation scores held-out
sets with the same function, so a number means the same thing everywhere.

Rules every reward follows:

* it never raises on model output: unparsable output is a structured failure with score 0;
* it fails closed: a verifier that cannot decide scores 0 and says why in ``failure``;
* an infrastructure problem (sandbox could not start, judge endpoint unreachable) is *not* a 0 score:
  the result is marked ``aborted=True`` so the sample is removed from its group before advantages.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RewardRequest(BaseModel):
    """What a reward sees: the prompt, the model's final response text and the task's ground truth."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt: list[dict[str, Any]] = Field(
        default_factory=list, description="Chat messages shown to the model."
    )
    response: str = Field(description="The model's response text (final assistant turn, thinking included).")
    label: Any = Field(
        default=None, description="Ground truth: answer, tests, rubric… depending on the task."
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Task metadata (family, source, …).")
    transcript: list[dict[str, Any]] | None = Field(
        default=None, description="Full agent transcript for multi-turn tasks (tool calls and results)."
    )


class RewardResult(BaseModel):
    """A structured reward: the scalar, what was parsed, its components and why it failed."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(description="The scalar reward used for training.")
    parsed: str | None = Field(default=None, description="The answer extracted from the response, if any.")
    components: dict[str, float] = Field(default_factory=dict, description="Named parts of the score.")
    failure: str | None = Field(
        default=None, description="Why the score is not full: e.g. 'no_answer', 'wrong', 'timeout'."
    )
    aborted: bool = Field(
        default=False, description="Infrastructure failure: drop the sample from its group, never score it 0."
    )
    details: dict[str, Any] = Field(default_factory=dict, description="Anything useful for debugging.")

    @property
    def passed(self) -> bool:
        """True when the score is positive and nothing failed."""
        return self.score > 0 and self.failure is None and not self.aborted


RewardFn = Callable[[RewardRequest], RewardResult]

_REGISTRY: dict[str, RewardFn] = {}
# Modules that register rewards on import; looked up lazily so `import rewards` stays cheap.
_PROVIDERS: dict[str, str] = {}


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: register ``fn`` under ``name`` in the one reward table."""

    def deco(fn: RewardFn) -> RewardFn:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"reward {name!r} is already registered by {_REGISTRY[name].__module__}")
        _REGISTRY[name] = fn
        return fn

    return deco


def declare_provider(name: str, module: str) -> None:
    """Say which module registers reward ``name``, so :func:`get_reward` can import it on demand."""
    _PROVIDERS[name] = module


def get_reward(name: str) -> RewardFn:
    """Return the reward registered as ``name``, importing its provider module if needed."""
    if name not in _REGISTRY and name in _PROVIDERS:
        importlib.import_module(_PROVIDERS[name])
    if name not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_PROVIDERS))
        raise KeyError(f"unknown reward {name!r}; registered rewards: {', '.join(known) or '(none)'}")
    return _REGISTRY[name]


def registered_rewards() -> list[str]:
    """Names of every reward known (registered or declared)."""
    return sorted(set(_REGISTRY) | set(_PROVIDERS))


def verifier_error(exc: BaseException) -> RewardResult:
    """A fail-closed result for a verifier that raised: score 0, ``verifier_error``, the exception named."""
    return RewardResult(
        score=0.0, failure="verifier_error", details={"error": f"{type(exc).__name__}: {exc}"[:500]}
    )


def safe_score(fn: RewardFn, request: RewardRequest) -> RewardResult:
    """Call ``fn``; a crash inside a verifier becomes a fail-closed result that names the exception.

    This is not a silent fallback: the failure kind is ``verifier_error`` and the exception text is kept,
    so the parse/verifier failure rate is logged and a broken verifier shows up in metrics. Every
    ``BaseException`` is caught (``SystemExit``, ``RecursionError``, a verifier's own control-flow
    exceptions), so no model output can end training; only ``KeyboardInterrupt`` passes, because it is
    the operator stopping the run.
    """
    try:
        result = fn(request)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - model output must never crash training
        return verifier_error(exc)
    if not isinstance(result, RewardResult):
        raise TypeError(
            f"reward {getattr(fn, '__name__', fn)!r} returned {type(result).__name__}, not RewardResult"
        )
    return result
