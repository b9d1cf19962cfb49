"""Tiny science QA: a fixed offline fact pool asked through paraphrased templates, with answer options.

Each fact is a short subject phrase and its reference answer. A question is one template applied to a
fact plus three shuffled options (the answer and two distractors of the same kind, numeric or word),
like a miniature GPQA item; the answer is written out (not a letter) and scored by the science reward's
fuzzy match. Which (fact, template) pairs are held out is fixed by a hash, so a held-out question is
never a training question, while its fact is seen in training under other phrasings.
"""

from __future__ import annotations

import hashlib

from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user

FACTS: tuple[tuple[str, str], ...] = (
    ("the chemical symbol for gold", "Au"),
    ("the chemical symbol for iron", "Fe"),
    ("the chemical symbol for sodium", "Na"),
    ("the gas plants take in", "carbon dioxide"),
    ("the gas we need to breathe", "oxygen"),
    ("the gas that fills most of the air", "nitrogen"),
    ("the red planet", "Mars"),
    ("the largest planet", "Jupiter"),
    ("the planet with bright rings", "Saturn"),
    ("the planet closest to the sun", "Mercury"),
    ("the star at the center of our solar system", "sun"),
    ("the force that pulls things down", "gravity"),
    ("the part of a cell that holds DNA", "nucleus"),
    ("the organ that pumps blood", "heart"),
    ("the unit of electric current", "ampere"),
    ("the unit of force", "newton"),
    ("the unit of energy", "joule"),
    ("the unit of power", "watt"),
    ("the unit of resistance", "ohm"),
    ("the particle with a negative charge", "electron"),
    ("the particle with no charge", "neutron"),
    ("the process plants use to make food", "photosynthesis"),
    ("the metal that is liquid at room temperature", "mercury"),
    ("the hardest natural material", "diamond"),
    ("the bone of the upper leg", "femur"),
    ("the layer of gas around the earth", "atmosphere"),
    ("the energy of motion", "kinetic energy"),
    ("the smallest unit of life", "cell"),
    ("the rock formed from cooled lava", "igneous rock"),
    ("the organ used for hearing", "ear"),
    ("the study of living things", "biology"),
    ("the molecule that carries genes", "DNA"),
    ("the galaxy we live in", "Milky Way"),
    ("the boiling point of water in Celsius", "100"),
    ("the freezing point of water in Celsius", "0"),
    ("the number of legs of an insect", "6"),
    ("the pH of pure water", "7"),
    ("the number of planets in the solar system", "8"),
    ("the atomic number of carbon", "6"),
    ("the atomic number of hydrogen", "1"),
    ("the atomic number of oxygen", "8"),
    ("the number of bones in an adult human", "206"),
    ("the chemical formula of water", "H2O"),
    ("the charge of a proton", "positive"),
)
TEMPLATES: tuple[str, ...] = (
    "What is {s}?",
    "Name {s}.",
    "Which one is {s}?",
    "Tell me {s}.",
    "Can you name {s}?",
    "Give {s}.",
)
HELDOUT_EVERY = 4  # one (fact, template) pair in four is held out


def is_heldout(fact_index: int, template_index: int) -> bool:
    """Return whether the (fact, template) pair belongs to the held-out split."""
    digest = hashlib.sha256(f"{fact_index}:{template_index}".encode()).digest()
    return digest[0] % HELDOUT_EVERY == 0


def _pairs(split: str) -> list[tuple[int, int]]:
    held = split == "heldout"
    return [(f, t) for f in range(len(FACTS)) for t in range(len(TEMPLATES)) if is_heldout(f, t) == held]


def _kind(answer: str) -> bool:
    return answer.isdigit()


def generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """Return ``n`` science questions for ``split`` (pairs cycle; option order varies with the seed)."""
    check_split(split)
    rng = rng_for("science", split, seed)
    pairs = _pairs(split)
    tasks = []
    for i in range(n):
        if i % len(pairs) == 0:
            rng.shuffle(pairs)
        f, t = pairs[i % len(pairs)]
        subject, answer = FACTS[f]
        others = sorted({a for _, a in FACTS if a.lower() != answer.lower() and _kind(a) == _kind(answer)})
        options = [answer, *rng.sample(others, 2)]
        rng.shuffle(options)
        question = TEMPLATES[t].format(s=subject)
        question = question[0].upper() + question[1:]
        tasks.append(
            TinyTask(
                id=f"science-{split}-{seed}-{i}",
                prompt=user(f"{question} Options: {' / '.join(options)}"),
                label=[answer],
                metadata={
                    "reward": "reasoning",
                    "family": "science",
                    "answer_format": "boxed",
                    "source": "tiny_tasks/facts",
                    "fact": f,
                    "template": t,
                },
                reasoning=f"it is {answer}.",
                answer=f"\\boxed{{{answer}}}",
            )
        )
    return tasks
