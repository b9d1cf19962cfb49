"""Split an RL update's episodes into training micro-batches by episode count and by token budget.

Production packs sequences per GPU up to ``--max-tokens-per-gpu`` (slime's dynamic batch size); the
embedded trainer pads instead of packing, so its budget counts the padded tokens a forward holds:

* whole-sequence forward: ``episodes × longest (prompt + response)``;
* shared-prompt forward: each run of consecutive episodes with the same prompt encodes that prompt once,
  so ``sum of those prompts + episodes × longest response``.

Episodes stay in order (a group's samples stay adjacent, so the shared-prompt forward still shares), and
an episode that alone exceeds the budget trains alone. Hand-written: TRL and transformers batch by a
fixed count only.
"""

from __future__ import annotations

from collections.abc import Sequence


def padded_tokens(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], shared: bool) -> int:
    """Tokens a forward over these episodes holds after padding (see the module docstring)."""
    if not responses:
        return 0
    if not shared:
        return len(responses) * max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    distinct = sum(len(p) for i, p in enumerate(prompts) if i == 0 or p != prompts[i - 1])
    return distinct + len(responses) * max(len(r) for r in responses)


def micro_batches(
    idx: Sequence[int],
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    max_episodes: int | None = None,
    max_tokens: int | None = None,
    shared_prompt: bool = False,
) -> list[list[int]]:
    """Split ``idx`` (indices into ``prompts``/``responses``) in order into micro-batches under both caps.

    ``None`` lifts a cap; with neither, all of ``idx`` is one micro-batch.
    """
    out: list[list[int]] = []
    current: list[int] = []
    for i in idx:
        candidate = [*current, i]
        too_many = max_episodes is not None and len(candidate) > max_episodes
        too_long = max_tokens is not None and (
            padded_tokens([prompts[j] for j in candidate], [responses[j] for j in candidate], shared_prompt)
            > max_tokens
        )
        if current and (too_many or too_long):
            out.append(current)
            candidate = [i]
        current = candidate
    if current:
        out.append(current)
    return out
