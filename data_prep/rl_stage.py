"""Settings and manifest-recorded steps shared by the RL stages' data-prep scripts (01, 02, 03).

Stage folders are loaded by file path, so what more than one of their ``data_prep.py`` files runs lives
here (the lower-level prompt steps are in :mod:`data_prep.tiny_tasks.rl_prep`):

* :class:`Endpoint`, :func:`endpoint_generate`, :func:`endpoint_filter`: the OpenAI-compatible teacher or
  policy endpoint, sampled and scored through ``data_prep.filters``;
* :func:`checkpoint_completions`, :func:`checkpoint_filter`: the same pass-rate filters with the stage's
  input checkpoint as the policy (the embedded profile, where that checkpoint is a local HF folder);
* :func:`source_records`: a prompt source's records, from local JSONL copies or streamed from the hub;
* :func:`prepare_prompts`: a prompt stage's whole run (01, 03): held-out sets, the profile's rows,
  ``train.jsonl`` and ``manifest.json``; :func:`start_manifest` is its first step (also used by 02);
* :func:`load_sources`, :func:`benchmark_items`, :func:`screen_against_evals`, :func:`cap_families`,
  :func:`write_train`: loading, held-out overlap + 8-gram decontamination, per-family caps and the
  outputs, each step counted in the manifest.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep import filters
from data_prep.io import MalformedCounter, read_jsonl, sha256_file, write_jsonl
from data_prep.manifest import Manifest
from data_prep.schema import PromptRow
from data_prep.teacher import ChatClient
from data_prep.tiny_tasks.rl_prep import (
    decontaminate,
    drop_heldout_overlap,
    heldout_benchmarks,
    load_rows,
    reference_self_check,
    rows_to_jsonl,
    write_stage_heldout,
    write_stage_validation,
)
from infra.layering import ConfigError


class Endpoint(BaseModel):
    """An OpenAI-compatible chat endpoint (SGLang in production)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str
    model: str
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")


def endpoint_client(endpoint: Endpoint, **client_kwargs: Any) -> ChatClient:
    """Return a :class:`ChatClient` for ``endpoint`` (API key read from ``endpoint.api_key_env``)."""
    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    return ChatClient(endpoint.base_url, endpoint.model, api_key=key, **client_kwargs)


def endpoint_generate(endpoint: Endpoint, **kwargs: Any) -> filters.Generate:
    """Return a ``filters.Generate`` that samples ``endpoint`` with the given sampling arguments."""
    return endpoint_client(endpoint).as_generate(**kwargs)


def endpoint_filter(
    rows: list[PromptRow],
    endpoint: Endpoint | None,
    rule: filters.BandRule,
    reward: Any,
    manifest: Manifest,
    step: str,
) -> list[PromptRow]:
    """Keep the rows ``rule`` accepts on ``endpoint``'s samples (temperature 1.0); skip when no endpoint."""
    if endpoint is None:
        manifest.step(step, len(rows), skipped=True, reason=f"no endpoint configured for the {step} filter")
        return rows
    generate = endpoint_generate(endpoint, temperature=1.0)
    report = filters.filter_prompts(rows, rule, generate, reward)
    manifest.step(step, len(report.kept), **report.counts())
    return report.kept


CHECKPOINT_BATCH = 128


def weights_sha256(model_dir: Path) -> str:
    """Return a sha256 over the checkpoint's weight files (a policy-based filter depends on the weights)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("*.bin")):
        digest.update(path.name.encode())
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def checkpoint_completions(
    model_dir: Path, prompts: Sequence[list[dict]], n: int, max_new_tokens: int, seed: int
) -> list[list[str]]:
    """Return ``n`` samples per prompt from the HF checkpoint at ``model_dir`` (temperature 1.0, seeded)."""
    import torch

    from infra.embedded.chat_format import render_prompt_ids, stop_token_ids
    from infra.embedded.generation import generate as sample
    from infra.embedded.models import load_model, load_tokenizer
    from infra.embedded.runtime import default_threads

    tok = load_tokenizer(model_dir)
    model = load_model(model_dir).eval()
    ids = [render_prompt_ids(tok, p) for p in prompts for _ in range(n)]
    threads = torch.get_num_threads()
    torch.set_num_threads(default_threads())  # the embedded thread count (runtime.py)
    try:
        gens = sample(
            model, tok, ids, max_new_tokens=max_new_tokens, temperature=1.0,
            stop_token_ids=stop_token_ids(tok), seed=seed, batch_size=CHECKPOINT_BATCH,
        ) if ids else []  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    texts = [tok.decode(g.token_ids[:-1] if g.finish_reason == "stop" else g.token_ids) for g in gens]
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def checkpoint_filter(
    rows: list[PromptRow],
    model_dir: Path,
    rule: filters.BandRule,
    reward: Any,
    manifest: Manifest,
    step: str,
    *,
    max_new_tokens: int,
    seed: int,
) -> list[PromptRow]:
    """Keep the rows ``rule`` accepts on samples of the local checkpoint ``model_dir`` (the policy)."""

    def generate(prompts: list[list[dict]], n: int) -> list[list[str]]:
        return checkpoint_completions(model_dir, prompts, n, max_new_tokens, seed)

    report = filters.filter_prompts(rows, rule, generate, reward)
    passes = Counter(p for p, _ in report.pass_counts.values())
    manifest.step(
        step, len(report.kept), **report.counts(), samples=rule.n_samples, temperature=1.0,
        max_new_tokens=max_new_tokens, seed=seed, pass_histogram=dict(sorted(passes.items())),
        policy={"model": str(model_dir), "weights_sha256": weights_sha256(model_dir)},
    )  # fmt: skip
    return report.kept


def source_records(
    local_files: Sequence[str],
    hub_id: str | None,
    malformed: MalformedCounter,
    *,
    split: str = "train",
    revision: str | None = None,
    config: str | None = None,
) -> Iterator[tuple[str, dict]]:
    """Return ``(where, record)`` pairs: the local JSONL files when given, else the hub dataset streamed."""
    if local_files:
        return ((w, r) for f in local_files for w, r in read_jsonl(f, malformed))
    import datasets

    stream = datasets.load_dataset(hub_id, name=config, split=split, revision=revision, streaming=True)
    return ((f"{hub_id}#{i}", dict(r)) for i, r in enumerate(stream))


def start_manifest(
    ctx: Any, kind: str, params: BaseModel, code_files: Sequence[Path]
) -> tuple[Manifest, dict[str, Path]]:
    """Return a new manifest and the held-out sets (``metric -> path``) written for the stage's metrics.

    ``params`` needs ``heldout_per_metric``; the held-out files are recorded as outputs. With
    ``eval.select_by: validation`` the targets' validation sets are written too (``validation/``). This
    module is hashed into ``script_sha256`` together with ``code_files``.
    """
    args = {**params.model_dump(), "profile": ctx.profile, "seed": ctx.seed}
    manifest = Manifest(kind, args=args, code_files=[*code_files, Path(__file__)])
    cfg = ctx.stage.config.eval
    metrics = [*cfg.targets, *cfg.guardrails]
    heldout = write_stage_heldout(metrics, params.heldout_per_metric, ctx.seed, ctx.heldout_dir)
    for path in heldout.values():
        manifest.add_output(path)
    if cfg.select_by == "validation":
        paths, dropped = write_stage_validation(
            cfg.selecting_targets,
            cfg.validation_per_metric,
            ctx.seed,
            ctx.out_dir / "validation",
            heldout,
            cfg.validation_split,
        )
        for path in paths.values():
            manifest.add_output(path)
        manifest.set(
            "validation",
            {
                "per_metric": cfg.validation_per_metric,
                "split": cfg.validation_split,
                "dropped_as_heldout": dropped,
            },
        )
    return manifest, heldout


def prepare_prompts(
    ctx: Any,
    kind: str,
    params_model: type[BaseModel],
    code_files: Sequence[Path],
    embedded_rows: Callable[[Any, int, dict[str, Path], Manifest], list[PromptRow]],
    production_rows: Callable[[Any, dict[str, Path], Manifest], list[PromptRow]],
) -> dict[str, Any]:
    """Write the held-out sets, the profile's rows as ``train.jsonl`` and ``manifest.json``; return a summary.

    ``ctx.params`` is validated as ``params_model`` (unless it already is one); ``embedded_rows(params,
    seed, heldout, manifest)`` or ``production_rows(params, heldout, manifest)`` makes the rows; the
    summary counts them in total and per ``metadata.family``.
    """
    params = ctx.params if isinstance(ctx.params, params_model) else params_model.model_validate(ctx.params)
    manifest, heldout = start_manifest(ctx, kind, params, code_files)
    if ctx.profile == "embedded":
        rows = embedded_rows(params, ctx.seed, heldout, manifest)
    else:
        rows = production_rows(params, heldout, manifest)
    write_train(ctx.out_dir, rows, manifest)
    families = dict(Counter(row.metadata["family"] for row in rows))
    return {"train": len(rows), "families": families, "heldout": {m: str(p) for m, p in heldout.items()}}


def load_sources(
    sources: Iterable[Any],
    rows_of: Callable[[Any, MalformedCounter], list[PromptRow]],
    manifest: Manifest,
) -> list[PromptRow]:
    """Return every source's rows (``rows_of(source, malformed)``); record sources, malformed and count."""
    malformed = MalformedCounter()
    rows: list[PromptRow] = []
    for source in sources:
        manifest.add_source({**source.model_dump(), "revision": source.revision or "unpinned"})
        rows += rows_of(source, malformed)
    manifest.set("malformed", malformed.as_dict())
    manifest.step("loaded", len(rows))
    return rows


def benchmark_items(files: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Return the local benchmark files (``name -> path``) as ``name -> [(item id, text)]``."""
    from data_prep.benchmarks import load_benchmark

    return {name: [(i.id, i.text) for i in load_benchmark(name, path)] for name, path in files.items()}


def screen_against_evals(
    rows: Sequence[Any],
    heldout: dict[str, Path],
    benchmarks: dict[str, list[tuple[str, str]]],
    manifest: Manifest,
    *,
    drop_shared: bool = False,
) -> list[Any]:
    """Drop rows whose prompt is a held-out prompt, then rows the 8-gram rule matches to ``benchmarks``.

    Both steps (``heldout_overlap``, ``decontamination``) and the decontamination report are recorded.
    ``drop_shared`` as in :func:`decontaminate` (``benchmarks`` are held-out sets of generated tasks).
    """
    rows, overlap = drop_heldout_overlap(rows, load_rows(heldout.values()))
    manifest.step("heldout_overlap", len(rows), dropped=overlap)
    rows, report = decontaminate(rows, benchmarks, drop_shared=drop_shared)
    manifest.set("decontamination", report)
    manifest.step("decontamination", len(rows), dropped=report["removed"])
    return rows


def screen_against_heldout(rows: Sequence[Any], heldout: dict[str, Path], manifest: Manifest) -> list[Any]:
    """:func:`screen_against_evals` with the held-out sets of generated tasks as the screened sets."""
    return screen_against_evals(rows, heldout, heldout_benchmarks(heldout), manifest, drop_shared=True)


def screened_tiny_tasks(
    tasks: Sequence[Any], heldout: dict[str, Path], manifest: Manifest, step: str, rule: str
) -> list[Any]:
    """Screen generated tiny tasks against the held-out sets, then keep those whose reference passes.

    Records the screen (``heldout_overlap``, ``decontamination``) and ``step`` (the reference self-check,
    described by ``rule``, with the failures by reason).
    """
    tasks = screen_against_heldout(tasks, heldout, manifest)
    tasks, failures = reference_self_check(tasks)
    manifest.step(step, len(tasks), rule=rule, dropped_by_reason=failures)
    return tasks


def embedded_train_tasks(n: int | None) -> int:
    """``data.train_tasks`` of an embedded agent stage: required (a silent default trained on one task)."""
    if n is None:
        raise ConfigError("data.train_tasks: required at the embedded scale (tiny train tasks to draw)")
    return n


def tiny_agent_rows(
    family: str,
    n: int | None,
    seed: int,
    heldout: dict[str, Path],
    manifest: Manifest,
    source: dict[str, Any],
) -> list[PromptRow]:
    """Rows of ``n`` train tasks of a tiny agent family (repeats dropped), screened against the held-out sets.

    ``source`` is the family's manifest source entry; its ``name`` (the generating module) names the step.
    """
    from data_prep.tiny_tasks import generate
    from data_prep.tiny_tasks.common import is_repeat

    manifest.add_source(source)
    tasks = [t for t in generate(family, embedded_train_tasks(n), seed, "train") if not is_repeat(t.id)]
    manifest.step("generated", len(tasks), rule=f"{source['name']} train split")
    rows = [t.prompt_row() for t in tasks]
    return screen_against_heldout(rows, heldout, manifest)


def cap_families(
    rows: list[PromptRow], caps: dict[str, int], manifest: Manifest, step: str
) -> list[PromptRow]:
    """Keep the first ``caps[family]`` rows of each family (other families are dropped); record ``step``."""
    kept, seen = [], dict.fromkeys(caps, 0)
    for row in rows:
        fam = row.metadata["family"]
        if fam in seen and seen[fam] < caps[fam]:
            seen[fam] += 1
            kept.append(row)
    manifest.step(step, len(kept), per_family=seen)
    return kept


def write_train(out_dir: Path, rows: Iterable[PromptRow], manifest: Manifest) -> None:
    """Write ``train.jsonl`` (recorded as an output), then ``manifest.json``, into ``out_dir``.

    Raises ``ValueError`` after writing when no row survived: RL cannot train on nothing, and the manifest
    left behind says which step dropped them.
    """
    train = Path(out_dir) / "train.jsonl"
    rows = list(rows)
    manifest.add_output(train, write_jsonl(train, rows_to_jsonl(rows)))
    manifest.write(Path(out_dir) / "manifest.json")
    if not rows:
        done = [s for s in manifest.data.get("steps", []) if "count" in s]
        steps = ", ".join(f"{s['step']} → {s['count']}" for s in done)
        emptied = next((s["step"] for s in done if s["count"] == 0), "?")
        raise ConfigError(
            f"{out_dir}: no training prompt survived the filters ({steps}); step {emptied!r} removed the "
            "last ones: relax it in the stage's `data` section (e.g. --set "
            "data.learnability.drop_zero=false where the stage has a learnability filter) or start from a "
            "stronger checkpoint; see manifest.json"
        )
