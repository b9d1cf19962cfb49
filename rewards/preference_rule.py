"""The hidden preference rule of stage 07's embedded scale, as a reward (held-out scoring only).

Stage 07 trains against a learned reward model; this reward is the rule that model was trained to imitate
(the tiny chat prompts of :mod:`data_prep.tiny_tasks.chat`), so the held-out ``rlhf_rule_score`` measures what
the "human" wanted rather than what the reward model learned. It is never a training reward.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.contract import RewardRequest, RewardResult, register_reward

MAX_WORDS = 12  # a longer answer is not "concise"
#: topic word -> (its subject phrase, things true of it). Words of a fact are matched whole.
TOPICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sun": ("the sun", ("is a hot star", "gives us light", "rises in the east")),
    "cat": ("a cat", ("is a small pet", "has soft fur", "likes to sleep")),
    "river": ("a river", ("is moving water", "flows to the sea", "has fish")),
    "tree": ("a tree", ("is a tall plant", "has green leaves", "grows from a seed")),
    "book": ("a book", ("has many pages", "tells a story", "is made of paper")),
    "moon": ("the moon", ("shines at night", "goes around the earth", "has craters")),
    "dog": ("a dog", ("is a loyal pet", "likes to run", "can bark")),
    "car": ("a car", ("has four wheels", "drives on the road", "needs fuel")),
    "bird": ("a bird", ("can fly", "builds a nest", "has feathers")),
    "house": ("a house", ("is a home", "has a roof", "keeps us warm")),
}
ARTIFACTS = re.compile(r"[\"*\[\]]|\bthe end\b|^ok\b|\bp\.s\.", re.IGNORECASE)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _has_phrase(words: list[str], phrase: str) -> bool:
    p = phrase.split()
    return any(words[i : i + len(p)] == p for i in range(len(words) - len(p) + 1))


def final_answer(response: str) -> str:
    """The text after the thinking block; an unclosed ``<think>`` leaves no answer."""
    if "<think>" in response and "</think>" not in response:
        return ""
    return response.split("</think>")[-1].strip()


def rule_checks(topic: str, response: str) -> dict[str, bool]:
    """The hidden rule's checks of ``response`` to a prompt about ``topic``."""
    answer = final_answer(response)
    words = _words(answer)
    _, facts = TOPICS[topic]
    others = [f for t, (_, fs) in TOPICS.items() if t != topic for f in fs]
    content = [w for w in words if len(w) > 3]  # "the", "is", "a" may repeat
    return {
        "answered": bool(words),
        "on_topic": topic in words,
        "true_fact": any(_has_phrase(words, f) for f in facts),
        "no_wrong_fact": not any(_has_phrase(words, f) for f in others),
        "plain": ARTIFACTS.search(answer) is None,
        "concise": 0 < len(words) <= MAX_WORDS and len(set(content)) == len(content),
    }


def hidden_rule_score(topic: str, response: str) -> float:
    """Score in [0, 1]: 0 unless the answer is on topic, else the share of the four quality checks met."""
    c = rule_checks(topic, response)
    if not (c["answered"] and c["on_topic"]):
        return 0.0
    return (c["true_fact"] + c["no_wrong_fact"] + c["plain"] + c["concise"]) / 4


def topic_of(label: Any) -> str:
    """The topic of a row label; ValueError naming the label otherwise."""
    topic = label.get("topic") if isinstance(label, dict) else None
    if topic not in TOPICS:
        raise ValueError(f"chat label {label!r}: expected {{'topic': one of {sorted(TOPICS)}}}")
    return topic


@register_reward("preference_rule")
def preference_rule(request: RewardRequest) -> RewardResult:
    """Score in [0, 1] by the hidden rule; components are its checks, ``failure`` the first one missed."""
    try:
        topic = topic_of(request.label)
    except ValueError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": str(exc)})
    checks = rule_checks(topic, request.response)
    score = hidden_rule_score(topic, request.response)
    missed = next((name for name, ok in checks.items() if not ok), None)
    return RewardResult(
        score=score,
        parsed=final_answer(request.response)[:200],
        components={name: float(ok) for name, ok in checks.items()},
        failure=None if score >= 1.0 else missed,
    )


@register_reward("answer_words")
def answer_words(request: RewardRequest) -> RewardResult:
    """Held-out length diagnostic (not a training reward): the words of the final answer, thinking
    excluded (0 when there is none); stage 07 reports it with and without its length penalty."""
    words = len(final_answer(request.response).split())
    return RewardResult(score=float(words), components={"answer_words": float(words)})
