"""One group of samples as the objectives see it, built the same way from either backend's samples.

Why this exists: the group-aware shaping (:func:`infra.objectives.shape_group`) and advantage
(:func:`infra.objectives.group_advantages`) rules need per-sample facts beyond the reward: is it correct,
how long is it, how many tokens did the model sample, how many turns and invalid tool calls did the
episode have, was the task solved. The embedded trainer (``infra.embedded.sampling.Sample``) and slime's
``--custom-reward-post-process-path`` hook (slime ``Sample``) used to gather these twice, and the two
disagreed (what "correct" means, which tokens count, whether ``positive_length`` gets its params). Here
each rule is decided once; the backends only translate their samples into a :class:`GroupView` with
:func:`view_from_embedded` / :func:`view_from_slime` and pass :func:`shaping_kwargs` and
:func:`advantage_kwargs` to ``shape_group`` / ``group_advantages``, so identical groups get identical
advantages on both.

The rules:

* correct / passed: score > 0, no reward failure, not aborted (``RewardResult.passed``);
* length shaping (``shortest_correct_length``, ``positive_length``) measures all response tokens;
  ``positive_length`` receives the shaping params (``start_len``);
* Ultramarine ``output_tokens`` are the trained (loss-masked, model-sampled) tokens, so tool and
  environment tokens in a multi-turn response are not charged to the policy;
* FireFlash ``solved`` is the episode's explicit solved flag when it reports one, else ``passed``;
  its ``num_tokens`` are response tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.embedded.sampling import Sample


@dataclass(frozen=True)
class SampleView:
    """The facts about one sample that shaping and advantages read."""

    score: float  # raw reward
    passed: bool  # score > 0, no reward failure, not aborted
    response_tokens: int  # every response token (length budgets)
    trained_tokens: int  # loss-masked tokens: the ones the model sampled
    turns: int = 1
    invalid_tool_calls: int = 0
    solved: bool | None = None  # explicit solved flag of the episode; None = use ``passed``


@dataclass(frozen=True)
class GroupView:
    """The kept (non-aborted) samples of one prompt and the response budget they were sampled under."""

    samples: tuple[SampleView, ...]
    max_len: int

    @property
    def scores(self) -> list[float]:
        """Raw reward scores, one per sample."""
        return [s.score for s in self.samples]


def shaping_kwargs(kind: str, view: GroupView, coef: float, params: Mapping[str, float]) -> dict[str, Any]:
    """Return the keyword arguments of ``shape_group(kind, view.scores, ...)`` for one group."""
    samples = view.samples
    lengths = [s.response_tokens for s in samples]
    per_kind = {
        "none": lambda: {},
        "shortest_correct_length": lambda: {
            "lengths": lengths,
            "correct": [s.passed for s in samples],
            "max_len": view.max_len,
            "coef": coef,
        },
        "positive_length": lambda: {"lengths": lengths, "max_len": view.max_len, "coef": coef, **params},
        "ultramarine": lambda: {
            "output_tokens": [s.trained_tokens for s in samples],
            "turns": [s.turns for s in samples],
            "invalid_tool_calls": [s.invalid_tool_calls for s in samples],
            "params": dict(params),
        },
    }
    if kind not in per_kind:
        raise ValueError(f"unknown shaping kind {kind!r}; expected one of {sorted(per_kind)}")
    return per_kind[kind]()


def advantage_kwargs(kind: str, view: GroupView) -> dict[str, Any]:
    """Return the keyword arguments of ``group_advantages(kind, shaped, ...)`` for one group."""
    if kind != "fireflash":
        return {}
    return {
        "solved": [s.passed if s.solved is None else s.solved for s in view.samples],
        "num_tokens": [s.response_tokens for s in view.samples],
    }


def _first(key: str, *sources: Mapping[str, Any], default: Any) -> Any:
    """Return ``key`` from the first mapping that has it, else ``default``."""
    for src in sources:
        if key in src and src[key] is not None:
            return src[key]
    return default


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def view_from_embedded(samples: Sequence[Sample], max_len: int) -> GroupView:
    """Return the view of one embedded group (``infra.embedded.sampling.Sample``, aborted already dropped).

    Turns, invalid tool calls and the solved flag come from ``sample.metrics`` (what the episode reported),
    then ``sample.reward.details``; defaults 1 turn, 0 invalid calls, no flag.
    """
    views = []
    for s in samples:
        sources = (s.metrics or {}, s.reward.details or {})
        views.append(
            SampleView(
                score=float(s.reward.score),
                passed=bool(s.reward.passed),
                response_tokens=len(s.token_ids),
                trained_tokens=int(s.trained_tokens),
                turns=int(_first("turns", *sources, default=1)),
                invalid_tool_calls=int(_first("invalid_tool_calls", *sources, default=0)),
                solved=_flag(_first("solved", *sources, default=None)),
            )
        )
    return GroupView(tuple(views), int(max_len))


def _slime_aborted(sample: Any) -> bool:
    status = getattr(sample.status, "name", str(sample.status)).upper()
    return status == "ABORTED" or sample.reward is None


def view_from_slime(args: Any, samples: Sequence[Any], rewards: Sequence[float]) -> GroupView:
    """Return the view of one slime group (the kept samples of a prompt and their reward values).

    ``passed`` is ``reward > 0`` with no ``metadata['reward_failure']`` (written by
    ``slime_hooks.score_sample``) on a sample that is not aborted; turns, invalid tool calls and the solved
    flag come from ``metadata``; trained tokens are ``sum(loss_mask)`` (all response tokens without a
    mask). ``max_len`` is ``args.rollout_max_response_len``, else the longest response of the group.
    """
    if len(samples) != len(rewards):
        raise ValueError(f"view_from_slime: {len(samples)} samples but {len(rewards)} rewards")
    views = []
    for s, r in zip(samples, rewards, strict=True):
        meta = s.metadata or {}
        length = int(s.response_length)
        views.append(
            SampleView(
                score=float(r),
                passed=float(r) > 0 and meta.get("reward_failure") is None and not _slime_aborted(s),
                response_tokens=length,
                trained_tokens=int(sum(s.loss_mask)) if s.loss_mask else length,
                turns=int(_first("turns", meta, default=1)),
                invalid_tool_calls=int(_first("invalid_tool_calls", meta, default=0)),
                solved=_flag(meta.get("solved")),
            )
        )
    lengths = [v.response_tokens for v in views]
    max_len = int(getattr(args, "rollout_max_response_len", 0) or max(lengths + [1]))
    return GroupView(tuple(views), max_len)
