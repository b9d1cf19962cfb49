"""Tool usage per trajectory (RA Table 19's columns), counted from the loop's readable transcripts.

:func:`tool_call_counts` reads one transcript (``role`` / ``tool_calls: [{name, …}]``, as
:func:`infra.agents.loop.transcript_of` writes it and the harnesses store it); :func:`usage_block` pools
the counts of scored episodes into means. The production search harness
(:mod:`eval.harnesses.search_tool_usage`) and the embedded held-out evaluation
(:mod:`infra.embedded.evaluate`) both count with it. A few lines over our own transcript shape, so no library.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

ITERS = "iters"  # assistant turns with at least one tool call (Table 19's "Iters")


def tool_call_counts(transcript: list[dict[str, Any]]) -> tuple[int, Counter[str]]:
    """Return ``(iters, calls by tool name)`` of one transcript; ValueError names a malformed entry.

    Every call the model made counts under its name, refused or failed ones included; a turn that
    calls no tool (a final answer, a scratchpad reply) is not an iteration.
    """
    iters, calls = 0, Counter[str]()
    for i, entry in enumerate(transcript):
        if not isinstance(entry, dict) or "role" not in entry:
            raise ValueError(f"transcript entry {i} has no role")
        made = (entry.get("tool_calls") or []) if entry["role"] == "assistant" else []
        if not isinstance(made, list) or not all(isinstance(c, dict) and "name" in c for c in made):
            raise ValueError(f"transcript entry {i}: tool_calls is not a list of named calls")
        iters += bool(made)
        calls.update(str(c["name"]) for c in made)
    return iters, calls


def mean_or_none(values: list[int]) -> float | None:
    """The mean of ``values``, None for none (a split no trajectory falls in is not 0)."""
    return sum(values) / len(values) if values else None


def usage_block(episodes: Iterable[tuple[bool, int, Counter[str] | dict[str, int]]]) -> dict[str, Any]:
    """Pool ``(correct, iters, calls by name)`` of scored episodes: means per trajectory.

    ``calls`` holds every tool name any episode called (an episode that did not call it counts 0);
    ``iters_correct`` / ``iters_wrong`` split ``iters`` by the verdict, None when no episode has it.
    """
    rows = [(bool(ok), int(iters), Counter(calls)) for ok, iters, calls in episodes]
    names = sorted({name for _, _, calls in rows for name in calls})
    return {
        "trajectories": len(rows),
        "correct": sum(ok for ok, _, _ in rows),
        ITERS: mean_or_none([iters for _, iters, _ in rows]),
        "calls": {name: mean_or_none([calls[name] for _, _, calls in rows]) for name in names},
        "iters_correct": mean_or_none([iters for ok, iters, _ in rows if ok]),
        "iters_wrong": mean_or_none([iters for ok, iters, _ in rows if not ok]),
    }
