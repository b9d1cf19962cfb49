"""Reward of General Agent RL: the task's own code verifier on the episode's final database, binary.

``awm_verifier`` (``infra.agents.awm.reward``): ``verify_task_completion(initial_db, final_db,
final_answer)`` runs in the sandbox on read-only copies with a timeout and returns 1.0 for ``complete``,
0.0 otherwise; a verifier that cannot run (crash, timeout, missing database) is ``aborted``, never 0.
Paper §3.5: no LLM judge, no format reward, no step-level reward. Inside an episode the ``awm``
environment calls it with the episode's final database (``AwmEnv.score``).
"""

from __future__ import annotations

from infra.agents.awm.reward import awm_verifier as reward

__all__ = ["reward"]
