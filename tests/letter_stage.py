"""A complete stage folder written by tests (not a test module): the letter game.

It brings its own tiny task family and held-out metric, reward and environment (``env.py``,
``reward.py``, ``data_prep.py``, ``launch.yaml``, ``README.md``). Tests get one copy per session through
the ``letter_stage`` fixture (``conftest.py``): a stage file registers names on import, so every test
must load the same files.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

ENV_PY = '''
"""The letter game: the stage's tiny task family, held-out metric and environment."""
from data_prep.tiny_tasks import register_family, register_metric
from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user
from infra.environments import register_environment
from infra.environments.single_turn import SingleTurnEnvironment

ROLLOUTS: list[int] = []


def letter_tasks(n, seed, split="train"):
    check_split(split)
    rng = rng_for("letter_game", split, seed)
    out = []
    for i in range(n):
        letter = rng.choice("abcde")
        out.append(TinyTask(
            id=f"letter-{split}-{seed}-{i}", prompt=user(f"Say the letter {letter} ({split} {i})."),
            label=letter, metadata={"reward": "letter_match", "family": "letter_game"},
            reasoning="Easy.", answer=letter,
        ))
    return out


register_family("letter_game", letter_tasks)
register_metric("letter_acc", ("letter_game",), "Share of answers that contain the asked letter.")


@register_environment("counting_single_turn")
class CountingEnvironment(SingleTurnEnvironment):
    """Single-turn, counting the rows it rolls out (so the test sees that this class ran)."""

    def rollout(self, policy, rows, n, sampling):
        ROLLOUTS.append(len(rows) * n)
        return super().rollout(policy, rows, n, sampling)
'''

REWARD_PY = '''
"""Reward of the letter game: 1 when the response contains the asked letter."""
from rewards.contract import RewardRequest, RewardResult, register_reward


@register_reward("letter_match")
def reward(request: RewardRequest) -> RewardResult:
    ok = str(request.label) in request.response.rsplit("</think>", 1)[-1]
    return RewardResult(score=float(ok), failure=None if ok else "wrong")
'''

DATA_PREP_PY = '''
"""Data prep of the letter game: generated rows, screened against the held-out set."""
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from data_prep.rl_stage import prepare_prompts, screen_against_heldout
from data_prep.tiny_tasks import generate
from infra.recipe import import_stage_file

import_stage_file(Path(__file__).with_name("env.py"))


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    train_tasks: int = 64
    heldout_per_metric: int = 16


def _rows(params, seed, heldout, manifest):
    tasks = generate("letter_game", params.train_tasks, seed)
    tasks = screen_against_heldout(tasks, heldout, manifest)
    return [t.prompt_row() for t in tasks]


def prepare(ctx):
    return prepare_prompts(ctx, "rl_prompts:letter_game", Params, [Path(__file__)], _rows,
                           lambda p, h, m: _rows(p, ctx.seed, h, m))
'''

LAUNCH = {
    "name": "90_letter_game",
    "title": "Letter game (test stage)",
    "kind": "rl",
    "paper": {"source": "example", "section": "-"},
    "reward": "letter_match",
    "data": {"train_tasks": 64, "heldout_per_metric": 16},
    "optimizer": {"lr": 0.003},
    "rl": {
        "environment": {"name": "counting_single_turn"},
        "rollout": {
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "max_response_tokens": 6,
            "num_rollouts": 3,
        },
        "policy": {"estimator": "grpo"},
    },
    "eval": {"targets": ["letter_acc"], "samples_per_prompt": 1, "temperature": 1.0},
    "production": {"nodes": 1},
}


def write_letter_stage(root: Path) -> Path:
    """Write the stage folder under ``root`` and return it."""
    folder = root / "my_stages" / "90_letter_game"
    folder.mkdir(parents=True)
    for name, text in (("env.py", ENV_PY), ("reward.py", REWARD_PY), ("data_prep.py", DATA_PREP_PY)):
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    (folder / "launch.yaml").write_text(yaml.safe_dump(LAUNCH, sort_keys=False))
    (folder / "README.md").write_text("# 90 · Letter game\n\nA test stage: say the asked letter.\n")
    return folder
