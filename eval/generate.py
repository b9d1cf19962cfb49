"""Sample responses for the benchmarks lm-eval has no task for, and write them in each native scorer's format.

Production only: it calls the OpenAI-compatible chat endpoint of the SGLang server that
``eval.production`` starts, k times per prompt, strips thinking tags, and writes the input file each
benchmark's own scorer reads (IFBench ``run_eval``, Multi-challenge ``main.py --responses-file``,
AdvancedIF ``AdvancedIF.cli evaluate``, LiveCodeBench ``custom_evaluator``). Run
``python -m eval.generate --help``.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eval.loaders import EvalItem, load
from eval.registry import get_benchmark
from eval.scoring import strip_thinking

Complete = Callable[[list[dict[str, str]], int], str]
_PY_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def last_python_block(text: str) -> str:
    """Return the last fenced code block of a response ('' when there is none)."""
    blocks = _PY_BLOCK.findall(text)
    return blocks[-1] if blocks else ""


def http_completer(base_url: str, model: str, temperature: float, top_p: float, max_tokens: int) -> Complete:
    """Return a function that sends messages to ``base_url``/chat/completions with a per-sample seed."""

    def complete(messages: list[dict[str, str]], seed: int) -> str:
        body = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
            "seed": seed,
        }
        req = urllib.request.Request(
            base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=3600) as resp:
            msg = json.load(resp)["choices"][0]["message"]
        return msg.get("content") or ""

    return complete


def sample(
    items: list[EvalItem], complete: Complete, k: int, seed: int, workers: int
) -> dict[str, list[str]]:
    """Return {item id: k answers with thinking stripped}; sample i of every item uses seed + i."""
    jobs = [(item, i) for item in items for i in range(k)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        texts = list(pool.map(lambda job: complete(job[0].messages, seed + job[1]), jobs))
    out: dict[str, list[str]] = {item.id: [] for item in items}
    for (item, _), text in zip(jobs, texts, strict=True):
        out[item.id].append(strip_thinking(text))
    return out


# One response file per sample index, in the format each benchmark's own scorer reads.
_ROWS: dict[str, Callable[[EvalItem, str], dict]] = {
    "ifbench": lambda it, answer: {"prompt": it.meta["prompt"], "response": answer},
    "multichallenge": lambda it, answer: {"QUESTION_ID": it.meta["question_id"], "RESPONSE": [answer]},
    "advancedif": lambda it, answer: {**it.meta["raw"], "response": answer},
}


def write_native(
    benchmark: str, items: list[EvalItem], answers: dict[str, list[str]], out_dir: Path
) -> list[Path]:
    """Write the native scorer input file(s) of a benchmark and return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    k = len(next(iter(answers.values()))) if answers else 0
    if benchmark == "livecodebench_v6":
        path = out_dir / "custom_output.json"
        rows = [
            {"question_id": it.id, "code_list": [last_python_block(a) for a in answers[it.id]]}
            for it in items
        ]
        path.write_text(json.dumps(rows), encoding="utf-8")
        return [path]
    to_row = _ROWS.get(benchmark)
    if to_row is None:
        raise ValueError(f"{benchmark!r} has no native scorer input format; known: {', '.join(_ROWS)}")
    paths = []
    for i in range(k):
        path = out_dir / f"responses_{i}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for it in items:
                row = to_row(it, answers[it.id][i])
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    """Command line: sample a benchmark from a served checkpoint and write the native scorer inputs."""
    ap = argparse.ArgumentParser(prog="python -m eval.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--data", required=True, nargs="+", type=Path, help="Local release file(s).")
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:30000/v1")
    ap.add_argument("--model", required=True, help="Served model name.")
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--temperature", type=float, required=True)
    ap.add_argument("--top-p", type=float, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    get_benchmark(args.benchmark)
    loaded = load(args.benchmark, args.data)
    print(f"{args.benchmark}: {len(loaded.items)} items, {loaded.dropped} dropped {loaded.reasons[:3]}")
    complete = http_completer(args.base_url, args.model, args.temperature, args.top_p, args.max_tokens)
    answers = sample(loaded.items, complete, args.k, args.seed, args.workers)
    for path in write_native(args.benchmark, loaded.items, answers, args.out):
        print(path)


if __name__ == "__main__":
    main()
