"""Math-Verify equivalence of a canonical answer and its gold label, run inside a worker process.

The functions here execute in :class:`rewards.timeout_pool.TimeoutPool` workers; the host enforces the
deadline, so math-verify's own ``signal.alarm`` timeouts are disabled (``parsing_timeout=None``,
``timeout_seconds=None``), which also makes the functions safe to call from any thread. The gold label is
parsed once per worker and cached: every rollout of a prompt compares against the same gold.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from math_verify import parse, verify

# math-verify warns on every call that timeouts are disabled; the pool's deadline replaces them.
logging.getLogger("math_verify").setLevel(logging.ERROR)
_GOLD_CACHE_SIZE = 65536


def _parse_boxed(text: str) -> list[Any]:
    return parse(f"\\boxed{{{text}}}", parsing_timeout=None)


@lru_cache(maxsize=_GOLD_CACHE_SIZE)
def parsed_gold(gold: str) -> tuple[Any, ...]:
    """Return math-verify's parse of ``gold`` (cached per process)."""
    return tuple(_parse_boxed(gold))


def verify_answer(gold: str, answer: str) -> tuple[bool, str]:
    """Return ``(equivalent, note)``; note is ``gold_unparsable``/``answer_unparsable`` or ``""``."""
    gold_parsed = list(parsed_gold(gold))
    if not gold_parsed:
        return False, "gold_unparsable"
    answer_parsed = _parse_boxed(answer)
    if not answer_parsed:
        return False, "answer_unparsable"
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None)), ""


def gold_cache_info() -> tuple[int, int]:
    """Return ``(hits, misses)`` of this process's gold cache (for tests and logs)."""
    info = parsed_gold.cache_info()
    return info.hits, info.misses
