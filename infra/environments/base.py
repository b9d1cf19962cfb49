"""The environment contract every RL stage trains in: rows in, scored token-in/token-out episodes out.

An :class:`Environment` owns four things: its task rows (``PromptRow`` records a stage's data prep
writes), its tools (none for single-turn), how one episode is rolled out against the policy, and how
an episode is scored (a :class:`~rewards.contract.RewardResult`, ``aborted`` for infrastructure
failures). Both backends consume the same shape: the embedded trainer calls :meth:`Environment.rollout`
on the model it trains, the production backend renders :meth:`Environment.slime_settings` into slime's
hook YAML and routes slime's custom generate hook to a multi-turn environment's ``slime_generate``.

Written here rather than taken from ``verifiers`` (``load_environment``) or open-instruct's
``RLEnvironment``: neither installs beside slime's pinned stack, and both return text rollouts, while the
trainers here need sampled token ids, rollout logprobs and a per-token loss mask. The shape follows
them: an environment is looked up by name, built from typed options, and a stage folder's ``env.py``
can register its own with :func:`register_environment`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from data_prep.schema import PromptRow
from rewards.contract import RewardRequest, RewardResult, get_reward, safe_score

SINGLE_TURN = "single_turn"


@dataclass
class Episode:
    """One scored episode: response tokens, rollout logprobs, finish reason, reward and loss mask.

    ``token_ids`` are everything after the initial prompt (model turns, and for multi-turn episodes the
    tool results and user turns between them); ``loss_mask`` is 1 on tokens the model sampled and 0 on
    the rest (``None``: every token was sampled, the single-turn case).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    reward: RewardResult
    text: str = ""
    loss_mask: list[int] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] | None = None  # this episode's own initial prompt (None: the group's)

    @property
    def trained_tokens(self) -> int:
        """Number of response tokens the model sampled (the ones its loss covers)."""
        return len(self.token_ids) if self.loss_mask is None else sum(self.loss_mask)

    @property
    def truncated(self) -> bool:
        """True when a length or turn budget ended the episode."""
        return self.finish_reason == "length"


@dataclass
class Group:
    """The episodes of one row (aborted ones removed by ``infra.embedded.sampling.collect_groups``)."""

    row: Any
    prompt_ids: list[int]
    samples: list[Episode]
    aborted: int = 0

    @property
    def scores(self) -> list[float]:
        """Raw reward scores of the episodes."""
        return [s.reward.score for s in self.samples]


@dataclass
class Policy:
    """The model an embedded rollout samples from (the one being trained, or a checkpoint evaluated).

    ``backend`` replaces sampling the model behind a multi-turn environment's ``/generate`` endpoint
    (``infra.agents.local_server.Backend``); ``None`` samples ``model`` itself.
    """

    model: Any
    tokenizer: Any
    backend: Any = None


@dataclass(frozen=True)
class Sampling:
    """How to sample one rollout: budget per model call, temperature, nucleus, seed and batching."""

    max_new_tokens: int
    temperature: float
    seed: int
    top_p: float = 1.0
    batch_size: int | None = None
    max_context_tokens: int | None = None
    drop_finished: bool = False  # multi-turn: a lockstep batch drops a row once it stops (generate_rows)
    eager_decode: bool = False  # multi-turn: decoding forwards use eager attention (generate_rows)


class NoOptions(BaseModel):
    """Options of an environment that takes none."""

    model_config = ConfigDict(extra="forbid")


class Environment(ABC):
    """Base of every environment; subclasses set ``name``, ``Options`` and implement :meth:`rollout`."""

    name: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    #: True when slime must call the environment's ``async slime_generate(args, sample, sampling_params,
    #: evaluation)`` instead of its own single-turn generate; such an environment defines that method.
    multi_turn: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.multi_turn and not callable(getattr(cls, "slime_generate", None)):
            raise TypeError(f"{cls.__qualname__}: a multi-turn environment defines slime_generate")

    def __init__(self, options: BaseModel | None = None, *, reward: str | None = None) -> None:
        self.options = options if options is not None else self.Options()
        self.reward = reward

    def serves(self, metadata: Mapping[str, Any]) -> bool:
        """True when a row with this ``metadata`` was written for this environment (its ``environment``
        key; a row without one is single-turn).

        An evaluation plays a row another environment wrote (a guardrail of an earlier stage) in that one.
        """
        return row_environment_spec(metadata)[0] == self.name

    # ---- scoring ---------------------------------------------------------------------------------
    def reward_name(self, row: PromptRow) -> str:
        """The reward of ``row``: its ``metadata.reward``, else the stage's reward."""
        name = row.metadata.get("reward") or self.reward
        if not name:
            raise ValueError(f"row {row.id!r}: no metadata.reward and the stage names no reward")
        return str(name)

    def score(self, row: PromptRow, response: str, transcript: list[dict] | None = None) -> RewardResult:
        """Score one final response with the registered reward; verifier crashes fail closed."""
        request = RewardRequest(
            prompt=row.prompt,
            response=response,
            label=row.label,
            metadata=row.metadata,
            transcript=transcript,
        )
        return safe_score(get_reward(self.reward_name(row)), request)

    # ---- embedded rollout --------------------------------------------------------------------------
    @abstractmethod
    def rollout(self, policy: Policy, rows: list[PromptRow], n: int, sampling: Sampling) -> list[Group]:
        """Return one :class:`Group` of ``n`` scored episodes per row, in row order."""

    # ---- production (slime) ------------------------------------------------------------------------
    def slime_settings(self) -> dict[str, Any]:
        """Extra keys for the stage's ``--custom-config-path`` YAML (slime sets them on ``args``)."""
        return {}


# ---- registry ------------------------------------------------------------------------------------------
#: Built-in environments by name, as ``module:Class`` (imported when first used).
_BUILTIN: dict[str, str] = {
    SINGLE_TURN: "infra.environments.single_turn:SingleTurnEnvironment",
    "agent": "infra.environments.agent:AgentToolEnvironment",
}
_REGISTRY: dict[str, type[Environment]] = {}


def register_environment(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: register an environment under ``name`` (a stage's ``env.py`` uses this)."""

    def deco(cls: type[Environment]) -> type[Environment]:
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise TypeError(f"register_environment({name!r}): {cls!r} is not an Environment subclass")
        if name in _BUILTIN:
            raise ValueError(f"environment {name!r} is a built-in name; choose another")
        known = _REGISTRY.get(name)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"environment {name!r} is already registered by {known.__module__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def registered_environments() -> list[str]:
    """Names of every environment known (built-in or registered)."""
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def environment_class(name: str) -> type[Environment]:
    """Return the environment class registered as ``name`` (importing a built-in on first use)."""
    if name not in _REGISTRY and name in _BUILTIN:
        module, _, attr = _BUILTIN[name].partition(":")
        _REGISTRY[name] = getattr(importlib.import_module(module), attr)
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; registered: {', '.join(registered_environments())}")
    return _REGISTRY[name]


def environment_options(name: str, options: dict[str, Any]) -> BaseModel:
    """Validate ``options`` against the environment's ``Options``; the error names the option."""
    cls = environment_class(name)
    try:
        return cls.Options.model_validate(options)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(options)"
        raise ValueError(f"options.{where}: {first['msg']} (environment {name!r})") from None


def build_environment(
    name: str, options: dict[str, Any] | None = None, *, reward: str | None = None
) -> Environment:
    """Build the environment ``name`` with validated ``options``; ``reward`` is the stage's reward."""
    opts = environment_options(name, options or {})
    return environment_class(name)(opts, reward=reward)


def row_environment_spec(metadata: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The environment a row's ``metadata`` names: ``environment`` (single-turn if absent) and its options."""
    return metadata.get("environment") or SINGLE_TURN, dict(metadata.get("environment_options") or {})


def stage_environment(config: Any) -> Environment:
    """Build the environment of an RL stage config (``rl.environment``), its reward as the default.

    The stage's ``env.py`` must be imported first when it registers the environment
    (``ResolvedStage.environment`` does that; the slime hooks import ``rufus_stage_files``).
    """
    if config.rl is None:
        raise ValueError(f"stage {config.name}: only RL stages have an environment")
    env = config.rl.environment
    return build_environment(env.name, env.options, reward=config.reward)
