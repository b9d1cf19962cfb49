"""Benchmark: tokens/s of the embedded SFT step against TRL's SFTTrainer, and against the matmul ceiling.

Both sides train the micro model (``tests/fixtures/embedded/embedded_jobs.py: micro_base``) on the same
rows of the toy SFT fixture stage (``tests/fixtures/embedded/toy_sft``, more rows than its default so the
timed steps never repeat a sample), tokenized once by our ``render_with_loss_mask`` (GLM markup, per-message
loss mask), packed to ``--seq-len`` tokens without cross-attention between packed samples, ``--batch``
packed sequences per optimizer step in micro-batches of ``--micro-batch``, float32, the same AdamW
(``infra.embedded.optim.build_optimizer``: foreach off, clip 1.0), ``--threads`` CPU threads (1 by
default). The first ``--warmup`` optimizer steps of each side are not timed. Printed, all measured in
one run:

* tokens/s of each side and the ratio ours / TRL. Tokens = real tokens of the packed sequences (every
  token of every packed sample, supervised or not; padding is not counted), summed over the timed steps;
  supervised (loss-carrying) tokens are printed beside them.
* the matmul ceiling: plain ``torch`` GEMMs of the model's linear layers (q, k, v, o, gate, up, down per
  layer and the tied vocabulary projection), forward ``x @ W`` and both backward products, with M = the
  tokens of one forward pass (``--micro-batch`` x ``--seq-len``), on the same threads; best of
  ``--gemm-reps``, in FLOP/s.
* achieved model FLOP/s of each side, estimated as 6 x parameters x tokens/s (parameters include the
  tied embedding, i.e. the vocabulary projection; attention-score FLOPs and norms are NOT counted), and
  ours ÷ ceiling.

What differs in TRL (the closest honest configuration of TRL's SFTTrainer, ``trl`` version printed):

* data: TRL gets our tokenization as a pre-tokenized dataset (``input_ids`` + ``labels`` = -100 where our
  loss mask is 0), so the tokens and loss mask are identical; TRL's ``assistant_only_loss`` needs
  ``{% generation %}`` markers our GLM template does not have, and would not honour per-message ``loss``.
* packing: TRL packs best-fit-decreasing (``packing_strategy="bfd"``) over the whole dataset, ours packs
  greedily in shuffled order; both pack up to ``--seq-len`` tokens and both restart positions per sample.
* attention: TRL's bfd packing forces ``padding_free``: a micro-batch becomes one row of all its packs,
  and transformers' sdpa path derives a block-diagonal mask from the position ids; ours passes a 4-D
  block-diagonal mask per packed row. With ``--micro-batch`` > 1, TRL's mask spans the whole micro-batch
  (quadratic in micro-batch x seq-len); with 1 (default, as stage 00's embedded config) both are the same.
* loss: TRL's fused LM head projects only the supervised positions onto the vocabulary (fewer FLOPs than
  the 6 x N estimate assumes) and also computes entropy/top-1 metrics; ours projects every position.
* everything else is TRL's ``Trainer`` loop as configured (``bf16=False``, ``gradient_checkpointing=False``
  since ours uses neither, no logging, no saving); our global ``torch.use_deterministic_algorithms(True)``
  (set by our trainer) stays on for both.

Run: ``python benchmarks/bench_sft_step.py [--seq-len 512] [--batch 16] [--micro-batch 1] [--steps 6]
[--warmup 2] [--threads 1]`` (``--quick``: 256 tokens, 4 sequences, 3 timed steps).
Goal (from the issue): ours >= 2x TRL's tokens/s and >= 50% of the measured matmul ceiling.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "embedded"))
os.environ.setdefault("RUFUS_NO_PROGRESS", "1")

TOY_TOKENS_PER_ROW = 30  # toy_sft rows are ~37 tokens; a lower guess gives a margin of rows


def make_trainer(base: Path, root: Path, args: argparse.Namespace) -> Any:
    """Return our SFTTrainer over enough toy_sft rows for warm-up + timed steps."""
    from embedded_jobs import toy_job

    from infra.embedded.sft import SFTTrainer

    job = toy_job("toy_sft", root / "ours", base, threads=args.threads)
    total = args.warmup + args.steps
    rows = math.ceil(total * args.batch * args.seq_len / TOY_TOKENS_PER_ROW)
    job.stage.module("data_prep").run(job.data_dir, n_train=rows, n_heldout=8)
    sft = job.stage.config.sft
    sft.max_seq_len, sft.global_batch, sft.micro_batch, sft.epochs = (
        args.seq_len,
        args.batch,
        args.micro_batch,
        1,
    )
    sft.length_cap = min(sft.length_cap, args.seq_len)
    trainer = SFTTrainer(job)
    if len(trainer.schedule) < total:
        raise SystemExit(f"only {len(trainer.schedule)} steps of data for {total} steps; raise the rows")
    return trainer


def bench_ours(trainer: Any, args: argparse.Namespace) -> dict[str, float]:
    """Time ``train_step`` over the schedule's first steps (warm-up excluded); return tokens and seconds."""
    import torch

    for packs in trainer.schedule[: args.warmup]:
        trainer.train_step(packs)
    tokens = supervised = seconds = 0.0
    n_packs = 0
    for packs in trainer.schedule[args.warmup : args.warmup + args.steps]:
        t0 = time.perf_counter()
        metrics = trainer.train_step(packs)
        seconds += time.perf_counter() - t0
        tokens += sum(len(trainer.train[i].ids) for p in packs for i in p)
        supervised += metrics["supervised_tokens"]
        n_packs += len(packs)
    return {
        "tokens": tokens,
        "supervised": supervised,
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "fill": tokens / (n_packs * args.seq_len),
    }


def _sft_config(config_cls: Any, root: Path, args: argparse.Namespace, steps: int, clip: float) -> Any:
    """TRL's SFTConfig for the benchmark's batch: bfd packing (hence padding-free), fp32, no checkpointing."""
    return config_cls(
        output_dir=str(root / "trl"),
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.batch // args.micro_batch,
        max_length=args.seq_len,
        packing=True,
        packing_strategy="bfd",
        max_steps=steps,
        max_grad_norm=clip,
        bf16=False,
        gradient_checkpointing=False,
        use_cpu=True,
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )


def bench_trl(trainer_ours: Any, base: Path, root: Path, args: argparse.Namespace) -> dict[str, float]:
    """Train TRL's SFTTrainer on the same encoded rows and batch; return tokens and seconds past warm-up."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from infra.embedded.models import load_model, load_tokenizer
    from infra.embedded.optim import build_optimizer

    hf_logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    samples = trainer_ours.train
    dataset = Dataset.from_dict(
        {
            "input_ids": [s.ids for s in samples],
            "labels": [[t if m else -100 for t, m in zip(s.ids, s.mask, strict=True)] for s in samples],
        }
    )
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_model(base, "cpu")
    total = args.warmup + args.steps
    optimizers = build_optimizer(model, trainer_ours.cfg.optimizer, total)

    class Clock(TrainerCallback):
        """Records, at the end of each optimizer step, the time, TRL's token count and the thread count."""

        def __init__(self) -> None:
            self.marks: list[tuple[float, int, int]] = []
            self.trainer = None

        def on_step_end(self, *a: Any, **k: Any) -> None:
            tokens = int(self.trainer._total_train_tokens)
            self.marks.append((time.perf_counter(), tokens, torch.get_num_threads()))

    clock = Clock()
    with warnings.catch_warnings():  # transformers renames gradient_checkpointing; TRL still sets it
        warnings.simplefilter("ignore", FutureWarning)
        cfg = _sft_config(SFTConfig, root, args, total, trainer_ours.cfg.optimizer.clip_grad)
    trl_trainer = SFTTrainer(
        model=model,
        args=cfg,
        train_dataset=dataset,
        processing_class=load_tokenizer(base),
        optimizers=optimizers,
        callbacks=[clock],
    )
    clock.trainer = trl_trainer
    trl_trainer.remove_callback(PrinterCallback)  # it prints the end-of-training summary
    packs = trl_trainer.train_dataset
    pack_tokens = sum(len(x) for x in packs["input_ids"])
    trl_trainer.train()
    # Timed from the end of the last warm-up step to the end of the last step, as for ours.
    (t0, tok0, _), (t1, tok1, threads) = clock.marks[args.warmup - 1], clock.marks[-1]
    return {
        "tokens": float(tok1 - tok0),
        "seconds": t1 - t0,
        "threads": threads,
        "packs": len(packs),
        "fill": pack_tokens / (len(packs) * args.seq_len),
    }


def gemm_ceiling(config: Any, m: int, reps: int) -> float:
    """Return FLOP/s of plain fp32 GEMMs of the model's linear layers (forward + both backward products)."""
    import torch

    h, inter, vocab, layers = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.num_hidden_layers,
    )
    kv = config.num_key_value_heads * (config.head_dim or h // config.num_attention_heads)
    shapes = [  # (in, out, how many per model)
        (h, h, 2 * layers),  # q, o
        (h, kv, 2 * layers),  # k, v
        (h, inter, 2 * layers),  # gate, up
        (inter, h, layers),  # down
        (h, vocab, 1),  # tied vocabulary projection
    ]
    flops = seconds = 0.0
    gen = torch.Generator().manual_seed(0)
    for fan_in, fan_out, count in shapes:
        x = torch.randn(m, fan_in, generator=gen)
        w = torch.randn(fan_in, fan_out, generator=gen)
        g = torch.randn(m, fan_out, generator=gen)
        for a, b in ((x, w), (g, w.T), (x.T, g)):  # forward, grad of input, grad of weight
            torch.mm(a, b)
            best = math.inf
            for _ in range(reps):
                t0 = time.perf_counter()
                torch.mm(a, b)
                best = min(best, time.perf_counter() - t0)
            flops += count * 2.0 * m * fan_in * fan_out
            seconds += count * best
    return flops / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=512, help="packed sequence length (tokens)")
    parser.add_argument("--batch", type=int, default=16, help="packed sequences per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=1, help="packed sequences per forward pass")
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed optimizer steps first (>= 1)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gemm-reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="256 tokens x 4 sequences, 1+3 steps")
    args = parser.parse_args()
    if args.quick:
        args.seq_len, args.batch, args.micro_batch, args.steps, args.warmup = 256, 4, 1, 3, 1
    if args.batch % args.micro_batch or args.warmup < 1:
        parser.error("--batch must be a multiple of --micro-batch, and --warmup >= 1")
    import datasets
    import torch
    import trl
    from embedded_jobs import micro_base
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = micro_base(root)
        ours_trainer = make_trainer(base, root, args)
        model_config = ours_trainer.model.config
        params = sum(p.numel() for p in ours_trainer.model.parameters())
        ceiling = gemm_ceiling(model_config, args.micro_batch * args.seq_len, args.gemm_reps)
        ours = bench_ours(ours_trainer, args)
        theirs = bench_trl(ours_trainer, base, root, args)

    ours_tps = ours["tokens"] / ours["seconds"]
    trl_tps = theirs["tokens"] / theirs["seconds"]
    ours_flops, trl_flops = 6 * params * ours_tps, 6 * params * trl_tps
    print(
        f"setup: micro model ({params:,} parameters), toy_sft rows, {args.batch} packed sequences of <= "
        f"{args.seq_len} tokens per optimizer step, micro-batch {args.micro_batch}, fp32; "
        f"threads ours {ours['threads']}, TRL {theirs['threads']}; {args.warmup} warm-up + "
        f"{args.steps} timed steps each; trl {trl.__version__}, torch {torch.__version__}"
    )
    print(
        f"tokens = real tokens of the packed sequences (padding excluded); ours timed "
        f"{ours['tokens']:.0f} tokens ({ours['supervised']:.0f} supervised; packs {ours['fill']:.0%} full), "
        f"TRL {theirs['tokens']:.0f} (bfd packs {theirs['fill']:.0%} full)"
    )
    print(f"embedded SFT step: {ours_tps:9.0f} tokens/s   {ours_flops / 1e9:6.2f} GFLOP/s (6 x N x tokens/s)")
    print(f"TRL SFTTrainer:    {trl_tps:9.0f} tokens/s   {trl_flops / 1e9:6.2f} GFLOP/s (6 x N x tokens/s)")
    print(
        f"matmul ceiling (fp32 GEMMs of the model's linear shapes, M={args.micro_batch * args.seq_len}, "
        f"fwd+bwd, {args.threads} thread(s)): {ceiling / 1e9:.2f} GFLOP/s"
    )
    ratio, share = ours_tps / trl_tps, ours_flops / ceiling
    print(f"ratio (embedded / TRL): {ratio:.2f}x; embedded achieved / ceiling: {share:.0%}")
    print(
        f"goal >=2x TRL: {'met' if ratio >= 2 else 'NOT met'}; "
        f">=50% of the matmul ceiling: {'met' if share >= 0.5 else 'NOT met'}"
    )
    print(
        "TRL differs: bfd packing over the dataset (ours greedy in shuffled order), padding-free rows with "
        "a position-derived block-diagonal mask, LM head only on supervised positions; same tokens, "
        "loss mask, optimizer and batch"
    )


if __name__ == "__main__":
    main()
