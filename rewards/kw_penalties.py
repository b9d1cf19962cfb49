"""Stage 08's group-level penalties (UM, RL section): their constants, defaults and one-group entry point.

The arithmetic already lives where every group-aware rule plugs in: ``ultramarine`` shaping in
:mod:`infra.objectives.shaping` (:func:`~infra.objectives.shaping.ultramarine_shaping`), which both
backends call between the reward and the advantages (``rl.shaping: {kind: ultramarine, params: {...}}``;
``infra.objectives.group_view.shaping_kwargs`` feeds it trained tokens, turns and invalid tool calls).
This module does not repeat it; it adds the validated constants and a plain entry point:

* :class:`KWPenaltyParams`: the eleven constants with stage-08 defaults, validated
  (``extra="forbid"``); :meth:`KWPenaltyParams.shaping` is the recipe's ``rl.shaping`` block;
* :func:`apply_penalties`: one group of :class:`EpisodeStats` in, shaped rewards out, through the same
  ``shape_group("ultramarine", ...)`` call the trainers make.

Per episode with T generated tokens, n turns and m invalid tool calls (the paper's prose, term by term):
faded reward ``r * (1 - f(n))`` for ``r > 0`` with ``f(n) = clip((n - n0) / (nmax - n0), 0, 1)``; tool
penalty ``min(lam * m, c_tool)``; output penalty ``min(alpha * max(T - B, 0) / L, c_out)``; tail penalty
``eta * clip((T - B_tail) / L_tail, 0, 1)``; the output and tail penalties apply only when the group's mean
faded reward is positive.

The paper names the symbols but gives no values; every default below is this project's choice, sized
for a rubric score in [0, 1] and multi-turn trajectories of a few tens of thousands of generated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator


class KWPenaltyParams(BaseModel):
    """The penalty constants (paper symbols; defaults are ours, not the paper's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # turn fade: positive reward kept whole up to n0 turns, faded linearly to 0 at nmax (the turn cap)
    n0: int = Field(default=40, ge=0, description="Turns before the fade starts.")
    nmax: int = Field(default=100, ge=1, description="Turn count where positive reward reaches 0.")
    # invalid tool calls (malformed or to a tool that does not exist): 0.05 each, at most 0.25 in total
    lam: float = Field(default=0.05, ge=0, description="Penalty per invalid tool call (lambda).")
    c_tool: float = Field(default=0.25, ge=0, description="Cap on the total invalid-call penalty.")
    # output: free up to 32K generated tokens, then 0.1 per further 32K, at most 0.2
    B: int = Field(default=32_768, ge=0, description="Generated-token allowance.")
    alpha: float = Field(default=0.1, ge=0, description="Output penalty per L tokens beyond B.")
    L: int = Field(default=32_768, ge=1, description="Token scale of the output penalty's rate alpha/L.")
    c_out: float = Field(default=0.2, ge=0, description="Cap on the output penalty.")
    # extreme-length tail: from 96K generated tokens, rising to eta = 0.3 over the next 32K
    B_tail: int = Field(default=98_304, ge=0, description="Where the extreme-length penalty starts.")
    L_tail: int = Field(default=32_768, ge=1, description="Tokens over which it rises to eta.")
    eta: float = Field(default=0.3, ge=0, description="Cap of the extreme-length penalty.")

    @model_validator(mode="after")
    def _ordered(self) -> KWPenaltyParams:
        if self.nmax <= self.n0:
            raise ValueError(f"nmax ({self.nmax}) must exceed n0 ({self.n0})")
        if self.B_tail < self.B:
            raise ValueError(f"B_tail ({self.B_tail}) must not be below the allowance B ({self.B})")
        return self

    def as_params(self) -> dict[str, float]:
        """The constants as ``ultramarine`` shaping params (``rl.shaping.params``)."""
        from infra.objectives.shaping import ULTRAMARINE_KEYS  # lazy: infra.objectives imports torch

        return {k: float(getattr(self, k)) for k in ULTRAMARINE_KEYS}

    def shaping(self) -> dict[str, object]:
        """The recipe's ``rl.shaping`` block that applies these penalties in both backends."""
        return {"kind": "ultramarine", "params": self.as_params()}


class EpisodeStats(BaseModel):
    """What the penalties read about one episode of a group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reward: float = Field(description="The raw reward (kw_rubric score).")
    output_tokens: int = Field(ge=0, description="Model-generated tokens across the trajectory.")
    turns: int = Field(ge=0, description="Agent turns.")
    invalid_tool_calls: int = Field(default=0, ge=0, description="Malformed calls and calls to no tool.")


def apply_penalties(group: Sequence[EpisodeStats], params: KWPenaltyParams | None = None) -> list[float]:
    """Return the penalised rewards of one group (one task's episodes, aborted ones already removed)."""
    from infra.objectives.shaping import shape_group

    if not group:
        raise ValueError("apply_penalties: empty group")
    p = params or KWPenaltyParams()
    return shape_group(
        "ultramarine",
        [e.reward for e in group],
        output_tokens=[e.output_tokens for e in group],
        turns=[e.turns for e in group],
        invalid_tool_calls=[e.invalid_tool_calls for e in group],
        params=p.as_params(),
    )
