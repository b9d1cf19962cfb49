"""Data prep of IF RL (paper §3.4): multi-constraint prompts and multi-turn adversarial conversations.

Every row's label is a list of rubrics (``rewards.instruction_following``) and the reward is 1 only when
all pass. Steps, each counted in ``manifest.json``: synthesis/load → rubric validation → exact overlap
with the held-out sets → 8-gram decontamination → quality (teacher passes at least once in
``quality_attempts``) → difficulty (drop pass rate > ``difficulty.drop_above`` over ``difficulty.samples``).

* **embedded**: no LLM can play teacher, so ``data_prep.tiny_tasks.instructions`` composes prompts and
  conversations deterministically from the same constraint pool and rubric format (code rubrics only:
  no judge exists offline). Quality is the constructive reference answer passing every rubric; the
  model-based difficulty pass is skipped and recorded as such.
* **production**: rows already synthesised (``PromptRow`` JSONL with rubric labels) are read by hub id
  with ``datasets.load_dataset`` or from local files; with a ``synthesis`` section, the teacher writes
  new rows first (``data_prep.if_synthesis``: multi-constraint prompts with sandbox-checked checkers,
  adversarial conversations against rotating assistants, the sanity filter) and they join the loaded
  ones. Quality and difficulty then call the ``teacher`` and ``policy`` endpoints through
  ``data_prep.filters``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from data_prep import filters, if_synthesis
from data_prep.io import MalformedCounter
from data_prep.manifest import Manifest
from data_prep.rl_stage import (
    Endpoint,
    benchmark_items,
    cap_families,
    endpoint_filter,
    load_sources,
    prepare_prompts,
    screen_against_evals,
    screened_tiny_tasks,
    source_records,
)
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import instructions
from rewards.contract import get_reward
from rewards.instruction_following import validate_rubrics


class Difficulty(BaseModel):
    """Drop prompts the policy already passes more often than ``drop_above`` over ``samples``."""

    model_config = ConfigDict(extra="forbid")
    samples: int = Field(8, ge=1)
    drop_above: float = Field(0.8, ge=0, le=1)


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
    synthesis: if_synthesis.SynthesisParams | None = Field(
        None, description="Teacher synthesis run before the filters (production); its rows join the sources'."
    )
    teacher: Endpoint | None = None
    policy: Endpoint | None = None

    @field_validator("constraints_per_prompt")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1]:
            raise ValueError(f"expected [lo, hi] with 1 <= lo <= hi, got {list(v)}")
        return v


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    kind, code = "rl_prompts:03_if_rl", [Path(__file__), *if_synthesis.CODE_FILES]
    production = partial(_production_rows, seed=ctx.seed)
    return prepare_prompts(ctx, kind, Params, code, _embedded_rows, production)


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
    rule = "constructive reference passes every rubric"
    tasks = screened_tiny_tasks(tasks, heldout, manifest, "quality", rule)
    manifest.step(
        "difficulty",
        len(tasks),
        skipped=True,
        reason="no policy samples for an offline pass-rate at tiny scale",
    )
    return [t.prompt_row() for t in tasks]


def source_rows(source: RowSource, malformed: MalformedCounter) -> list[PromptRow]:
    """Return the valid rows of one source; rows with a bad schema or bad rubrics are dropped and counted."""
    if not source.local_files and not source.hub_id:
        raise ValueError(f"data.sources[{source.name}]: give hub_id or local_files")
    records = source_records(
        source.local_files, source.hub_id, malformed, split=source.split, revision=source.revision
    )
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


def _production_rows(
    params: Params, heldout: dict[str, Path], manifest: Manifest, *, seed: int
) -> list[PromptRow]:
    rows = load_sources(params.sources, source_rows, manifest)
    if params.synthesis is not None:
        rows += if_synthesis.synthesise(params.synthesis, params.constraints_per_prompt, seed, manifest)
        manifest.step("joined", len(rows))
    rows = screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)
    reward = get_reward("if_rubrics")
    rows = endpoint_filter(
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
    rows = endpoint_filter(rows, params.policy, rule, reward, manifest, "difficulty")
    caps = {"if_multi_constraint": params.multi_constraint, "if_multiturn": params.multi_turn}
    return cap_families(rows, caps, manifest, "caps")
