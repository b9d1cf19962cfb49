"""The ``search_judge`` reward of stage 06 Search Agent (paper §3.7): a judged final answer behind gates.

The rules, in order (:func:`search_reward` is the pure form):

* the judge sees the episode only when the model commits to an explicit final answer: the content of the
  last complete ``<answer>...</answer>`` in the final turn's visible text (the think block removed; tags
  are case-insensitive). The paper's tag was lost in its text extraction ("enclosed in ."); ``<answer>``
  is the convention of the search agents it builds on (Search-R1, ASearcher, slime's search-r1 example),
  and GLM's chat format reserves no answer tag. An answer written in a turn that also calls tools does
  not count: the model was still researching. No answer: 0 (``no_answer``, ``empty_answer``,
  ``unterminated_think``, ``answer_in_tool_turn``), or −0.1 (``budget_exhausted``) when a budget ended
  the episode: tool calls, iterations, the per-turn token cap or the trajectory's token budget;
* positive reward needs at least 2 successful tool calls (tool results with status ``success``); with
  fewer the reward is 0 even for a right answer (``too_few_tool_calls``) and the judge is not called;
* the judge's score in [0, 1] (partial credit passes through) is scaled by 1 − the fraction of the
  episode's tool calls that failed, down to a factor of 0.5. Failed calls are the loop's ``tool_errors``:
  malformed calls (never executed; their result is the tool layer's ``Error: malformed tool call``) and
  calls whose result has status ``error``, both counted from the transcript;
* there is no term that pays without a judged answer.

``failure`` is None only for a fully correct answer that passed the gates (so ``RewardResult.passed``
means "correct", as the data filters count it), else the first reason above, ``wrong`` or
``partial_credit``. An answer over :data:`MAX_ANSWER_CHARS` is not judged (``answer_too_long``, 0).

The judge (:mod:`rewards.search_judges`) is chosen by ``metadata["judge"]``, else ``RUFUS_SEARCH_JUDGE``,
else ``train``: ``deterministic`` (the embedded scale), ``train`` (the training judge endpoint) or
``eval`` (the stronger evaluation judge, configured separately). A judge that is not configured or does
not answer makes the result ``aborted`` (``judge_unavailable``), never a 0; an unreadable verdict fails
closed (``judge_unparsable``, 0). ``metadata["termination"]`` (a :class:`Termination` value), when the
caller passes it, decides budget exhaustion; without it the transcript does: an episode whose last event
is a tool call or result was stopped mid-research. A truncated final text without tool calls looks like a
natural stop then, so callers that know the termination should pass it.
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass
from typing import Any

from infra.agents.contract import Termination
from rewards.answer_extract import split_thinking
from rewards.contract import RewardRequest, RewardResult, register_reward
from rewards.search_judges import (
    JUDGE_KINDS,
    Judge,
    JudgeUnavailable,
    JudgeUnparsable,
    JudgeVerdict,
    make_judge,
)

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
MIN_SUCCESSFUL_CALLS = 2
MALFORMED_FLOOR = 0.5
BUDGET_PENALTY = -0.1
MAX_ANSWER_CHARS = 4000
MALFORMED_PREFIX = "Error: malformed tool call"  # the tool layer's result for a call it did not run
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
NO_ANSWER_REASONS = ("no_answer", "empty_answer", "unterminated_think", "answer_in_tool_turn")


# ---- the gates ------------------------------------------------------------------------------------------
def search_reward(
    answer: str | None,
    verdict: JudgeVerdict | None,
    successful_calls: int,
    malformed_calls: int,
    total_calls: int,
    budget_exhausted: bool,
    *,
    no_answer_reason: str = "no_answer",
) -> RewardResult:
    """Return the reward of an episode from its answer, the judge's verdict and its tool-call counts.

    ``answer`` is None when there is no final-answer tag (``no_answer_reason`` says why); ``verdict`` may
    be None when the answer is not judged (no answer, or too few successful calls). ``malformed_calls``
    are the failed calls (malformed or with an error result) among ``total_calls``. Raises ValueError on
    inconsistent counts or a missing verdict where one is needed (a caller's bug, not model output).
    """
    counts_ok = (
        min(successful_calls, malformed_calls) >= 0 and successful_calls + malformed_calls <= total_calls
    )
    if not counts_ok:
        raise ValueError(
            f"search_reward: inconsistent tool-call counts (successful {successful_calls}, malformed "
            f"{malformed_calls}, total {total_calls})"
        )
    if no_answer_reason not in NO_ANSWER_REASONS:
        raise ValueError(
            f"search_reward: no_answer_reason {no_answer_reason!r} is not one of {NO_ANSWER_REASONS}"
        )
    components = {
        "answer_tag": float(answer is not None),
        "successful_tool_calls": float(successful_calls),
        "malformed_tool_calls": float(malformed_calls),
        "tool_calls": float(total_calls),
    }
    if answer is None:
        if budget_exhausted:
            components["budget_penalty"] = BUDGET_PENALTY
            return RewardResult(score=BUDGET_PENALTY, failure="budget_exhausted", components=components)
        return RewardResult(score=0.0, failure=no_answer_reason, components=components)
    if verdict is not None:
        components["judge"] = verdict.score
    components["tool_gate"] = float(successful_calls >= MIN_SUCCESSFUL_CALLS)
    if successful_calls < MIN_SUCCESSFUL_CALLS:
        return RewardResult(score=0.0, parsed=answer, failure="too_few_tool_calls", components=components)
    if verdict is None:
        raise ValueError("search_reward: an answer that passes the tool gate needs the judge's verdict")
    fraction = malformed_calls / total_calls if total_calls else 0.0
    factor = max(MALFORMED_FLOOR, 1.0 - fraction)
    components.update(malformed_fraction=fraction, malformed_factor=factor)
    failure = None if verdict.score >= 1.0 else "wrong" if verdict.score <= 0.0 else "partial_credit"
    return RewardResult(score=verdict.score * factor, parsed=answer, failure=failure, components=components)


# ---- reading the episode --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolStats:
    """Tool-call counts of an episode's transcript and whether it stopped mid-research."""

    calls: int = 0
    successful: int = 0
    malformed: int = 0  # never executed: the tool layer refused to parse them
    errors: int = 0  # executed (or cancelled) with an error result
    ended_mid_research: bool = False  # the last event is a tool call or a tool result

    @property
    def failed(self) -> int:
        """Calls that count against the malformed-call factor (the loop's ``tool_errors``)."""
        return self.malformed + self.errors


def tool_stats(transcript: Any) -> ToolStats:
    """Count the tool calls of a loop transcript (``infra.agents.loop.transcript_of``); junk is skipped."""
    calls = results = successful = malformed = errors = 0
    last: tuple[str, bool] | None = None  # (role, called tools) of the last assistant or tool entry
    for entry in transcript if isinstance(transcript, list) else []:
        if not isinstance(entry, dict):
            continue
        role = entry.get("role")
        if role == "assistant":
            made = entry.get("tool_calls")
            n = len(made) if isinstance(made, list) else 0
            calls += n
            last = ("assistant", n > 0)
        elif role == "tool":
            results += 1
            status, content = entry.get("status"), entry.get("content")
            if status == "success":
                successful += 1
            elif status == "error":
                if isinstance(content, str) and content.startswith(MALFORMED_PREFIX):
                    malformed += 1
                else:
                    errors += 1
            last = ("tool", True)
    return ToolStats(
        calls=max(calls, results),
        successful=successful,
        malformed=malformed,
        errors=errors,
        ended_mid_research=last is not None and last[1],
    )


def extract_answer(response: str) -> tuple[str | None, str]:
    """Return ``(answer, reason)``: the last complete ``<answer>`` tag's stripped content, or None and why.

    Linear in the response: the last closing tag is found first, then the last opening tag before it.
    """
    _, final, problem = split_thinking(response)
    if problem == "unterminated_think":
        return None, problem
    lowered = final.translate(_ASCII_LOWER)  # same length as ``final``, unlike str.lower()
    close = lowered.rfind(ANSWER_CLOSE)
    start = lowered.rfind(ANSWER_OPEN, 0, close) if close >= 0 else -1
    if start < 0:
        return None, "no_answer"
    answer = final[start + len(ANSWER_OPEN) : close].strip()
    return (answer, "") if answer else (None, "empty_answer")


def gold_aliases(label: Any) -> list[str]:
    """Return the gold answers of a label: a string, a list of aliases, or a dict with ``answer`` (and
    optional ``aliases``) or Search-R1's ``target``; ValueError otherwise."""
    if isinstance(label, str):
        golds: Any = [label]
    elif isinstance(label, list):
        golds = label
    elif isinstance(label, dict) and "answer" in label:
        extra = label.get("aliases") or []
        golds = [label["answer"], *(extra if isinstance(extra, list) else [extra])]
    elif isinstance(label, dict) and "target" in label:
        target = label["target"]
        golds = target if isinstance(target, list) else [target]
    else:
        raise ValueError(
            f"label must be a gold answer, a list of aliases or a dict with 'answer': {label!r:.120}"
        )
    if not golds or not all(isinstance(g, str) and g.strip() for g in golds):
        raise ValueError(f"gold answers must be non-empty strings: {golds!r:.120}")
    return [g.strip() for g in golds]


def question_of(request: RewardRequest) -> str:
    """Return ``metadata["question"]``, else the last user message of the prompt, else ''."""
    question = request.metadata.get("question")
    if isinstance(question, str):
        return question
    for message in reversed(request.prompt):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def judge_kind(request: RewardRequest) -> str:
    """Return the judge named by ``metadata["judge"]``, ``RUFUS_SEARCH_JUDGE`` or the default ``train``."""
    return str(request.metadata.get("judge") or os.environ.get("RUFUS_SEARCH_JUDGE") or "train")


def _termination(request: RewardRequest) -> Termination | None:
    value = request.metadata.get("termination")
    if value is None:
        return None
    try:
        return Termination(value)
    except ValueError:
        known = ", ".join(t.value for t in Termination)
        raise ValueError(f"metadata.termination {value!r} is not one of {known}") from None


def _aborted(failure: str, error: str, **details: Any) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure=failure, details={"error": error, **details})


def _judge(
    request: RewardRequest, judge: Judge | None, gold: list[str], answer: str
) -> tuple[JudgeVerdict, str] | RewardResult:
    """Return ``(verdict, judge name)``, or the result that replaces the reward when there is no verdict."""
    if judge is None:
        kind = judge_kind(request)
        if kind not in JUDGE_KINDS:
            return _aborted(
                "judge_unavailable",
                f"unknown search judge {kind!r} (metadata.judge or RUFUS_SEARCH_JUDGE); "
                f"expected one of {', '.join(JUDGE_KINDS)}",
            )
        try:
            judge = make_judge(kind)
        except JudgeUnavailable as exc:
            return _aborted("judge_unavailable", str(exc))
    try:
        return judge.score(question_of(request), gold, answer), judge.name
    except JudgeUnavailable as exc:
        return _aborted("judge_unavailable", str(exc), judge=judge.name)
    except JudgeUnparsable as exc:
        details = {"error": str(exc), "judge": judge.name}
        return RewardResult(score=0.0, parsed=answer, failure="judge_unparsable", details=details)


# ---- the rewards ----------------------------------------------------------------------------------------
def _ended(request: RewardRequest) -> Termination | None | RewardResult:
    """The episode's termination, or an aborted result when it is unreadable or an infrastructure failure."""
    try:
        termination = _termination(request)
    except ValueError as exc:
        return _aborted("environment", str(exc))
    if termination is not None and termination.is_infrastructure_failure:
        return _aborted("environment", f"episode ended with {termination.value}: nothing to score")
    return termination


def score_episode(request: RewardRequest, judge: Judge | None = None) -> RewardResult:
    """Return the gated reward of a search-agent episode (``judge`` overrides the configured one)."""
    termination = _ended(request)
    if isinstance(termination, RewardResult):
        return termination
    try:
        gold = gold_aliases(request.label)
    except ValueError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": str(exc)})
    stats = tool_stats(request.transcript)
    answer, reason = extract_answer(request.response)
    if answer is not None and stats.ended_mid_research:
        answer, reason = None, "answer_in_tool_turn"
    exhausted = termination.is_truncation if termination is not None else stats.ended_mid_research
    details: dict[str, Any] = {
        "tool_errors": stats.errors,
        "termination": termination.value if termination is not None else None,
    }
    counts = (stats.successful, stats.failed, stats.calls, exhausted)
    if answer is None or stats.successful < MIN_SUCCESSFUL_CALLS:
        result = search_reward(answer, None, *counts, no_answer_reason=reason or "no_answer")
        return result.model_copy(update={"details": details})
    if len(answer) > MAX_ANSWER_CHARS:
        return RewardResult(
            score=0.0,
            parsed=answer[:200],
            failure="answer_too_long",
            details={**details, "chars": len(answer)},
        )
    judged = _judge(request, judge, gold, answer)
    if isinstance(judged, RewardResult):
        return judged
    verdict, name = judged
    details.update(judge=name, rationale=verdict.rationale)
    return search_reward(answer, verdict, *counts).model_copy(update={"details": details})


def grade_answer(request: RewardRequest, judge: Judge | None = None) -> RewardResult:
    """Return the judge's grade of the response's final answer with no tool gates (the tool-free filter
    pass and held-out accuracy): the verdict's score, ``failure`` as in :func:`search_reward`."""
    try:
        gold = gold_aliases(request.label)
    except ValueError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": str(exc)})
    answer, reason = extract_answer(request.response)
    if answer is None:
        return RewardResult(score=0.0, failure=reason)
    if len(answer) > MAX_ANSWER_CHARS:
        return RewardResult(score=0.0, parsed=answer[:200], failure="answer_too_long")
    judged = _judge(request, judge, gold, answer)
    if isinstance(judged, RewardResult):
        return judged
    verdict, name = judged
    failure = None if verdict.score >= 1.0 else "wrong" if verdict.score <= 0.0 else "partial_credit"
    return RewardResult(
        score=verdict.score,
        parsed=answer,
        failure=failure,
        components={"judge": verdict.score},
        details={"judge": name, "rationale": verdict.rationale},
    )


@register_reward("search_judge")
def search_judge(request: RewardRequest) -> RewardResult:
    """Stage 06's reward: the configured judge's score on the tagged final answer, behind the gates."""
    return score_episode(request)


@register_reward("search_accuracy")
def search_accuracy(request: RewardRequest) -> RewardResult:
    """Stage 06's held-out accuracy: the judge's grade in [0, 1] of the final answer, with the training
    reward's gates and budget penalty off (a benchmark scores the answer, not the tool use); an episode
    that ended on an infrastructure failure is aborted (left out of the mean), one that ended mid-research
    has no answer (0)."""
    ended = _ended(request)
    if isinstance(ended, RewardResult):
        return ended
    if tool_stats(request.transcript).ended_mid_research:  # a budget ended it, or it answered mid-research
        return RewardResult(score=0.0, failure="no_answer")
    return grade_answer(request)
