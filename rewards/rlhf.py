"""The RLHF reward (stage 07, paper §3.8): the raw reward-model score with a length penalty when positive.

``rlhf_rm`` scores the *final* answer (thinking removed with :func:`rewards.reward_model.strip_thinking`)
with a Bradley–Terry reward model (Skywork-Reward-V2-Qwen3-8B in production) and returns its raw score,
unbounded, minus a linear length penalty that applies only when the raw score is positive::

    score = raw - coef * answer_tokens / budget_tokens   if raw > 0
    score = raw                                          otherwise

``answer_tokens`` counts the final answer in the RM's tokenizer. ``coef`` and ``budget_tokens`` come
from the task's ``metadata["length_penalty"] = {"coef": float >= 0, "budget_tokens": int > 0}``; absent
or ``coef`` 0 means no penalty. Components: ``raw``, ``length_penalty`` (what was subtracted) and
``answer_tokens``.

No answer to score fails closed. A response whose think block never closes (``unterminated_think``),
holds more than one block (``unbalanced_think``, as the other rewards rule) or has an empty final answer
(``no_answer``) scores ``metadata["no_answer_score"]``, default :data:`NO_ANSWER_SCORE` = -10. It is not
0: BT scores have no shared zero and 0 would *reward* silence on prompts whose answers score below it
(H-RLHF answers average -4.2 chosen, -8.4 rejected in Table 13). It is not the RM's score of an empty
answer either, which the RM never learnt to rank and may place above real answers. A fixed floor below
the typical rejected answer ranks "no answer" last within a group; set it per prompt set when its score
scale differs.

The RM is ``metadata["reward_model_path"]`` (a local seq-cls folder; the embedded stage puts its RM
there; optional ``metadata["reward_model_device"]``, else ``RUFUS_RM_DEVICE`` or cpu) or else the one
configured in the environment (:func:`rewards.reward_model.reward_model_from_env`). An RM that is not
configured, cannot load or does not answer makes the result ``aborted`` (never 0). A malformed
``length_penalty`` or ``no_answer_score`` is a task error: ``verifier_error`` naming the key; so is
any other error while scoring (a prompt the RM's template rejects), as :func:`rewards.safe_score` rules.
:func:`score_batch` scores many requests with one batched RM call per model; :func:`rlhf_reward` is the
single-request form, sharing the same code.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rewards.answer_extract import split_thinking
from rewards.contract import RewardRequest, RewardResult, register_reward, verifier_error
from rewards.reward_model import (
    LocalRewardModel,
    RewardModel,
    RewardModelUnavailable,
    reward_model_from_env,
)

NO_ANSWER_SCORE = -10.0


class LengthPenalty(BaseModel):
    """``metadata["length_penalty"]``: a positive raw score loses ``coef * answer_tokens / budget_tokens``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    coef: float = Field(ge=0.0, allow_inf_nan=False)
    budget_tokens: int = Field(gt=0)

    def apply(self, raw: float, answer_tokens: int) -> tuple[float, float]:
        """Return ``(score, penalty)``: the penalty is 0 unless ``raw`` is positive."""
        if raw <= 0 or self.coef == 0:
            return raw, 0.0
        penalty = self.coef * answer_tokens / self.budget_tokens
        return raw - penalty, penalty


class _Settings(BaseModel):
    """The reward's settings read from a task's metadata."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    length_penalty: LengthPenalty | None = None
    no_answer_score: float = Field(default=NO_ANSWER_SCORE, allow_inf_nan=False)


def _settings(metadata: dict[str, Any]) -> _Settings:
    """Return the reward settings in ``metadata``; ValueError naming the bad key."""
    try:
        return _Settings(
            length_penalty=metadata.get("length_penalty"),
            no_answer_score=metadata.get("no_answer_score", NO_ANSWER_SCORE),
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"rlhf_rm: metadata.{key}: {err['msg']} (got {err.get('input')!r:.80})") from None


_LOCAL: dict[tuple[str, str], RewardModel] = {}
_LOCAL_LOCK = threading.Lock()


def reward_model_for(metadata: dict[str, Any]) -> RewardModel:
    """Return the RM of a task: ``metadata["reward_model_path"]`` if set, else the environment's.

    Raises :class:`RewardModelUnavailable` when none is configured or it cannot be loaded.
    """
    path = metadata.get("reward_model_path")
    if path:
        device = str(metadata.get("reward_model_device") or os.environ.get("RUFUS_RM_DEVICE") or "cpu")
        key = (str(path), device)
        with _LOCAL_LOCK:
            if key not in _LOCAL:
                _LOCAL[key] = LocalRewardModel(path, device=device)
            return _LOCAL[key]
    rm = reward_model_from_env()
    if rm is None:
        raise RewardModelUnavailable(
            "no reward model: set RUFUS_RM_URL + RUFUS_RM_TOKENIZER (SGLang) or RUFUS_RM_PATH, "
            "or metadata.reward_model_path"
        )
    return rm


def _aborted(exc: BaseException) -> RewardResult:
    return RewardResult(
        score=0.0, aborted=True, failure="reward_model_unavailable", details={"error": str(exc)[:500]}
    )


def _scored(raw: float, answer_tokens: int, final: str, settings: _Settings, rm: RewardModel) -> RewardResult:
    penalty_rule = settings.length_penalty
    score, penalty = penalty_rule.apply(raw, answer_tokens) if penalty_rule else (raw, 0.0)
    return RewardResult(
        score=score,
        parsed=final,
        components={"raw": raw, "length_penalty": penalty, "answer_tokens": float(answer_tokens)},
        details={"reward_model": rm.name},
    )


_Item = tuple[int, str, _Settings]  # (request index, final answer, settings)


def _score_group(
    rm: RewardModel, prompts: list[Any], items: list[_Item], results: list[RewardResult | None]
) -> None:
    """Score ``items`` with one batched RM call; an unexpected error is retried item by item."""
    finals = [final for _, final, _ in items]
    try:
        raws = rm.score(prompts, finals)
        counts = rm.count_tokens(finals)
    except RewardModelUnavailable as exc:
        for i, _, _ in items:
            results[i] = _aborted(exc)
        return
    except Exception as exc:  # noqa: BLE001 - as safe_score treats the single-request form
        if len(items) == 1:
            results[items[0][0]] = verifier_error(exc)
            return
        for prompt, item in zip(prompts, items, strict=True):  # only the request at fault fails
            _score_group(rm, [prompt], [item], results)
        return
    for (i, final, settings), raw, n in zip(items, raws, counts, strict=True):
        results[i] = _scored(raw, n, final, settings, rm)


def score_batch(requests: list[RewardRequest]) -> list[RewardResult]:
    """Return one result per request, scoring all answers of one RM in a single batched call."""
    results: list[RewardResult | None] = [None] * len(requests)
    groups: dict[int, tuple[RewardModel, list[_Item]]] = {}
    for i, request in enumerate(requests):
        try:
            settings = _settings(request.metadata)
        except ValueError as exc:
            results[i] = verifier_error(exc)
            continue
        _, final, problem = split_thinking(request.response)
        # lone surrogates (text that was not UTF-8) would make the tokenizer raise: score them as "?"
        final = final.encode("utf-8", "replace").decode("utf-8")
        if problem or not final:
            results[i] = RewardResult(
                score=settings.no_answer_score,
                failure=problem or "no_answer",
                details={"response_chars": len(request.response)},
            )
            continue
        try:
            rm = reward_model_for(request.metadata)
        except RewardModelUnavailable as exc:
            results[i] = _aborted(exc)
            continue
        groups.setdefault(id(rm), (rm, []))[1].append((i, final, settings))
    for rm, items in groups.values():
        _score_group(rm, [requests[i].prompt for i, _, _ in items], items, results)
    return [r for r in results if r is not None]


@register_reward("rlhf_rm")
def rlhf_reward(request: RewardRequest) -> RewardResult:
    """The RLHF reward of one response (see the module docstring)."""
    return score_batch([request])[0]
