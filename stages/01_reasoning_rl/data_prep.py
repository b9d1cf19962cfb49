"""Data prep of Reasoning RL (paper §3.2, Table 5): math, science and puzzle prompts with binary verifiers.

Steps, each counted in ``manifest.json``: load → family by keyword heuristic (where the source has no
subject) → exact overlap with the held-out sets → 8-gram decontamination → correctness → learnability.

* **embedded**: prompts come from ``data_prep.tiny_tasks`` (math word problems, reasoning-gym puzzles,
  science QA). Correctness is the generator's reference solution scored by the stage's own reward (it
  stands in for the strong teacher); learnability samples the stage's input checkpoint (the policy RL
  starts from) ``learnability.samples`` times per prompt at temperature 1.0, within the RL response
  budget, and applies the paper's rule — the online (0, 0.8] band filter of the trainer still applies.
* **production**: prompts are streamed by hub id with ``datasets.load_dataset`` (or from local JSONL
  copies given in ``sources[].local_files``); decontamination uses local copies of the benchmarks
  (``benchmarks``); correctness asks the teacher endpoint (``teacher``) for ``teacher_samples`` answers
  and learnability the current policy's endpoint (``policy``) for ``learnability.samples``, both scored
  with the stage's reward through ``data_prep.filters``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data_prep import filters
from data_prep.io import MalformedCounter
from data_prep.manifest import Manifest
from data_prep.rl_stage import (
    Endpoint,
    benchmark_items,
    cap_families,
    checkpoint_filter,
    endpoint_filter,
    load_sources,
    prepare_prompts,
    screen_against_evals,
    screened_tiny_tasks,
    source_records,
)
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import generate
from data_prep.tiny_tasks.common import int_seed
from rewards.contract import get_reward
from rewards.reasoning import FAMILIES, assign_family


class Learnability(BaseModel):
    """Offline pass-rate band: drop pass rate > drop_above and (if drop_zero) never-solved prompts."""

    model_config = ConfigDict(extra="forbid")
    samples: int = Field(8, ge=1, description="Policy samples per prompt.")
    drop_above: float = Field(0.8, description="Drop prompts solved more often than this.")
    drop_zero: bool = Field(True, description="Drop prompts with zero observed success.")


class RLSource(BaseModel):
    """One prompt source: a hub dataset (or local JSONL copies) and the fields holding problem/answer."""

    model_config = ConfigDict(extra="forbid")
    name: str
    hub_id: str
    revision: str | None = Field(None, description="Hub commit to pin; recorded as 'unpinned' when None.")
    config: str | None = None
    split: str = "train"
    question_key: str = "question"
    answer_key: str = "answer"
    family: str | None = Field(None, description="Family of every row; None = keyword heuristic per row.")
    license: str = "see hub page"
    local_files: list[str] = Field(
        default_factory=list, description="Read these JSONL files instead of the hub."
    )


class Params(BaseModel):
    """The ``data`` section of 01_reasoning_rl/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    families: dict[str, int] = Field(description="Prompts per family after filtering (Table 5).")
    learnability: Learnability = Field(default_factory=Learnability)
    teacher_correctness: bool = Field(True, description="Drop prompts the strong teacher never solves.")
    teacher_samples: int = Field(
        4, ge=1, description="Teacher samples per prompt for the correctness screen."
    )
    heldout_per_metric: int = Field(200, ge=1, description="Rows per held-out metric set.")
    sources: list[RLSource] = Field(default_factory=list, description="Production prompt sources.")
    benchmarks: dict[str, str] = Field(default_factory=dict, description="Benchmark name -> local file.")
    teacher: Endpoint | None = None
    policy: Endpoint | None = None

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: dict[str, int]) -> dict[str, int]:
        unknown = set(v) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)}; expected keys among {FAMILIES}")
        return v


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    kind, code = "rl_prompts:01_reasoning_rl", [Path(__file__)]

    return prepare_prompts(ctx, kind, Params, code, partial(_embedded_rows, ctx=ctx), _production_rows)


def _learnability_rule(params: Params) -> filters.BandRule:
    return filters.BandRule(
        "reasoning_learnability",
        params.learnability.samples,
        drop_above=params.learnability.drop_above,
        drop_zero=params.learnability.drop_zero,
    )


def _embedded_rows(
    params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest, *, ctx: Any
) -> list[PromptRow]:
    manifest.add_source(
        {"name": "data_prep.tiny_tasks", "families": list(params.families), "license": "generated"}
    )
    tasks = [t for fam, n in params.families.items() for t in generate(fam, n, seed, "train")]
    manifest.step("generated", len(tasks))
    rule = "reference solution scores 1.0 under the stage reward"
    tasks = screened_tiny_tasks(tasks, heldout, manifest, "correctness", rule)
    rows = [t.prompt_row() for t in tasks]
    if ctx.tokenizer_dir is None:
        manifest.step("learnability", len(rows), skipped=True, reason="no input checkpoint to sample")
        return rows
    return checkpoint_filter(
        rows,
        Path(ctx.tokenizer_dir),
        _learnability_rule(params),
        get_reward("reasoning"),
        manifest,
        "learnability",
        max_new_tokens=ctx.stage.config.rl.rollout.max_response_tokens,
        seed=int_seed(seed, "01_reasoning_rl", "learnability"),
    )


def source_rows(source: RLSource, malformed: MalformedCounter) -> list[PromptRow]:
    """Return the prompt rows of one source (hub via ``datasets.load_dataset``, or its local files)."""
    records = source_records(
        source.local_files,
        source.hub_id,
        malformed,
        split=source.split,
        revision=source.revision,
        config=source.config,
    )
    rows = []
    for where, rec in records:
        question, answer = rec.get(source.question_key), rec.get(source.answer_key)
        if not isinstance(question, str) or not question.strip() or answer in (None, ""):
            malformed.add(
                "missing_question_or_answer", where, f"keys {source.question_key}/{source.answer_key}"
            )
            continue
        family = source.family or assign_family(question)
        rows.append(
            PromptRow(
                id=f"{source.name}-{len(rows)}",
                prompt=[{"role": "user", "content": question}],
                label=str(answer),
                metadata={
                    "reward": "reasoning",
                    "family": family,
                    "answer_format": "boxed",
                    "source": source.name,
                },
            )
        )
    return rows


def _production_rows(params: Params, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
    rows = load_sources(params.sources, source_rows, manifest)
    rows = screen_against_evals(rows, heldout, benchmark_items(params.benchmarks), manifest)
    reward = get_reward("reasoning")
    rows = endpoint_filter(
        rows,
        params.teacher if params.teacher_correctness else None,
        filters.teacher_solvability(params.teacher_samples),
        reward,
        manifest,
        "correctness",
    )
    rows = endpoint_filter(rows, params.policy, _learnability_rule(params), reward, manifest, "learnability")
    return cap_families(rows, params.families, manifest, "family_caps")
