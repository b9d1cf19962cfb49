"""Reward of RLHF: the reward model's raw score of the final answer, length-penalised when positive (§3.8).

``rlhf_rm`` (:mod:`rewards.rlhf`): thinking is stripped, the prompt and answer are rendered with the reward
model's chat template and scored — by SGLang's native ``/classify`` (``RUFUS_RM_URL``, production) or by a
local transformers classifier (``metadata.reward_model_path``, the embedded stand-in). A positive raw score
loses ``coef × answer tokens / budget_tokens`` (``metadata.length_penalty``); a negative one is kept as is.
An unreachable reward model makes the result ``aborted`` (removed from its group), never 0.
"""

from __future__ import annotations

from rewards import get_reward

reward = get_reward("rlhf_rm")

__all__ = ["reward"]
