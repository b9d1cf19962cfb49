"""Tiny open-ended chat prompts and the hidden preference rule behind stage 07's embedded reward model.

RLHF needs prompts without a verifier and a learned reward. At this scale the prompts are short requests
about ten everyday topics ("Tell me about the moon.") in templates the SFT mix never used, and the
"human preference" is a rule written in code, hidden from the policy: a good answer is on topic (names its
subject), states something true about it, says nothing true only of another topic, carries no formatting
the user did not ask for (quotes, ``*stars*``, ``[placeholders]``, "the end"), and is short and not
repetitive (:mod:`rewards.preference_rule` scores it in [0, 1]). :func:`candidate_answers` writes
answers of every kind (good, off topic, wrong, decorated, rambling, repetitive, and off task: another
skill's format such as ``\\boxed{1}``, which an SFT model trained on many skills drifts into) that
:mod:`data_prep.tiny_tasks.preference_pairs` pairs and labels with the rule to train the Bradley–Terry
reward model the policy is then trained against. Reward hacking shows as the reward model's score rising
while this rule's does not.
"""

from __future__ import annotations

import random

from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user
from rewards.preference_rule import TOPICS, final_answer, hidden_rule_score, rule_checks, topic_of

FAMILY = "rlhf_chat"
RULE_METRIC = "rlhf_rule_score"  # the hidden rule on held-out prompts (the stage's target)
RM_METRIC = "rlhf_rm_score"  # the reward model's raw score on the same prompts (what RL optimizes)
RULE_REWARD = "preference_rule"

TEMPLATES = (
    "Tell me about {s}.",
    "What is {s} like?",
    "Say something about {s}.",
    "Write one line about {s}.",
    "Can you explain {s}?",
    "I want to know about {s}.",
    "Talk about {s}.",
    "Give me a fact about {s}.",
)
HELDOUT_SHARE = 4  # one (template, topic) pair in four is held out
NOISE = ("gy", "oxy", "appears", "times", "1", "e")  # word-salad fragments of an undertrained model
FILLERS = ("i think", "you know", "well", "in fact", "so yes", "really")


def _cells(split: str) -> list[tuple[str, str]]:
    """The (template, topic) cells of ``split``, in a fixed order."""
    cells = [(tpl, t) for tpl in TEMPLATES for t in TOPICS]
    held = {c for i, c in enumerate(cells) if i % HELDOUT_SHARE == HELDOUT_SHARE - 1}
    return [c for c in cells if (c in held) == (split == "heldout")]


def _task(task_id: str, template: str, topic: str) -> TinyTask:
    subject, facts = TOPICS[topic]
    return TinyTask(
        id=task_id,
        prompt=user(template.format(s=subject)),
        label={"topic": topic},
        metadata={"reward": RULE_REWARD, "family": FAMILY, "source": "tiny_tasks/chat", "template": template},
        reasoning=topic,
        answer=f"{subject} {facts[0]}.",
    )


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` chat prompts of ``split`` (cells shuffled by ``seed``, cycling with a ``-rK`` suffix)."""
    check_split(split)
    cells = _cells(split)
    rng_for("chat", seed, split).shuffle(cells)
    out = []
    for i in range(n):
        tpl, topic = cells[i % len(cells)]
        suffix = f"-r{i // len(cells)}" if i >= len(cells) else ""
        out.append(_task(f"chat-{split}-{TEMPLATES.index(tpl)}-{topic}{suffix}", tpl, topic))
    return out


def _off_task(rng: random.Random, topic: str) -> str:
    """An answer in another skill's format (what an SFT model trained on many tasks drifts into)."""
    word = rng.choice([*TOPICS, "neutron", "Mars", "sog", "apple"])
    return rng.choice(
        [
            f"\\boxed{{{rng.randint(0, 20)}}}",
            f"\\boxed{{{word}}}",
            f"```python\ndef f(x):\n    return x + {rng.randint(1, 9)}\n```",
            f"{rng.randint(2, 9)} * {rng.randint(2, 9)} = {rng.randint(4, 81)}.",
            f"it is {word}.",
            " ".join(rng.choice(NOISE) for _ in range(rng.randint(2, 6))),
            f"{topic}",
        ]
    )


def candidate_answers(topic: str, rng: random.Random, k: int) -> list[str]:
    """``k`` final answers (no thinking) of every quality to a prompt about ``topic``."""
    subject, facts = TOPICS[topic]
    other = rng.choice([t for t in TOPICS if t != topic])
    o_subject, o_facts = TOPICS[other]
    kinds = [
        lambda: f"{subject} {rng.choice(facts)}.",
        lambda: f"{subject} {rng.choice(facts)} and {rng.choice(facts)}.",
        lambda: f"{subject} {rng.choice(o_facts)}.",  # on topic, wrong
        lambda: f"{o_subject} {rng.choice(o_facts)}.",  # off topic
        lambda: f'"{subject} {rng.choice(facts)}."',
        lambda: f"{subject} is *{rng.choice(facts).split()[-1]}* [name].",
        lambda: f"{subject} {rng.choice(facts)}. the end",
        lambda: f"ok {subject} {rng.choice(facts)}.",
        lambda: f"{rng.choice(FILLERS)} {subject} {' '.join(rng.sample(facts, 3))} {rng.choice(FILLERS)}.",
        lambda: " ".join([subject, rng.choice(facts)] + [rng.choice(facts)] * 2) + ".",
        lambda: f"{subject} is {subject} is {subject}.",
        lambda: f"{subject}.",
        lambda: _off_task(rng, topic),
        lambda: _off_task(rng, topic),
        lambda: _off_task(rng, topic),
    ]
    return [rng.choice(kinds)() for _ in range(k)]


__all__ = [
    "FAMILY",
    "RM_METRIC",
    "RULE_METRIC",
    "RULE_REWARD",
    "TOPICS",
    "candidate_answers",
    "final_answer",
    "generate",
    "hidden_rule_score",
    "rule_checks",
    "topic_of",
]
