"""Data prep of the calculator stage: agent task rows from the stage's own tiny task family.

Steps, each counted in ``manifest.json`` (``data_prep.rl_stage``): held-out sets (``calculator_success``
from this stage's ``env.py``, plus any guardrail metric) → generated train tasks → exact overlap with the
held-out prompts → 8-gram decontamination against them → correctness (the reference answer scores 1 under
``agent_calculator``). Both profiles generate the tasks offline (there is no public release to load); the
production profile only takes more of them. Each row carries its episode (``metadata.task_id``,
``limits``, ``environment``), which is what the embedded agent loop and slime's generate hook read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep.manifest import Manifest
from data_prep.rl_stage import prepare_prompts, screened_tiny_tasks
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import generate
from infra.recipe import import_stage_file

ENV = import_stage_file(Path(__file__).with_name("env.py"))  # registers the family and the metric


class Params(BaseModel):
    """The ``data`` section of calculator_agent/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    train_tasks: int = Field(description="Generated training tasks before filtering.")
    heldout_per_metric: int = Field(96, ge=1, description="Rows per held-out metric set.")


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    kind, code = "rl_prompts:calculator_agent", [Path(__file__), Path(ENV.__file__)]
    return prepare_prompts(ctx, kind, Params, code, _rows, lambda p, held, m: _rows(p, ctx.seed, held, m))


def _rows(params: Params, seed: int, heldout: dict[str, Path], manifest: Manifest) -> list[PromptRow]:
    manifest.add_source({"name": f"tiny_tasks:{ENV.FAMILY}", "license": "generated"})
    tasks = generate(ENV.FAMILY, params.train_tasks, seed, "train")
    manifest.step("generated", len(tasks))
    rule = "reference answer scores 1.0 under agent_calculator"
    tasks = screened_tiny_tasks(tasks, heldout, manifest, "correctness", rule)
    return [t.prompt_row() for t in tasks]
