"""Production data synthesis of IF RL (paper §3.4): the ``data.synthesis`` settings and the run of both kinds.

What the paper does: a teacher LLM (Qwen3-235B-A22B) turns a hand-written single-constraint pool into
multi-constraint instructions with one Python checker per constraint, and plays an adversarial user
against several rotating open-weight assistants to build multi-turn conversations with code or judge
rubrics; a sanity filter drops overlong conversations and downsamples expected refusals.

What is ours: every teacher and assistant is any OpenAI-compatible endpoint (``Endpoint``, called through
``data_prep.teacher.ChatClient``), replies are strict JSON, every teacher-written checker is compiled and
run on a teacher-written reference in the sandbox before a row is kept, and every drop is counted in the
manifest. The kinds live in :mod:`data_prep.if_synthesis_constraints` and
:mod:`data_prep.if_synthesis_multiturn`; :func:`synthesise` runs both and records the steps
``synthesis_multi_constraint``, ``synthesis_multi_turn`` and ``sanity``. The stage's later steps (overlap,
decontamination, teacher quality, policy difficulty) then run on these rows like on loaded ones.

Example ``data.synthesis`` section (03_if_rl/launch.yaml)::

    synthesis:
      teacher: {base_url: http://teacher:30000/v1, model: Qwen/Qwen3-235B-A22B}
      assistants:
        - {base_url: http://a1:30000/v1, model: org/open-model-a}
        - {base_url: http://a2:30000/v1, model: org/open-model-b}
      multi_constraint: 20000
      multi_turn: 20000
      queries: [/data/if/queries.jsonl]
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.if_synthesis_constraints import SYNTH_IDS, synthesise_multi_constraint
from data_prep.if_synthesis_multiturn import sanity_filter, synthesise_multi_turn
from data_prep.io import MalformedCounter, read_jsonl
from data_prep.manifest import Manifest
from data_prep.rl_stage import Endpoint
from data_prep.schema import PromptRow

_HERE = Path(__file__).resolve().parent
CODE_FILES: tuple[Path, ...] = tuple(
    _HERE / f"{name}.py"
    for name in ("if_synthesis", "if_synthesis_common", "if_synthesis_constraints", "if_synthesis_multiturn")
)


class SynthesisParams(BaseModel):
    """The ``data.synthesis`` section of 03_if_rl: teacher-written rows that join the loaded ones."""

    model_config = ConfigDict(extra="forbid")
    teacher: Endpoint = Field(description="Writes instructions, checkers, user turns and rubrics.")
    assistants: list[Endpoint] = Field(
        default_factory=list, description="Answer the multi-turn conversations, one per conversation in turn."
    )
    multi_constraint: int = Field(0, ge=0, description="Multi-constraint prompts to attempt.")
    multi_turn: int = Field(0, ge=0, description="Multi-turn conversations to attempt.")
    new_constraints: tuple[int, int] = Field(
        (0, 2), description="Teacher-invented constraints per prompt (the rest come from the pool)."
    )
    constraint_ids: list[str] = Field(
        default_factory=lambda: list(SYNTH_IDS), description="Pool constraint ids to draw from."
    )
    queries: list[str] = Field(
        default_factory=list,
        description="JSONL files of base user requests: multi-constraint base tasks and multi-turn topics.",
    )
    query_key: str = Field("query", description="Field of a query record holding the request text.")
    mean_turns: float = Field(6.0, description="Mean turns per conversation, final reply included (RA: 6.1).")
    max_turns: int = Field(12, ge=4, description="Cap on turns per conversation.")
    system_prompt_fraction: float = Field(0.3, ge=0, le=1, description="Conversations with a system prompt.")
    refusal_fraction: float = Field(0.1, ge=0, le=1, description="Most expected-refusal rows kept (share).")
    max_chars: int = Field(
        24000,
        ge=1,
        description="Longest conversation kept, in characters (~6K tokens, under the 8K prompt cap).",
    )
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of teacher and assistants.")
    max_tokens: int | None = Field(None, ge=1, description="Completion cap of teacher calls.")
    workers: int = Field(4, ge=1, description="Attempts in flight at once.")
    json_schema: bool = Field(
        True,
        description="Send each teacher reply's JSON schema as response_format (SGLang/vLLM decode to it).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SynthesisParams:
        lo, hi = self.new_constraints
        if not 0 <= lo <= hi:
            raise ValueError(f"new_constraints: expected [lo, hi] with 0 <= lo <= hi, got {[lo, hi]}")
        unknown = sorted(set(self.constraint_ids) - set(SYNTH_IDS))
        if unknown or not self.constraint_ids:
            raise ValueError(
                f"constraint_ids: unknown or empty {unknown}; choose from {', '.join(SYNTH_IDS)}"
            )
        top = 2 * (self.max_turns // 2)
        if not 4 <= self.mean_turns <= top:
            raise ValueError(
                f"mean_turns must lie in [4, {top}] (max_turns {self.max_turns}), got {self.mean_turns}"
            )
        if self.multi_turn and not self.assistants:
            raise ValueError("assistants: multi_turn > 0 needs at least one assistant endpoint")
        return self


def load_queries(params: SynthesisParams, malformed: MalformedCounter) -> list[str]:
    """Return the non-empty ``query_key`` strings of the query files; other records are counted."""
    out = []
    for path in params.queries:
        for where, rec in read_jsonl(path, malformed):
            text = rec.get(params.query_key)
            if isinstance(text, str) and text.strip():
                out.append(text.strip())
            else:
                malformed.add("query_missing_or_empty", where, f"no string {params.query_key!r}")
    return out


def synthesise(
    params: SynthesisParams, constraints_per_prompt: tuple[int, int], seed: int, manifest: Manifest
) -> list[PromptRow]:
    """Run both synthesis kinds and the sanity filter; record each step and the source in ``manifest``."""
    malformed = MalformedCounter()
    queries = load_queries(params, malformed)
    manifest.add_source(
        {
            "name": "if_synthesis",
            "license": "generated",
            "teacher": params.teacher.model,
            "assistants": [a.model for a in params.assistants],
            "queries": params.queries,
            "queries_loaded": len(queries),
            "queries_malformed": malformed.as_dict(),
        }
    )
    common = {
        "temperature": params.temperature,
        "max_tokens": params.max_tokens,
        "workers": params.workers,
        "json_schema": params.json_schema,
    }
    mc = synthesise_multi_constraint(
        params.teacher,
        params.multi_constraint,
        seed,
        constraints_per_prompt=constraints_per_prompt,
        new_constraints=params.new_constraints,
        queries=queries,
        constraint_ids=params.constraint_ids,
        **common,
    )
    manifest.step("synthesis_multi_constraint", len(mc.rows), **mc.manifest_fields())
    mt = synthesise_multi_turn(
        params.teacher,
        params.assistants,
        params.multi_turn,
        seed,
        mean_turns=params.mean_turns,
        max_turns=params.max_turns,
        system_prompt_fraction=params.system_prompt_fraction,
        topics=queries,
        **common,
    )
    manifest.step("synthesis_multi_turn", len(mt.rows), **mt.manifest_fields())
    conversations, counts = sanity_filter(mt.rows, params.max_chars, params.refusal_fraction, seed)
    manifest.step("sanity", len(conversations), **counts)
    return mc.rows + conversations
