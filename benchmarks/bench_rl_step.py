"""Benchmark: rollout steps/s of the embedded RL trainer against TRL's GRPOTrainer, same model and batch.

Both train the micro model on the toy "letter a" task of ``tests/fixtures/embedded/toy_rl`` with the same
batch: P prompts × G samples, T new tokens, 2 optimizer steps per rollout, no KL, one CPU thread. Prints
each side's steps/s and the ratio (ours / TRL), measured in one run.

    python benchmarks/bench_rl_step.py [--steps 8] [--prompts 8] [--samples 4] [--tokens 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "embedded"))
os.environ.setdefault("RUFUS_NO_PROGRESS", "1")


def bench_ours(base: Path, root: Path, args: argparse.Namespace) -> float:
    """Return rollout steps/s of :class:`infra.embedded.rl.RLTrainer` (after one warm-up step)."""
    from embedded_jobs import toy_job

    from infra.embedded.rl import RLTrainer

    job = toy_job("toy_rl", root / "ours", base, track_kl=False)
    rc = job.stage.config.rl.rollout
    rc.prompts_per_step, rc.samples_per_prompt, rc.max_response_tokens = (
        args.prompts,
        args.samples,
        args.tokens,
    )
    rc.num_rollouts = args.steps + 1
    trainer = RLTrainer(job)
    trainer.step(1)
    t0 = time.perf_counter()
    for step in range(2, args.steps + 2):
        trainer.step(step)
    return args.steps / (time.perf_counter() - t0)


def bench_trl(base: Path, root: Path, args: argparse.Namespace) -> float:
    """Return rollout steps/s of TRL's GRPOTrainer on the same model, prompts, reward and batch."""
    import torch
    from datasets import Dataset
    from embedded_jobs import HERE
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from infra.embedded.chat_format import stop_token_ids
    from infra.recipe import resolve_stage
    from rewards.contract import RewardRequest

    stage = resolve_stage(HERE / "toy_rl", "embedded")
    letter_a = stage.module("reward").letter_a_share
    rows = stage.module("data_prep").prompt_rows(64)
    dataset = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.generation_config.eos_token_id = stop_token_ids(tok)

    def reward(completions, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [letter_a(RewardRequest(response=t)).score for t in texts]

    class Clock(TrainerCallback):
        """Records when each optimizer step ends; a rollout step is two optimizer steps."""

        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, *a, **k):  # noqa: ANN002, ANN003
            self.ends.append(time.perf_counter())

    clock = Clock()
    cfg = GRPOConfig(
        output_dir=str(root / "trl"),
        per_device_train_batch_size=args.prompts * args.samples // 2,
        steps_per_generation=2,
        num_generations=args.samples,
        max_completion_length=args.tokens,
        learning_rate=3e-3,
        lr_scheduler_type="constant",
        beta=0.0,
        temperature=1.0,
        max_steps=2 * (args.steps + 1),
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=cfg,
        train_dataset=dataset,
        processing_class=tok,
        callbacks=[clock],
    )
    trainer.train()
    # Exclude the first rollout step (warm-up), as for ours: time from the end of step 2 to the last.
    return args.steps / (clock.ends[-1] - clock.ends[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    import torch
    from embedded_jobs import micro_base

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = micro_base(root)
        ours = bench_ours(base, root, args)
        trl = bench_trl(base, root, args)
    batch = (
        f"{args.prompts} prompts x {args.samples} samples x {args.tokens} tokens, 2 optimizer steps/rollout"
    )
    print(f"batch: {batch}; {args.steps} timed rollout steps each")
    print(f"embedded RL step: {ours:.3f} steps/s")
    print(f"TRL GRPOTrainer:  {trl:.3f} steps/s")
    print(f"ratio (embedded / TRL): {ours / trl:.2f}x")


if __name__ == "__main__":
    main()
