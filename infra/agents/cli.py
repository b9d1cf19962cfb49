"""``rufus rollout``: run N agent episodes of an environment against a model and write JSON lines.

``--model`` is ``micro`` (the embedded tiny model, served on 127.0.0.1 for the run), a local HF model
folder (served the same way), or the URL of a running SGLang-compatible ``/generate`` server (then
``--tokenizer`` names its tokenizer folder). One JSON object per episode: ``tokens``, ``loss_mask``,
``rollout_logprobs``, ``response_length``, ``reward``, ``termination``, ``transcript`` and more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from pathlib import Path

import typer

from infra.agents.contract import RolloutResult


async def _run_all(env_spec: str, endpoint, n: int, seed: int, concurrency: int) -> list[RolloutResult]:  # noqa: ANN001
    from infra.agents.envs.base import load_environment
    from infra.agents.loop import run_episode

    tasks = load_environment(env_spec).tasks(n, seed)
    gate = asyncio.Semaphore(max(concurrency, 1))

    async def one(i: int) -> RolloutResult:
        async with gate:  # a fresh environment per episode: environments keep per-episode state
            return await run_episode(
                load_environment(env_spec), tasks[i], dataclasses.replace(endpoint, seed=seed + i)
            )

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def run_rollouts(
    env: str,
    model: str,
    n: int,
    out: Path,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    tokenizer: str | None = None,
    concurrency: int = 4,
) -> list[RolloutResult]:
    """Run ``n`` episodes of ``env`` against ``model``, write them to ``out`` (JSONL) and return them."""
    from transformers import AutoTokenizer

    from infra.agents.local_server import micro_model_dir, start_model_server
    from infra.agents.loop import ModelEndpoint

    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    server = None
    if model.startswith(("http://", "https://")):
        if not tokenizer:
            raise ValueError(f"--model {model} is a server URL: pass --tokenizer with its tokenizer folder")
        url, tok = model, AutoTokenizer.from_pretrained(tokenizer)
    else:
        path = micro_model_dir(seed=0) if model == "micro" else Path(model)
        if not path.is_dir():
            raise FileNotFoundError(f"--model {model}: not 'micro', a URL, or an existing model folder")
        server = start_model_server(path)
        url, tok = server.url, server.tokenizer
    try:
        endpoint = ModelEndpoint(base_url=url, tokenizer=tok, temperature=temperature, top_p=top_p, seed=seed)
        results = asyncio.run(_run_all(env, endpoint, n, seed, concurrency))
    finally:
        if server is not None:
            server.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("".join(json.dumps(r.to_record()) + "\n" for r in results))
    tmp.replace(out)
    return results


def rollout(
    env: str = typer.Option(
        ..., "--env", help="Environment spec, e.g. 'calculator' or 'calculator:turns=2'."
    ),
    model: str = typer.Option(
        ..., "--model", help="'micro', a local HF model folder, or a /generate server URL."
    ),
    n: int = typer.Option(4, "--n", help="Number of episodes."),
    out: Path = typer.Option(Path("trajectories.jsonl"), "--out", help="Output JSON-lines file."),
    seed: int = typer.Option(0, "--seed", help="Seed of the task generator and of sampling."),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Tokenizer folder (needed with a URL)."),
    concurrency: int = typer.Option(4, "--concurrency", help="Episodes in flight at once."),
) -> None:
    """Run N agent episodes and write one JSON object per episode (tokens, masks, logprobs, reward...)."""
    try:
        results = run_rollouts(
            env,
            model,
            n,
            out,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            tokenizer=tokenizer,
            concurrency=concurrency,
        )
    except (ValueError, KeyError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    ends = Counter(r.termination.value for r in results)
    scored = [r.reward for r in results if r.reward is not None]
    mean = sum(scored) / len(scored) if scored else float("nan")
    typer.echo(f"wrote {len(results)} episodes to {out}: mean reward {mean:.3f}; terminations {dict(ends)}")
