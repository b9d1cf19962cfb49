"""Multi-constraint IF prompts written by a teacher LLM from the hand-written constraint pool (paper §3.4).

Paper: a teacher augments a manual pool of single-constraint instructions into multi-constraint
instructions with 2–6 atomic constraints, writes one Python verification function per constraint, and
the instructions are combined with existing user queries; every constraint becomes one rubric.

Ours, per attempt (seeded by run seed and index): draw ``k`` in ``constraints_per_prompt`` and split it
into pool constraints (ids and arguments drawn here, non-conflicting by :data:`CONFLICT_GROUPS`) and
``new`` constraints the teacher invents. The teacher gets the base query (or invents one), the pool
constraints in words and as JSON, and returns one JSON object: the instruction, each new constraint with
a ``def check(response: str) -> bool`` checker, and a reference answer. Pool constraints keep their
hand-written checker (a ``code`` rubric: asking the teacher to re-implement them would only add a weaker
copy); teacher checkers become ``code_src`` rubrics. The row is kept only when the reference passes every
pool checker and every teacher checker compiles and passes in the sandbox; all drops are counted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

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
)
from data_prep.schema import PromptRow
from data_prep.teacher import TeacherError
from rewards.if_constraints import CONSTRAINTS, RELATIONS, check_constraint, get_constraint
from rewards.instruction_following import validate_rubrics

# Constraints sharing a group cannot hold together (or would make each other's checker ambiguous):
# one letter case, one language, one overall layout, one thing at the start and one at the end.
CONFLICT_GROUPS: dict[str, frozenset[str]] = {
    "case": frozenset(
        {
            "change_case:english_capital",
            "change_case:english_lowercase",
            "change_case:all_lowercase",
            "change_case:capital_word_frequency",
            "detectable_format:multiple_sections",  # the section word is matched case-sensitively
            "detectable_format:constrained_response",  # so are the fixed answer options
        }
    ),
    "language": frozenset(
        {"language:response_language", "change_case:english_capital", "change_case:english_lowercase"}
    ),
    "layout": frozenset(
        {
            "detectable_format:json_format",
            "detectable_format:constrained_response",
            "combination:two_responses",
            "length_constraints:number_paragraphs",
            "length_constraints:nth_paragraph_first_word",
            "detectable_format:multiple_sections",
        }
    ),
    "opening": frozenset(
        {
            "detectable_format:json_format",
            "startend:quotation",
            "startend:start_checker",
            "detectable_format:constrained_response",
        }
    ),
    "closing": frozenset(
        {"detectable_format:json_format", "startend:end_checker", "detectable_format:constrained_response"}
    ),
}
# repeat_prompt's argument is the final instruction itself, which only exists after the teacher wrote it.
SYNTH_IDS: tuple[str, ...] = tuple(c for c in CONSTRAINTS if c != "combination:repeat_prompt")
WORDS = ("analysis", "balance", "journey", "evidence", "harbor", "signal", "lantern", "quarter", "method")
LANGUAGES = ("fr", "de", "es", "it", "pt")
END_PHRASES = ("Is there anything else I can help with?", "Let me know if this helps.", "That is all.")
START_PHRASES = ("Certainly.", "Here is my answer.", "To begin,")


def conflicts(a: str, b: str) -> bool:
    """Return whether constraints ``a`` and ``b`` share a conflict group."""
    return any(a in group and b in group for group in CONFLICT_GROUPS.values())


def pick_constraints(rng: random.Random, k: int, ids: Sequence[str] = SYNTH_IDS) -> list[str]:
    """Return up to ``k`` pairwise non-conflicting constraint ids drawn from ``ids``."""
    candidates = list(ids)
    rng.shuffle(candidates)
    chosen: list[str] = []
    for cid in candidates:
        if len(chosen) == k:
            break
        if not any(conflicts(cid, c) for c in chosen):
            chosen.append(cid)
    return chosen


def _count(rng: random.Random, at_least: tuple[int, int], less_than: tuple[int, int]) -> tuple[int, str]:
    relation = rng.choice(RELATIONS)
    return rng.randint(*(less_than if relation == "less than" else at_least)), relation


def sample_kwargs(cid: str, rng: random.Random, words: list[str]) -> dict[str, Any]:
    """Return arguments for pool constraint ``cid``; keywords are popped from ``words`` so none repeats."""
    if cid == "keywords:existence":
        return {"keywords": [words.pop() for _ in range(rng.randint(1, 2))]}
    if cid == "keywords:forbidden_words":
        return {"forbidden_words": [words.pop() for _ in range(rng.randint(1, 2))]}
    if cid == "keywords:frequency":
        n, rel = _count(rng, (1, 3), (3, 6))
        return {"keyword": words.pop(), "frequency": n, "relation": rel}
    if cid == "keywords:letter_frequency":
        n, rel = _count(rng, (3, 10), (40, 80))
        return {"letter": rng.choice("bcdfghklmnprstw"), "let_frequency": n, "let_relation": rel}
    if cid == "language:response_language":
        return {"language": rng.choice(LANGUAGES)}
    if cid == "length_constraints:number_sentences":
        n, rel = _count(rng, (3, 8), (8, 20))
        return {"num_sentences": n, "relation": rel}
    if cid == "length_constraints:number_words":
        n, rel = _count(rng, (50, 200), (150, 400))
        return {"num_words": n, "relation": rel}
    if cid == "length_constraints:number_paragraphs":
        return {"num_paragraphs": rng.randint(2, 5)}
    if cid == "length_constraints:nth_paragraph_first_word":
        n = rng.randint(2, 4)
        return {"num_paragraphs": n, "nth_paragraph": rng.randint(1, n), "first_word": words.pop()}
    if cid == "change_case:capital_word_frequency":
        n, rel = _count(rng, (2, 6), (4, 12))
        return {"capital_frequency": n, "capital_relation": rel}
    simple: dict[str, Any] = {
        "detectable_content:number_placeholders": lambda: {"num_placeholders": rng.randint(1, 3)},
        "detectable_content:postscript": lambda: {"postscript_marker": rng.choice(("P.S.", "P.P.S"))},
        "detectable_format:number_bullet_lists": lambda: {"num_bullets": rng.randint(2, 6)},
        "detectable_format:number_highlighted_sections": lambda: {"num_highlights": rng.randint(1, 3)},
        "detectable_format:multiple_sections": lambda: {
            "section_spliter": rng.choice(("Section", "SECTION", "Part")),
            "num_sections": rng.randint(2, 4),
        },
        "startend:end_checker": lambda: {"end_phrase": rng.choice(END_PHRASES)},
        "startend:start_checker": lambda: {"start_phrase": rng.choice(START_PHRASES)},
    }
    if cid in simple:
        return simple[cid]()
    if cid not in SYNTH_IDS:
        raise ValueError(f"constraint {cid!r} cannot be drawn for synthesis; known: {', '.join(SYNTH_IDS)}")
    return {}


SYSTEM = (
    "You write training prompts for instruction following. Given a base task and constraints, write ONE "
    "natural user request that asks for the base task and states every constraint; you may reword a "
    "constraint but must keep its exact meaning, words and numbers. Then add the requested number of NEW "
    "constraints of your own (format, length, wording or structure) that a program can check and that do "
    f"not contradict the others, and for each new constraint write a checker: `{CHECKER_SIGNATURE}`, a "
    "self-contained Python function using only the standard library, returning True exactly when a "
    "response satisfies that constraint. Finally write a reference response that satisfies every "
    "constraint. Reply with one JSON object and nothing else: "
    '{"instruction": str, "new_constraints": [{"description": str, "checker": str}], "reference": str}'
)
POOL_SPEC_PREFIX = "Pool constraints as JSON (id and arguments): "


class NewConstraint(StrictReply):
    """A constraint the teacher added, with its checker source."""

    description: Text
    checker: Text


class Reply(StrictReply):
    """The teacher's multi-constraint reply."""

    instruction: Text
    new_constraints: list[NewConstraint] = Field(max_length=6)
    reference: Text


def request_text(query: str | None, spec: list[dict[str, Any]], n_new: int) -> str:
    """Return the user message asking the teacher for one multi-constraint instruction."""
    lines = [
        f"Base task: {query}"
        if query
        else "Base task: invent one realistic request (writing, explaining, planning or advice).",
        "Constraints from the pool:",
        *(f"{j}. {get_constraint(c['id']).phrase(**c['kwargs'])}" for j, c in enumerate(spec, 1)),
        POOL_SPEC_PREFIX + json.dumps(spec),
        f"New constraints to add, each with a checker: {n_new}",
    ]
    return "\n".join(lines)


def synthesise_multi_constraint(
    teacher: Any,
    n: int,
    seed: int,
    *,
    constraints_per_prompt: tuple[int, int],
    new_constraints: tuple[int, int],
    queries: Sequence[str] = (),
    constraint_ids: Sequence[str] = SYNTH_IDS,
    temperature: float = 1.0,
    max_tokens: int | None = None,
    workers: int = 4,
    json_schema: bool = True,
) -> SynthesisStep:
    """Return ``n`` attempts' kept rows (family ``if_multi_constraint``) and their drops by reason.

    ``teacher`` is an ``Endpoint``; ``queries`` are base user requests used in turn (none: the teacher
    invents the task); ``json_schema`` sends the reply's schema as ``response_format``. Raises
    ``InfraError`` if the sandbox cannot run the checkers.
    """
    client = client_for(teacher)
    fmt = {"response_format": response_format(Reply)} if json_schema else {}

    def attempt(i: int) -> PromptRow | Drop:
        rng = random.Random(f"if-synthesis:multi_constraint:{seed}:{i}")
        k = rng.randint(*constraints_per_prompt)
        n_new = rng.randint(min(new_constraints[0], k - 1), min(new_constraints[1], k - 1))
        words = rng.sample(WORDS, len(WORDS))
        ids = pick_constraints(rng, k - n_new, constraint_ids)
        spec = [{"id": cid, "kwargs": sample_kwargs(cid, rng, words)} for cid in ids]
        query = queries[i % len(queries)] if queries else None
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": request_text(query, spec, n_new)},
        ]
        try:
            text = client.chat(
                messages, temperature=temperature, max_tokens=max_tokens, include_reasoning=False, **fmt
            )[0]
            reply = parse_reply(text, Reply)
        except TeacherError as exc:
            return Drop("teacher_error", str(exc)[:160])
        except ReplyError as exc:
            return Drop(exc.reason, exc.detail)
        if len(reply.new_constraints) != n_new:
            return Drop(
                "reply_schema", f"asked for {n_new} new constraints, got {len(reply.new_constraints)}"
            )
        failing = [c["id"] for c in spec if not check_constraint(c["id"], reply.reference, c["kwargs"])]
        if failing:
            return Drop("reference_fails_pool_checker", ", ".join(failing))
        problem = checker_drop_reason([c.checker for c in reply.new_constraints], reply.reference)
        if problem:
            return Drop(*problem)
        rubrics = [{"kind": "code", "check": c["id"], "kwargs": c["kwargs"]} for c in spec]
        rubrics += [
            {"kind": "code_src", "source": c.checker, "description": c.description}
            for c in reply.new_constraints
        ]
        return PromptRow(
            id=f"ifmc-syn-{seed}-{i}",
            prompt=[{"role": "user", "content": reply.instruction}],
            label=validate_rubrics(rubrics),
            metadata={
                "reward": "if_rubrics",
                "family": "if_multi_constraint",
                "answer_format": "text",
                "source": "synthesis/multi_constraint",
                "teacher": teacher.model,
                "n_constraints": len(rubrics),
                "pool_constraints": ids,
            },
        )

    return run_items("multi_constraint", n, attempt, workers)
