"""The ``awm_verifier`` reward: an AWM task's own code verifier on the episode's final database, binary.

Stage 04's reward (paper §3.5: no judge, no format or step reward). Inside an episode the ``awm``
environment calls it through :meth:`infra.agents.awm.env.AwmEnv.score`; called directly, the request
names the episode in ``metadata``: ``awm_release`` (release folder), ``scenario``, ``task_idx`` and
``final_db_path`` (a SQLite file holding the episode's final state). The verifier runs in the sandbox on
read-only copies with a timeout; anything that keeps it from running is ``aborted``, never a 0.
"""

from __future__ import annotations

from pathlib import Path

from rewards.contract import RewardRequest, RewardResult, register_reward


def _aborted(why: str) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure="environment", details={"error": why})


@register_reward("awm_verifier")
def awm_verifier(request: RewardRequest) -> RewardResult:
    """Return 1.0 when the task's verifier says ``complete`` on the final database, else 0.0."""
    from infra.agents.awm.env import runtime

    meta = request.metadata
    missing = [k for k in ("awm_release", "scenario", "task_idx", "final_db_path") if k not in meta]
    if missing:
        return _aborted(f"awm_verifier needs metadata keys {missing} (the awm environment scores episodes)")
    try:
        rt = runtime(str(Path(str(meta["awm_release"])).resolve()))
        scenario = rt.scenario(str(meta["scenario"]))
        code = scenario.verifiers.get(int(meta["task_idx"]))
        final = Path(str(meta["final_db_path"])).read_bytes()
    except (OSError, KeyError, ValueError) as exc:
        return _aborted(f"awm_verifier: {exc}")
    if code is None:
        return _aborted(f"scenario {scenario.name!r} task {meta['task_idx']} has no verifier")
    return rt.verifier().verify(code, scenario.database(), final, request.response)
