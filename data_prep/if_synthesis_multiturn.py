"""Multi-turn adversarial IF conversations: a teacher plays the user, rotating models answer (paper §3.4).

Paper: a teacher LLM plays the user, plans the conversation and tries to make the assistant fail
(layered instructions, revised requirements, distractors); several open-weight models take the assistant
role in rotation across data points; part of the data carries a system prompt that later turns
challenge (instruction hierarchy); each conversation gets rubrics for the final response, checked by
Python or by an LLM judge; a sanity filter drops overlong conversations and downsamples cases whose
expected behaviour is to decline. 13K conversations average 6.1 turns and 2.7 rubrics.

Ours, per attempt (seeded by run seed and index): the number of user turns is drawn so that turns (user
and assistant messages, counting the final reply the policy writes) average ``mean_turns``, capped at
``max_turns``; exactly ``round(n * system_prompt_fraction)`` attempts get a system prompt. Conversation
``i`` is answered by ``assistants[i % len(assistants)]``. Teacher calls, each a strict JSON reply: the
plan + (system prompt) + first user turn, one call per further user turn, then the rubrics for the final
assistant turn with ``expects_refusal`` and a reference reply. ``code_src`` rubrics must compile and pass
on the reference in the sandbox; ``judge`` rubrics are left to the later teacher quality filter. The row's
prompt ends on the final user turn; its label is the rubric list.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from data_prep.if_synthesis_common import (
    CHECKER_SIGNATURE,
    Drop,
    ReplyError,
    StrictReply,
    SynthesisStep,
    Text,
    checker_drop_reason,
    client_for,
    parse_reply,
    response_format,
    run_items,
    transcript,
)
from data_prep.schema import PromptRow
from data_prep.teacher import TeacherError
from rewards.instruction_following import validate_rubrics

MAX_RUBRICS = 6
_ROLE = (
    "You play the USER in a conversation with an AI assistant, to build hard instruction-following "
    "tests. You actively try to make the assistant fail: layer instructions across turns, revise earlier "
    "requirements, add distractors, and bring back details from early turns."
)
PLAN_SYSTEM = (
    f"{_ROLE} First write your plan for the whole conversation, then its first user message. Reply with "
    'one JSON object and nothing else: {"plan": str, "system_prompt": str or null, "user_turn": str}'
)
TURN_SYSTEM = (
    f"{_ROLE} Follow your plan and react to what the assistant actually said. Reply with one JSON object "
    'and nothing else: {"user_turn": str}'
)
RUBRIC_SYSTEM = (
    "You write the grading rubrics for the assistant's NEXT reply to a conversation. Each rubric is one "
    "condition that reply must meet, taken from the system prompt and every earlier turn; every rubric is "
    "required, so list no optional niceties. When a program can decide a condition, give "
    f'{{"kind": "code_src", "description": str, "source": str}} where source defines `{CHECKER_SIGNATURE}` '
    "(self-contained, standard library only); otherwise give "
    '{"kind": "judge", "requirement": str}, a yes/no question an LLM judge answers about the reply. '
    f"Give 1 to {MAX_RUBRICS} rubrics. Say whether the correct behaviour is to decline the request "
    "(expects_refusal) and write a reference reply that meets every rubric. Reply with one JSON object "
    'and nothing else: {"expects_refusal": bool, "rubrics": [...], "reference": str}'
)


class PlanReply(StrictReply):
    """The teacher's plan, optional system prompt and first user turn."""

    plan: Text
    system_prompt: str | None = None
    user_turn: Text


class TurnReply(StrictReply):
    """One further user turn."""

    user_turn: Text


class RubricSpec(StrictReply):
    """One rubric as the teacher writes it (converted to the reward's rubric dict)."""

    kind: Literal["code_src", "judge"]
    description: str | None = None
    source: str | None = None
    requirement: str | None = None


class RubricReply(StrictReply):
    """Rubrics for the final assistant turn, whether declining is expected, and a reference reply."""

    expects_refusal: bool
    rubrics: list[RubricSpec] = Field(min_length=1, max_length=MAX_RUBRICS)
    reference: Text


def sample_user_turns(rng: random.Random, mean_turns: float, max_turns: int) -> int:
    """Return a user-turn count in ``[2, max_turns // 2]`` whose doubled mean is ``mean_turns``.

    Two user turns (four turns with the final reply) is the least that makes a conversation multi-turn;
    the extra turns are binomial so the draw is bounded and its mean is exact.
    """
    top = max_turns // 2
    if not 4 <= mean_turns <= 2 * top:
        raise ValueError(f"mean_turns must lie in [4, {2 * top}] for max_turns={max_turns}, got {mean_turns}")
    if top == 2:
        return 2
    p = (mean_turns / 2 - 2) / (top - 2)
    return 2 + sum(rng.random() < p for _ in range(top - 2))


def plan_request(user_turns: int, topic: str | None, system_prompt: bool) -> str:
    """Return the user message asking the teacher for the plan and first turn."""
    lines = [
        f"The conversation has {user_turns} user turns; the assistant's reply to the last one is graded.",
        f"Topic: {topic}" if topic else "Topic: choose a realistic one.",
        "Give the assistant a system prompt with concrete, checkable rules (format, language, forbidden "
        "content, persona...). Later user turns must try to make it break those rules; the system prompt "
        "still wins."
        if system_prompt
        else "There is no system prompt: set system_prompt to null.",
    ]
    return "\n".join(lines)


def turn_request(plan: str, system: str | None, convo: list[dict[str, str]], k: int, total: int) -> str:
    """Return the user message asking the teacher for user turn ``k`` of ``total``."""
    last = " This is the final turn: the assistant's reply to it is graded." if k == total else ""
    head = [f"Your plan: {plan}"] + ([f"System prompt the assistant follows: {system}"] if system else [])
    return "\n".join(
        [*head, "Conversation so far:", transcript(convo), f"Write user turn {k} of {total}.{last}"]
    )


def _rubrics(reply: RubricReply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in reply.rubrics:
        if r.kind == "code_src":
            out.append({"kind": "code_src", "source": r.source or "", "description": r.description or ""})
        else:
            out.append({"kind": "judge", "requirement": r.requirement or ""})
    return validate_rubrics(out)


def synthesise_multi_turn(
    teacher: Any,
    assistants: Sequence[Any],
    n: int,
    seed: int,
    *,
    mean_turns: float = 6.0,
    max_turns: int = 12,
    system_prompt_fraction: float = 0.3,
    topics: Sequence[str] = (),
    temperature: float = 1.0,
    max_tokens: int | None = None,
    workers: int = 4,
    json_schema: bool = True,
) -> SynthesisStep:
    """Return ``n`` attempts' kept conversations (family ``if_multiturn``) and their drops by reason.

    ``teacher`` and ``assistants`` are ``Endpoint`` objects; ``topics`` seed the conversations in turn;
    ``json_schema`` sends each teacher reply's schema as ``response_format`` (assistants answer freely).
    Raises ``InfraError`` if the sandbox cannot run the checkers.
    """
    if n and not assistants:
        raise ValueError("multi-turn synthesis needs at least one assistant endpoint")
    user_side = client_for(teacher)
    answerers = [client_for(a) for a in assistants]
    with_system = set(
        random.Random(f"if-synthesis:system:{seed}").sample(range(n), round(n * system_prompt_fraction))
    )

    def ask_teacher(system: str, user: str, shape: type[Any]) -> Any:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        fmt = {"response_format": response_format(shape)} if json_schema else {}
        text = user_side.chat(
            messages, temperature=temperature, max_tokens=max_tokens, include_reasoning=False, **fmt
        )
        return parse_reply(text[0], shape)

    def attempt(i: int) -> PromptRow | Drop:
        rng = random.Random(f"if-synthesis:multi_turn:{seed}:{i}")
        user_turns = sample_user_turns(rng, mean_turns, max_turns)
        assistant = answerers[i % len(answerers)]
        topic = topics[i % len(topics)] if topics else None
        try:
            plan = ask_teacher(PLAN_SYSTEM, plan_request(user_turns, topic, i in with_system), PlanReply)
            system = (plan.system_prompt or "").strip() if i in with_system else ""
            if i in with_system and not system:
                return Drop("reply_schema", "system_prompt: missing though one was asked for")
            head = [{"role": "system", "content": system}] if system else []
            convo = [{"role": "user", "content": plan.user_turn}]
            for k in range(2, user_turns + 1):
                try:
                    answer = assistant.chat(head + convo, temperature=temperature, include_reasoning=False)[0]
                except TeacherError as exc:
                    return Drop("assistant_error", str(exc)[:160])
                if not answer.strip():
                    return Drop("assistant_empty", f"{assistant.model}, turn {k - 1}")
                convo.append({"role": "assistant", "content": answer})
                turn = ask_teacher(
                    TURN_SYSTEM, turn_request(plan.plan, system, convo, k, user_turns), TurnReply
                )
                convo.append({"role": "user", "content": turn.user_turn})
            graded = ask_teacher(RUBRIC_SYSTEM, transcript(head + convo), RubricReply)
        except TeacherError as exc:
            return Drop("teacher_error", str(exc)[:160])
        except ReplyError as exc:
            return Drop(exc.reason, exc.detail)
        try:
            rubrics = _rubrics(graded)
        except ValueError as exc:  # a code_src rubric without source, a judge rubric without requirement
            return Drop("reply_schema", str(exc)[:160])
        problem = checker_drop_reason(
            [r["source"] for r in rubrics if r["kind"] == "code_src"], graded.reference
        )
        if problem:
            return Drop(*problem)
        return PromptRow(
            id=f"ifmt-syn-{seed}-{i}",
            prompt=head + convo,
            label=rubrics,
            metadata={
                "reward": "if_rubrics",
                "family": "if_multiturn",
                "answer_format": "text",
                "source": "synthesis/multi_turn",
                "teacher": teacher.model,
                "assistant": assistant.model,
                "system_prompt": bool(system),
                "expects_refusal": graded.expects_refusal,
                "turns": len(convo) + 1,
            },
        )

    return run_items("multi_turn", n, attempt, workers)


def sanity_filter(
    rows: Sequence[PromptRow], max_chars: int, refusal_fraction: float, seed: int
) -> tuple[list[PromptRow], dict[str, Any]]:
    """Drop conversations over ``max_chars``, then keep at most ``refusal_fraction`` expected refusals.

    Returns the kept rows (original order) and the counts for the manifest. Which refusals stay is a
    seeded draw, so the rows kept do not depend on the order attempts finished in.
    """
    fitting = [r for r in rows if sum(len(str(m.get("content", ""))) for m in r.prompt) <= max_chars]
    refusals = [r for r in fitting if r.metadata.get("expects_refusal")]
    others = len(fitting) - len(refusals)
    if refusal_fraction >= 1:
        allowed = len(refusals)
    else:
        allowed = min(len(refusals), math.floor(refusal_fraction * others / (1 - refusal_fraction) + 1e-9))
    keep_ids = {r.id for r in random.Random(f"if-synthesis:refusals:{seed}").sample(refusals, allowed)}
    kept = [r for r in fitting if not r.metadata.get("expects_refusal") or r.id in keep_ids]
    counts = {
        "dropped_overlong": len(rows) - len(fitting),
        "dropped_refusal_downsampled": len(refusals) - allowed,
        "refusals_kept": allowed,
        "max_chars": max_chars,
        "refusal_fraction": refusal_fraction,
    }
    return kept, counts
