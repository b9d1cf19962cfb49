"""Group-aware reward shaping: one group's raw rewards in, shaped rewards out (python floats).

Shaping runs after the reward function and before advantages, one prompt's group at a time, because
every rule here looks at the group (shortest correct length, group mean gate). Plain python keeps the
rules identical in the embedded trainer and in slime's ``--custom-reward-post-process-path`` hook, which
receives python samples; no library offers these paper-specific rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

ULTRAMARINE_KEYS = ("n0", "nmax", "lam", "c_tool", "B", "alpha", "L", "c_out", "B_tail", "L_tail", "eta")


def _same_length(name: str, rewards: Sequence[float], **columns: Sequence[object]) -> list[float]:
    """Return ``rewards`` as floats after checking every column has one entry per sample."""
    if not rewards:
        raise ValueError(f"{name}: empty group")
    for col, values in columns.items():
        if len(values) != len(rewards):
            raise ValueError(f"{name}: {col} has {len(values)} entries for {len(rewards)} rewards")
    return [float(r) for r in rewards]


def _clip01(x: float) -> float:
    """Return ``x`` clipped to [0, 1]."""
    return min(max(x, 0.0), 1.0)


def shortest_correct_length_penalty(
    rewards: Sequence[float],
    lengths: Sequence[int],
    correct: Sequence[bool],
    max_len: int,
    coef: float,
) -> list[float]:
    """Return rewards with a length penalty relative to the group's shortest correct rollout (RA §3.2).

    For a correct sample of length ``l``: ``r - coef * clip((l - Lmin) / (max_len - Lmin), 0, 1)`` where
    ``Lmin`` is the shortest correct length in the group: zero at or below ``Lmin``, ``coef`` at (and
    beyond) ``max_len``. Incorrect samples, and groups with no correct sample, are unchanged.
    """
    r = _same_length("shortest_correct_length_penalty", rewards, lengths=lengths, correct=correct)
    if coef < 0 or max_len <= 0:
        raise ValueError(
            f"shortest_correct_length_penalty: need coef >= 0 and max_len > 0, got {coef}, {max_len}"
        )
    correct_lengths = [n for n, ok in zip(lengths, correct, strict=True) if ok]
    if not correct_lengths:
        return r
    shortest = min(correct_lengths)
    span = max_len - shortest
    out = []
    for reward, n, ok in zip(r, lengths, correct, strict=True):
        if not ok:
            out.append(reward)
            continue
        frac = _clip01((n - shortest) / span) if span > 0 else float(n > shortest)
        out.append(reward - coef * frac)
    return out


def positive_length_penalty(
    rewards: Sequence[float],
    lengths: Sequence[int],
    max_len: int,
    coef: float,
    *,
    start_len: int = 0,
) -> list[float]:
    """Return RLHF rewards with a linear length penalty only where the raw reward is positive (RA §3.8).

    ``r - coef * clip((l - start_len) / (max_len - start_len), 0, 1)`` for ``r > 0``; rewards <= 0 are
    unchanged, so the penalty can never make a bad answer look better by being short. The reward model's
    scores are unbounded, so the penalty is additive and the result is not clamped at 0.
    """
    r = _same_length("positive_length_penalty", rewards, lengths=lengths)
    if coef < 0 or not 0 <= start_len < max_len:
        raise ValueError(
            f"positive_length_penalty: need coef >= 0 and 0 <= start_len < max_len, "
            f"got {coef}, {start_len}, {max_len}"
        )
    span = max_len - start_len
    return [
        x - coef * _clip01((n - start_len) / span) if x > 0 else x for x, n in zip(r, lengths, strict=True)
    ]


def _ultramarine_params(params: Mapping[str, float]) -> dict[str, float]:
    """Return the Ultramarine constants as floats, raising on missing, unknown or degenerate keys."""
    missing = [k for k in ULTRAMARINE_KEYS if k not in params]
    unknown = sorted(set(params) - set(ULTRAMARINE_KEYS))
    if missing or unknown:
        raise ValueError(
            f"ultramarine_shaping params: missing {missing}, unknown {unknown}; need {ULTRAMARINE_KEYS}"
        )
    p = {k: float(params[k]) for k in ULTRAMARINE_KEYS}
    if p["nmax"] <= p["n0"] or p["L"] <= 0 or p["L_tail"] <= 0:
        raise ValueError(f"ultramarine_shaping params need nmax > n0, L > 0 and L_tail > 0, got {p}")
    return p


def ultramarine_shaping(
    rewards: Sequence[float],
    output_tokens: Sequence[int],
    turns: Sequence[int],
    invalid_tool_calls: Sequence[int],
    params: Mapping[str, float],
) -> list[float]:
    """Return Ultramarine-shaped rewards for one group (UM, RL section; penalties on output and turns).

    Per sample with T tokens, n turns and m invalid tool calls:
      fade     f(n) = clip((n - n0) / (nmax - n0), 0, 1); a positive reward becomes ``r * (1 - f(n))``;
      tool     ``min(lam * m, c_tool)``;
      output   ``min(alpha * max(T - B, 0) / L, c_out)``;
      tail     ``eta * clip((T - B_tail) / L_tail, 0, 1)``;
    shaped = faded - tool - g * (output + tail), where the gate g is 1 only when the group's mean faded
    reward (before any penalty) is positive: a group that failed everywhere is not pushed to be shorter.
    The paper's equation is not in our copy of the text; this follows its prose term by term.
    """
    r = _same_length(
        "ultramarine_shaping",
        rewards,
        output_tokens=output_tokens,
        turns=turns,
        invalid_tool_calls=invalid_tool_calls,
    )
    p = _ultramarine_params(params)
    faded = [
        x * (1.0 - _clip01((n - p["n0"]) / (p["nmax"] - p["n0"]))) if x > 0 else x
        for x, n in zip(r, turns, strict=True)
    ]
    gate = 1.0 if sum(faded) / len(faded) > 0 else 0.0
    out = []
    for x, t, m in zip(faded, output_tokens, invalid_tool_calls, strict=True):
        tool = min(p["lam"] * m, p["c_tool"])
        output = min(p["alpha"] * max(t - p["B"], 0.0) / p["L"], p["c_out"])
        tail = p["eta"] * _clip01((t - p["B_tail"]) / p["L_tail"])
        out.append(x - tool - gate * (output + tail))
    return out


def _no_shaping(rewards: Sequence[float], **_: object) -> list[float]:
    """Return the rewards unchanged, as floats."""
    return [float(x) for x in rewards]


_SHAPERS: dict[str, Callable[..., list[float]]] = {
    "none": _no_shaping,
    "shortest_correct_length": shortest_correct_length_penalty,
    "positive_length": positive_length_penalty,
    "ultramarine": ultramarine_shaping,
}


def shape_group(kind: str, rewards: Sequence[float], **kw: object) -> list[float]:
    """Return one group's rewards shaped by the rule named ``kind`` (see ``_SHAPERS``)."""
    try:
        fn = _SHAPERS[kind]
    except KeyError:
        raise ValueError(f"unknown shaping kind {kind!r}; choose one of {sorted(_SHAPERS)}") from None
    return fn(rewards, **kw)
