"""Data prep of IF RL (paper §3.4): multi-constraint prompts and multi-turn adversarial conversations.

Every row's label is a list of rubrics (``rewards.instruction_following``) and the reward is 1 only when
all pass. Steps, each counted in ``manifest.json``: synthesis/load → rubric validation → exact overlap
with the held-out sets → 8-gram decontamination → quality (teacher passes at least once in
``quality_attempts``) → difficulty (drop pass rate > ``difficulty.drop_above`` over ``difficulty.samples``).

* **embedded**: no LLM can play teacher, so ``data_prep.tiny_tasks.instructions`` composes prompts and
  conversations deterministically from the same constraint pool and rubric format (code rubrics only:
  no judge exists offline). Quality is the constructive reference answer passing every rubric; the
  model-based difficulty pass is skipped and recorded as such.
* **production**: teacher-synthesised rows (``PromptRow`` JSONL with rubric labels) are read by hub id
  with ``datasets.load_dataset`` or from local files; quality and difficulty call the ``teacher`` and
  ``policy`` endpoints through ``data_prep.filters``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from data_prep import filters
from data_prep.io import MalformedCounter, read_jsonl, write_jsonl
from data_prep.manifest import Manifest
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import instructions
from data_prep.tiny_tasks.rl_prep import (
    decontaminate,
    drop_heldout_overlap,
    heldout_benchmarks,
    load_rows,
    reference_self_check,
    rows_to_jsonl,
    write_stage_heldout,
)
from rewards.contract import get_reward
from rewards.instruction_following import validate_rubrics


class Difficulty(BaseModel):
    """Drop prompts the policy already passes more often than ``drop_above`` over ``samples``."""

    model_config = ConfigDict(extra="forbid")
    samples: int = Field(8, ge=1)
    drop_above: float = Field(0.8, ge=0, le=1)


class Endpoint(BaseModel):
    """An OpenAI-compatible chat endpoint (SGLang in production)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str
    model: str
    api_key_env: str | None = None


class RowSource(BaseModel):
    """Teacher-synthesised rows (PromptRow JSONL with rubric labels) on the hub or on local disk."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: str = Field(description="'multi_constraint' or 'multi_turn'.")
    hub_id: str | None = None
    revision: str | None = None
    split: str = "train"
    local_files: list[str] = Field(default_factory=list)


class Params(BaseModel):
    """The ``data`` section of 03_if_rl/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    multi_constraint: int = Field(ge=0, description="Single-turn multi-constraint prompts to keep.")
    multi_turn: int = Field(ge=0, description="Multi-turn conversations to keep.")
    constraints_per_prompt: tuple[int, int] = Field((2, 6), description="Atomic constraints per prompt.")
    difficulty: Difficulty = Field(default_factory=Difficulty)
    quality_attempts: int = Field(4, ge=1, description="Teacher attempts; at least one must pass.")
    heldout_per_metric: int = Field(200, ge=1)
    sources: list[RowSource] = Field(default_factory=list, description="Production row sources.")
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    teacher: Endpoint | None = None
    policy: Endpoint | None = None

    @field_validator("constraints_per_prompt")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1]:
            raise ValueError(f"expected [lo, hi] with 1 <= lo <= hi, got {list(v)}")
        return v


def _params(ctx: Any) -> Params:
    p = ctx.params
    return p if isinstance(p, Params) else Params.model_validate(p)


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    params = _params(ctx)
    manifest = Manifest(
        "rl_prompts:03_if_rl",
        args={**params.model_dump(), "profile": ctx.profile, "seed": ctx.seed},
        code_files=[Path(__file__)],
    )
    cfg = ctx.stage.config.eval
    heldout = write_stage_heldout(
        [*cfg.targets, *cfg.guardrails], params.heldout_per_metric, ctx.seed, ctx.heldout_dir
    )
    for path in heldout.values():
        manifest.add_output(path)
    if ctx.profile == "embedded":
        rows = _embedded_rows(params, ctx.seed, heldout, manifest)
    else:
        rows = _production_rows(params, heldout, manifest)
    train = ctx.out_dir / "train.jsonl"
    manifest.add_output(train, write_jsonl(train, rows_to_jsonl(rows)))
    manifest.write(ctx.out_dir / "manifest.json")
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row.metadata["family"]] = kinds.get(row.metadata["family"], 0) + 1
    return {"train": len(rows), "families": kinds, "heldout": {m: str(p) for m, p in heldout.items()}}


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest
) -> list[PromptRow]:
    manifest.add_source(
        {
            "name": "data_prep.tiny_tasks.instructions",
            "license": "generated",
            "note": "deterministic stand-in for the teacher LLM; code rubrics only (no judge offline)",
        }
    )
    tasks = instructions.multi_constraint(
        params.multi_constraint, seed, "train", params.constraints_per_prompt
    )
    tasks += instructions.multi_turn(params.multi_turn, seed, "train")
    manifest.step("synthesised", len(tasks))
    tasks, overlap = drop_heldout_overlap(tasks, load_rows(heldout.values()))
    manifest.step("heldout_overlap", len(tasks), dropped=overlap)
    tasks, report = decontaminate(tasks, heldout_benchmarks(heldout))
    manifest.set("decontamination", report)
    manifest.step("decontamination", len(tasks), dropped=report["removed"])
    tasks, failures = reference_self_check(tasks)
    manifest.step(
        "quality", len(tasks), rule="constructive reference passes every rubric", dropped_by_reason=failures
    )
    manifest.step(
        "difficulty",
        len(tasks),
        skipped=True,
        reason="no policy samples for an offline pass-rate at tiny scale",
    )
    return [t.prompt_row() for t in tasks]


def source_rows(source: RowSource, malformed: MalformedCounter) -> list[PromptRow]:
    """Return the valid rows of one source; rows with a bad schema or bad rubrics are dropped and counted."""
    if source.local_files:
        records = ((w, r) for f in source.local_files for w, r in read_jsonl(f, malformed))
    elif source.hub_id:
        import datasets

        stream = datasets.load_dataset(
            source.hub_id, split=source.split, revision=source.revision, streaming=True
        )
        records = ((f"{source.hub_id}#{i}", dict(r)) for i, r in enumerate(stream))
    else:
        raise ValueError(f"data.sources[{source.name}]: give hub_id or local_files")
    family = "if_multi_constraint" if source.kind == "multi_constraint" else "if_multiturn"
    rows = []
    for where, rec in records:
        try:
            row = PromptRow.model_validate(rec)
            validate_rubrics(row.label)
        except (ValidationError, ValueError) as exc:
            malformed.add("bad_row_or_rubrics", where, str(exc).splitlines()[0][:160])
            continue
        row.metadata = {**row.metadata, "reward": "if_rubrics", "family": family, "source": source.name}
        rows.append(row)
    return rows


def _production_rows(params: Params, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
    malformed = MalformedCounter()
    rows: list[PromptRow] = []
    for source in params.sources:
        manifest.add_source({**source.model_dump(), "revision": source.revision or "unpinned"})
        rows += source_rows(source, malformed)
    manifest.set("malformed", malformed.as_dict())
    manifest.step("loaded", len(rows))
    rows, overlap = drop_heldout_overlap(rows, load_rows(heldout.values()))
    manifest.step("heldout_overlap", len(rows), dropped=overlap)
    from data_prep.benchmarks import load_benchmark

    benchmarks = {n: [(i.id, i.text) for i in load_benchmark(n, p)] for n, p in params.benchmarks.items()}
    rows, report = decontaminate(rows, benchmarks)
    manifest.set("decontamination", report)
    manifest.step("decontamination", len(rows), dropped=report["removed"])
    reward = get_reward("if_rubrics")
    rows = _endpoint_filter(
        rows,
        params.teacher,
        filters.teacher_solvability(params.quality_attempts),
        reward,
        manifest,
        "quality",
    )
    rule = filters.BandRule(
        "if_difficulty", params.difficulty.samples, drop_above=params.difficulty.drop_above
    )
    rows = _endpoint_filter(rows, params.policy, rule, reward, manifest, "difficulty")
    caps = {"if_multi_constraint": params.multi_constraint, "if_multiturn": params.multi_turn}
    seen = dict.fromkeys(caps, 0)
    kept = []
    for row in rows:
        fam = row.metadata["family"]
        if seen[fam] < caps[fam]:
            seen[fam] += 1
            kept.append(row)
    manifest.step("caps", len(kept), per_family=seen)
    return kept


def _endpoint_filter(
    rows: list[PromptRow],
    endpoint: Endpoint | None,
    rule: filters.BandRule,
    reward: Any,
    manifest: Manifest,
    step: str,
) -> list[PromptRow]:
    if endpoint is None:
        manifest.step(step, len(rows), skipped=True, reason=f"no endpoint configured for the {step} filter")
        return rows
    import os

    from data_prep.teacher import ChatClient

    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    client = ChatClient(endpoint.base_url, endpoint.model, api_key=key)
    report = filters.filter_prompts(rows, rule, client.as_generate(temperature=1.0), reward)
    manifest.step(step, len(report.kept), **report.counts())
    return report.kept
