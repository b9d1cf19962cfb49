"""Preference pairs labelled by the hidden rule, and the embedded reward model trained on them (cached).

For each chat prompt of the train split, :func:`data_prep.tiny_tasks.chat.candidate_answers` writes
answers of every quality; two answers the hidden rule scores differently make a pair, the better one
"chosen", as a rater following the rule would label it (ties are not pairs). Pairs from held-out prompts
measure the reward model's pairwise accuracy on prompts it never saw. :func:`reward_model_dir` trains the
Bradley–Terry model once per (code, settings) and caches it under the generated-data cache: like the
paper's open Skywork model, one reward model serves every run seed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from data_prep.tiny_tasks import chat
from data_prep.tiny_tasks.common import cache_root, code_key, rng_for
from infra.hashing import sha256_json


def preference_pairs(split: str, pairs: int, seed: int, candidates: int = 6) -> list[dict[str, Any]]:
    """``pairs`` labelled pairs (``prompt``, ``chosen``, ``rejected``, ``margin``) of ``split``'s prompts."""
    rng = rng_for("preference_pairs", seed, split)
    tasks = chat.generate(max(1, pairs // 4), seed, split)
    out: list[dict[str, Any]] = []
    while len(out) < pairs:
        task = tasks[len(out) % len(tasks)]
        topic = task.label["topic"]
        answers = chat.candidate_answers(topic, rng, candidates)
        scored = [(chat.hidden_rule_score(topic, a), a) for a in answers]
        rng.shuffle(scored)
        for (sa, a), (sb, b) in zip(scored[::2], scored[1::2], strict=False):
            if sa != sb and len(out) < pairs:
                (hi, chosen), (lo, rejected) = max((sa, a), (sb, b)), min((sa, a), (sb, b))
                out.append({"prompt": task.prompt, "chosen": chosen, "rejected": rejected, "margin": hi - lo})
    return out


def reward_model_dir(settings: dict[str, Any], seed: int = 0) -> tuple[Path, dict[str, Any]]:
    """The cached reward model of ``settings`` (``train_pairs``, ``heldout_pairs``, ``training``), trained on
    first use (atomic rename); returns its folder and training summary."""
    import data_prep.tiny_tasks.chat as chat_mod
    import data_prep.tiny_tasks.preference_pairs as me
    import infra.embedded.reward_model_train as trainer
    import rewards.preference_rule as rule
    from infra.embedded.reward_model_train import COMPLETE_MARKER, RewardModelTraining, train_reward_model

    key = sha256_json({"settings": settings, "seed": seed})[:12]
    out = cache_root() / "rlhf_rm" / f"seed{seed}-{code_key(chat_mod, rule, me, trainer)}-{key}"
    if (out / COMPLETE_MARKER).is_file():
        return out, json.loads((out / "training.json").read_text())
    cfg = RewardModelTraining.model_validate({**settings.get("training", {}), "seed": seed})
    train = preference_pairs("train", int(settings["train_pairs"]), seed)
    held = preference_pairs("heldout", int(settings["heldout_pairs"]), seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent)) / "rm"
    try:
        summary = train_reward_model(train, tmp, cfg, held)
        tmp.rename(out)
    except OSError:  # another process won the race: its model is identical
        if not (out / COMPLETE_MARKER).is_file():
            raise
        summary = json.loads((out / "training.json").read_text())
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)
    return out, summary


__all__ = ["preference_pairs", "reward_model_dir"]
