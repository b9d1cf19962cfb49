"""Reward of Search Agent RL: the judge's score of the tagged final answer, behind the paper's gates (§3.7).

``search_judge`` (:mod:`rewards.search_agent`): the judge sees the episode only when the final turn commits
to ``<answer>...</answer>`` (no answer: 0, or -0.1 when a budget ended the episode); a positive reward needs
at least 2 successful tool calls; the judge's score in [0, 1] (partial credit kept) is scaled by 1 - the
failed-call fraction, floored at x0.5; nothing pays without a judged answer. The judge is the training
judge (``RUFUS_SEARCH_JUDGE_*``, RA's Qwen3-32B) unless ``metadata.judge`` or ``RUFUS_SEARCH_JUDGE`` names
another (``deterministic`` at the embedded scale, ``eval`` for the stronger evaluation judge). A judge that
does not answer makes the result ``aborted`` (removed from its group), never 0.
"""

from __future__ import annotations

from rewards import get_reward

reward = get_reward("search_judge")

__all__ = ["reward"]
