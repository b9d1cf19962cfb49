"""Held-out plateau selection: the rule that picks which SFT checkpoint a recipe carries forward.

One rule for both scales: the embedded SFT trainer applies it while it trains, the cluster applies it after
slime's SFT run to the HF snapshots it saved (``infra.production.sft_select``). A held-out loss lower than
every earlier one is a new best (its step is the selection); ``patience`` evaluations in a row without a
new best mean the loss has reached its plateau, and later checkpoints need not be scored.
"""

from __future__ import annotations

from typing import Any


def observe_heldout(state: dict[str, Any], step: int, loss: float, patience: int | None) -> bool:
    """Record the held-out ``loss`` measured at ``step`` in ``state``; return True for a new best.

    ``state`` keys (created on first use): ``best``, ``selected_step``, ``evals_since_best`` and, once
    ``patience`` evaluations in a row brought no new best, ``plateau = True``. ``patience=None`` never
    declares a plateau.
    """
    new_best = state.get("best") is None or loss < state["best"]
    if new_best:
        state.update(best=loss, selected_step=step, evals_since_best=0)
    else:
        state["evals_since_best"] = state.get("evals_since_best", 0) + 1
    if patience is not None and state["evals_since_best"] >= patience:
        state["plateau"] = True
    return new_best
