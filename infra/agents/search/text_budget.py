"""Token counting and clipping of tool texts: the policy's tokenizer when one is given, else ~4 chars a token.

The approximation keeps the clients and the page store usable without a tokenizer (tests, offline tools);
with a tokenizer the cut is exact and uses :func:`infra.agents.tools.truncate_to_tokens`'s marker.
"""

from __future__ import annotations

from typing import Any

#: Characters per token when no tokenizer is given (English prose averages about four).
CHARS_PER_TOKEN = 4


def count_tokens(text: str, tokenizer: Any = None) -> int:
    """Return the token count of ``text`` (exact with ``tokenizer``, else ceil(chars / 4))."""
    if tokenizer is not None:
        return len(tokenizer.encode(text, add_special_tokens=False))
    return -(-len(text) // CHARS_PER_TOKEN)


def clip_tokens(text: str, max_tokens: int, tokenizer: Any = None) -> tuple[str, bool]:
    """Return ``(text, clipped)``: ``text`` cut to at most ``max_tokens`` tokens with a visible marker."""
    if tokenizer is not None:
        from infra.agents.tools import truncate_to_tokens

        return truncate_to_tokens(text, tokenizer, max_tokens)
    limit = CHARS_PER_TOKEN * max_tokens
    if len(text) <= limit:
        return text, False
    marker = f"\n[truncated from about {count_tokens(text)} tokens]"
    return text[: max(limit - len(marker), 0)] + marker, True
