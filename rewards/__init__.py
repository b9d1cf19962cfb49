"""Rewards: one contract (`rewards.contract`) and one registry shared by every stage and both backends.

Rewards register themselves by name when their module is imported; the table below says which module
provides each name, so `get_reward(name)` imports only what a stage needs.
"""

from rewards.contract import (
    RewardRequest,
    RewardResult,
    declare_provider,
    get_reward,
    register_reward,
    registered_rewards,
    safe_score,
)

for _name, _module in {
    "sft_format": "rewards.sft_format",
    "reasoning": "rewards.reasoning",
    "math": "rewards.reasoning",
    "puzzle": "rewards.reasoning",
    "science": "rewards.reasoning",
    "code": "rewards.code_reward",
    "if_rubrics": "rewards.instruction_following",
    "awm_verifier": "infra.agents.awm.reward",  # needs the episode's database: the awm environment scores
    "harbor_tests": "infra.agents.harbor.reward",  # replays execute_command calls, then the task's tests
    "search_judge": "rewards.search_agent",  # gated judge score of a search-agent episode (stage 06)
    "rlhf_rm": "rewards.rlhf",  # raw reward-model score, length penalty when positive (stage 07)
    "search_accuracy": "rewards.search_agent",  # the judge's grade alone: stage 06's held-out accuracy
    "preference_rule": "rewards.preference_rule",  # stage 07 embedded: the rule its reward model imitates
    "answer_words": "rewards.preference_rule",  # stage 07: final-answer length on held-out prompts
    "kw_rubric": "rewards.knowledge_work",  # stage 08: weighted rubric over the deliverables (code + judge)
}.items():
    declare_provider(_name, _module)

__all__ = [
    "RewardRequest",
    "RewardResult",
    "declare_provider",
    "get_reward",
    "register_reward",
    "registered_rewards",
    "safe_score",
]
