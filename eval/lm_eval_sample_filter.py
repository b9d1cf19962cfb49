"""An lm-eval filter step that keeps one of a request's ``repeats`` responses.

``eval.lm_eval_avgk`` copies this file beside the avg@k task YAMLs it writes (lm-eval imports a
``!function`` module from the YAML's folder) and puts ``TakeSample(index=i)`` in front of the task's own
filter pipeline, once per sample index: the harness then scores every one of the k samples with the
task's own filters and metrics in one run.
"""

from __future__ import annotations

from collections.abc import Iterable

from lm_eval.api.filter import Filter


class TakeSample(Filter):
    """Keep response ``index`` of each request as a one-element list (the task's own filters follow)."""

    def __init__(self, index: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.index = int(index)

    def apply(self, resps: Iterable[list], docs: list[dict]) -> list[list]:
        """Return ``[[resps[d][index]] for each document d]``; fewer responses than index+1 is an error."""
        out = []
        for r in resps:
            if len(r) <= self.index:
                raise IndexError(
                    f"TakeSample({self.index}): only {len(r)} responses; the task's repeats is too low"
                )
            out.append([r[self.index]])
        return out
