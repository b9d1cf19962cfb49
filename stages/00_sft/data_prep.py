"""Data prep of SFT (paper §3.1): the 17-source mix, screened, length-capped, with held-out sets.

Both profiles write the held-out sets, run :func:`data_prep.sft_mix.build_sft_mix` (converters, repairs,
interleaved-thinking split, validators, length under the input checkpoint's chat template, benchmark
decontamination, Table-3 mixture report), then screen the mix against the held-out sets of this and the
later stages (same 8-gram rule) and hash a slice of conversations aside for the selection loss.

* **production**: the Table 17 sources are streamed by hub id at pinned revisions (``revisions``; any
  unpinned source stops the run, named, unless ``allow_unpinned``) or read from local copies
  (``local_files``); every benchmark of ``required_benchmarks`` needs a local file in ``benchmarks``.
* **embedded**: no hub; the stage writes local sources in public formats (ShareGPT ``conversations``
  with Hermes tool calls, OpenAI ``messages`` with structured tool calls/results and separate or inline
  reasoning, prompt/response with a ``reasoning`` field) from ``data_prep.tiny_tasks`` (all families)
  plus calculator and test-runner tool chats, sprinkled with malformed rows the builder must drop and
  count. Tasks are screened against the held-out sets before writing (the tiny templates overlap, code
  most), generating up to ``oversample`` × the count so each family keeps its size.

Outputs in ``ctx.out_dir``: ``train.jsonl`` and ``heldout_sft.jsonl`` (``SFTSample`` rows; the names the
embedded trainer and the production tokenize step read), ``heldout/<metric>.jsonl``, ``mixture.md``,
``mixture.png``, ``manifest.json`` and, embedded only, ``sources/*.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.benchmarks import ALL_BENCHMARKS, CHAINED, BenchmarkItem
from data_prep.decontam_pipeline import new_report, screen_rows
from data_prep.decontaminate import PhraseIndex, build_index, screen_rule
from data_prep.io import JsonlWriter, MalformedCounter, atomic_write_text, read_jsonl, sha256_file
from data_prep.length import measure
from data_prep.mixture import MixtureAccumulator
from data_prep.schema import SFTSample
from data_prep.sft_mix import build_sft_mix
from data_prep.sources import SFT_SOURCES, SOURCES_BY_NAME, SourceSpec, get_source, local_source
from data_prep.tiny_tasks import METRIC_FAMILIES, SHARED_METRICS, heldout_tasks
from data_prep.tiny_tasks.rl_prep import prompt_text, write_stage_heldout
from data_prep.tiny_tasks.sft_sources import FAMILY_CATEGORY, write_embedded_sources

Items = list[tuple[str, list[BenchmarkItem], bool]]


class LocalSource(BaseModel):
    """An extra local JSONL source in one of the converter formats."""

    model_config = ConfigDict(extra="forbid")
    path: str
    name: str | None = None
    format: Literal["auto", "sharegpt", "openai", "prompt_response"] = "auto"
    category: str = "General Chat"


class Params(BaseModel):
    """The ``data`` section of 00_sft/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    mix: Literal["table17"] = Field("table17", description="The 17 public sources of RA Table 17.")
    sources: list[str] = Field(default_factory=lambda: [s.name for s in SFT_SOURCES])
    revisions: dict[str, str] = Field(default_factory=dict, description="Source name -> hub commit.")
    local_files: dict[str, list[str]] = Field(default_factory=dict, description="Source -> local copies.")
    allow_unpinned: bool = Field(False, description="Stream hub sources without a pinned revision.")
    extra_sources: list[LocalSource] = Field(default_factory=list)
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    required_benchmarks: list[str] = Field(default_factory=lambda: list(CHAINED))
    length_cap: int = Field(120000, ge=16, description="Tokens under the chat template, tools included.")
    long_bucket_from: int = Field(32000, ge=1, description="Samples this long are bucket-sampled.")
    heldout_per_metric: int = Field(200, ge=1)
    heldout_sft_fraction: float = Field(0.0005, gt=0, lt=1, description="Conversations for held-out loss.")
    # The built-in metrics, fixed: a later stage registering its own metric never changes this stage.
    screen_metrics: list[str] = Field(default_factory=lambda: list(SHARED_METRICS))
    screen_per_metric: int = Field(
        200, ge=0, description=">= later stages' heldout_per_metric (prefix-stable)."
    )
    families: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(FAMILY_CATEGORY, 400))
    calculator_conversations: int = Field(240, ge=0, description="Embedded General Agent tool chats.")
    test_runner_conversations: int = Field(160, ge=0, description="Embedded Coding Agent tool chats.")
    awm_conversations: int = Field(0, ge=0, description="Embedded General Agent AWM tool-task trajectories.")
    terminal_conversations: int = Field(
        0, ge=0, description="Embedded Coding Agent Harbor terminal-task trajectories."
    )
    search_conversations: int = Field(
        0, ge=0, description="Embedded General Agent search trajectories over the tiny wiki (stage 06)."
    )
    workspace_conversations: int = Field(
        0, ge=0, description="Embedded General Agent knowledge-work trajectories in Feather (stage 08)."
    )
    oversample: int = Field(12, ge=1, description="Embedded: generate up to this × n to survive screens.")
    malformed_every: int = Field(40, ge=2, description="Embedded: one malformed row per this many.")
    workers: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _known_names(self) -> Params:
        for what, names, known in (
            ("sources", self.sources, SOURCES_BY_NAME),
            ("families", self.families, FAMILY_CATEGORY),
            ("benchmarks", [*self.required_benchmarks, *self.benchmarks], ALL_BENCHMARKS),
            ("screen_metrics", self.screen_metrics, METRIC_FAMILIES),
        ):
            unknown = sorted(set(names) - set(known))
            if unknown:
                raise ValueError(f"unknown {what} {unknown}; known: {', '.join(known)}")
        return self


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout_sft.jsonl, heldout/<metric>.jsonl, the mixture report and manifest.json."""
    params = ctx.params if isinstance(ctx.params, Params) else Params.model_validate(ctx.params)
    out = Path(ctx.out_dir)
    if ctx.profile != "embedded":
        specs = production_specs(params)
        check_pinned(specs, params.allow_unpinned)
        check_benchmarks(params)
    metrics = [*ctx.stage.config.eval.targets, *ctx.stage.config.eval.guardrails]
    heldout = write_stage_heldout(metrics, params.heldout_per_metric, ctx.seed, ctx.heldout_dir)
    items = screen_items(heldout, params.screen_metrics, params.screen_per_metric, ctx.seed)
    index = build_index(items, drop_shared=True)  # held-out sets: generated items share their template
    sources_info = None
    if ctx.profile == "embedded":
        specs, sources_info = write_embedded_sources(params, ctx.seed, out / "sources", index)
    specs += [local_source(s.path, s.name, fmt=s.format, category=s.category) for s in params.extra_sources]
    tokenizer = load_chat_tokenizer(ctx.tokenizer_dir)
    manifest = build_sft_mix(
        specs, out, tokenizer, benchmarks=params.benchmarks if ctx.profile != "embedded" else None,
        workers=params.workers, max_tokens=params.length_cap, long_min_tokens=params.long_bucket_from,
        allow_unpinned=params.allow_unpinned,
    )  # fmt: skip
    counts = finish(out, manifest, items, index, params, ctx.seed, tokenizer)
    manifest["stage"] = {
        "id": ctx.stage.id, "profile": ctx.profile, "seed": ctx.seed, "params": params.model_dump(),
        "data_prep_sha256": sha256_file(Path(__file__)),
    }  # fmt: skip
    if sources_info is not None:
        manifest["embedded_sources"] = sources_info
    for metric, path in heldout.items():
        _add_output(manifest, path, key=f"heldout/{metric}.jsonl")
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, default=str) + "\n")
    return {**counts, "heldout": {m: str(p) for m, p in heldout.items()}}


def load_chat_tokenizer(path: Path | None) -> Any:
    """Return the input checkpoint's tokenizer; lengths are measured under its chat template."""
    if path is None:
        raise ValueError("00_sft data prep needs the input checkpoint's tokenizer (ctx.tokenizer_dir)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if not tok.chat_template:
        raise ValueError(f"{path}: tokenizer has no chat template; lengths must be measured under one")
    return tok


def production_specs(params: Params) -> list[SourceSpec]:
    """Return the registered sources named in ``params.sources`` with their pins and local copies."""
    stray = sorted((set(params.revisions) | set(params.local_files)) - set(params.sources))
    if stray:
        raise ValueError(f"data.revisions/local_files name sources not in data.sources: {stray}")
    specs = []
    for name in params.sources:
        spec = get_source(name)
        if name in params.revisions:
            spec = replace(spec, revision=params.revisions[name])
        if name in params.local_files:
            spec = spec.with_local_files(*params.local_files[name])
        specs.append(spec)
    return specs


def check_pinned(specs: list[SourceSpec], allow_unpinned: bool) -> None:
    """Raise ValueError naming every hub source without a pinned revision (unless allowed)."""
    unpinned = [f"{s.name} ({s.hub_id})" for s in specs if s.revision is None and not s.local_files]
    if unpinned and not allow_unpinned:
        raise ValueError(
            f"{len(unpinned)} SFT source(s) have no pinned revision: {', '.join(unpinned)}; set "
            "data.revisions.<name>: <commit> (or data.allow_unpinned: true to stream them unpinned)"
        )


def check_benchmarks(params: Params) -> None:
    """Raise FileNotFoundError when a required benchmark has no local file or a given file is absent."""
    missing = [b for b in params.required_benchmarks if b not in params.benchmarks]
    absent = [f"{b}={p}" for b, p in params.benchmarks.items() if not Path(p).exists()]
    if missing or absent:
        raise FileNotFoundError(
            "SFT decontamination needs a local file per benchmark (data.benchmarks.<name>: <path>); "
            f"missing: {missing or 'none'}; files not found: {absent or 'none'}"
        )


def screen_items(heldout: dict[str, Path], metrics: list[str], n: int, seed: int) -> Items:
    """Return the held-out sets as screen items: the files written, then later stages' sets (``n`` each)."""
    sets = {m: [(r["id"], prompt_text(r)) for _, r in read_jsonl(p)] for m, p in heldout.items()}
    for metric in metrics:
        if metric not in sets and n:
            sets[metric] = [(t.id, prompt_text(t.prompt_row())) for t in heldout_tasks(metric, n, seed)]
    return [(f"heldout:{m}", [BenchmarkItem(i, t) for i, t in rows], False) for m, rows in sets.items()]


def in_heldout_slice(sample_id: str, fraction: float, seed: int) -> bool:
    """Whether the example's conversation (id without ``#k``) is in the held-out loss slice (stable hash)."""
    digest = hashlib.sha256(f"{seed}:{sample_id.rsplit('#', 1)[0]}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def finish(
    out: Path, manifest: dict[str, Any], items: Items, index: PhraseIndex, params: Params, seed: int, tok: Any
) -> dict[str, int]:
    """Screen ``sft.jsonl`` against the held-out items and split it into train/held-out files.

    Removed rows are taken out of the mixture report (measured as the builder measured them) and the
    manifest gains both steps; ``sft.jsonl`` is removed since the two files partition it.
    """
    malformed, report = MalformedCounter(), new_report(index, items)
    mixture = MixtureAccumulator("tokens")
    for row in manifest["mixture"]:
        mixture.samples[row["category"]], mixture.loss[row["category"]] = row["samples"], row["loss"]
    mix_path = out / "sft.jsonl"
    with JsonlWriter(out / "train.jsonl") as train, JsonlWriter(out / "heldout_sft.jsonl") as held:
        rows = read_jsonl(mix_path, malformed)
        for row, match in screen_rows(rows, index, report, malformed, workers=params.workers):
            if match is not None:
                sample = SFTSample.model_validate(row)
                mixture.samples[sample.category] -= 1
                mixture.loss[sample.category] -= measure(sample, tok)[1]
            elif in_heldout_slice(row["id"], params.heldout_sft_fraction, seed):
                held.write(row)
            else:
                train.write(row)
    mix_path.unlink()
    manifest["outputs"].pop("sft.jsonl", None)
    manifest["steps"] += [
        {
            "step": "heldout_screen",
            "count": report.kept,
            "removed_per_set": dict(report.removed_per_benchmark),
        },
        {"step": "heldout_sft_slice", "count": train.count, "heldout_sft": held.count},
    ]
    manifest["heldout_decontamination"] = {"rule": screen_rule(drop_shared=True), **report.as_dict()}
    manifest["mixture"] = mixture.rows()
    manifest["mixture_scope"] = "train.jsonl + heldout_sft.jsonl"
    manifest["malformed"]["post_build"] = malformed.as_dict()
    _add_output(manifest, out / "train.jsonl", train.close())
    _add_output(manifest, out / "heldout_sft.jsonl", held.close())
    for path in mixture.write(out).values():
        _add_output(manifest, path)
    return {
        "train": train.count,
        "heldout_sft": held.count,
        "heldout_screen_removed": len(report.removed_ids),
    }


def _add_output(manifest: dict[str, Any], path: Path, sha: str | None = None, key: str | None = None) -> None:
    manifest["outputs"][key or path.name] = {"path": str(path), "sha256": sha or sha256_file(path)}
