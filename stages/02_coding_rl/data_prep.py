"""Data prep of Coding RL (paper §3.3, Table 7): unit-tested Python problems in two modalities.

Steps, each counted in ``manifest.json``: load → modality-specific system prompt → schema → dedup (SHA-256
of the normalised statement) → LiveCodeBench v6 leakage (400-char prefix hash, ≥5 shared character
60-grams) → reference self-check in the sandbox → teacher solvability → drop-all-pass on warm-up samples
of the *input* checkpoint (zero-pass problems stay; nothing is re-filtered during training).

* **embedded**: problems come from ``data_prep.tiny_tasks.code`` (functional and stdin/stdout), one
  generator stream per source, unless a source's spec names ``local_files``. The leakage index is the
  ``code_pass1`` held-out set. The reference solution, run in the sandbox under the stage's reward,
  stands in for the teacher (the manifest records the teacher screen as skipped and why). The warm-up
  is real: ``warmup_samples`` samples per problem from the checkpoint in ``ctx.tokenizer_dir`` at
  temperature 1.0 with the stage's response budget, scored in one sandbox batch.
* **production**: sources are streamed by hub id at pinned revisions (``specs.<name>.revision``; unpinned
  sources stop the run, named, unless ``allow_unpinned``) or read from ``specs.<name>.local_files``; the
  leakage index is the local LiveCodeBench ``release_v6`` files (``lcb_files``); the teacher (``teacher``)
  and the policy serving the input checkpoint (``policy``) are OpenAI-compatible endpoints.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep import code_problems, filters
from data_prep.code_problems import (
    MODALITIES,
    CodeSource,
    Problem,
    check_pinned,
    generated_problems,
    lcb_problems,
    source_problems,
)
from data_prep.dedup import CHAR_NGRAM, PREFIX_CHARS, LeakIndex, dedup_exact
from data_prep.io import MalformedCounter, sha256_file
from data_prep.manifest import Manifest
from data_prep.rl_stage import (
    Endpoint,
    checkpoint_completions,
    endpoint_generate,
    start_manifest,
    weights_sha256,
    write_train,
)
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import heldout_tasks
from data_prep.tiny_tasks.common import int_seed
from data_prep.tiny_tasks.rl_prep import prompt_text
from rewards.code_reward import MAX_TESTS, parse_problem, score_batch
from rewards.contract import RewardRequest, RewardResult

SYSTEM_PROMPTS = {
    "fn": "Solve the task by writing the requested Python function. Reply with the complete code in one "
    "fenced ```python block; it is checked by assert tests.",
    "io": "Solve the task with a Python program that reads standard input and prints to standard output. "
    "Reply with the complete code in one fenced ```python block.",
}


class LeakRule(BaseModel):
    """LiveCodeBench v6 leakage rule (RA §3.3); prefix and n-gram sizes are fixed by ``LeakIndex``."""

    model_config = ConfigDict(extra="forbid")
    prefix_chars: int = PREFIX_CHARS
    ngram: int = CHAR_NGRAM
    min_shared_ngrams: int = Field(5, ge=1)

    @model_validator(mode="after")
    def _fixed_sizes(self) -> LeakRule:
        if (self.prefix_chars, self.ngram) != (PREFIX_CHARS, CHAR_NGRAM):
            raise ValueError(
                f"lcb_leak.prefix_chars/ngram must be {PREFIX_CHARS}/{CHAR_NGRAM} (data_prep.dedup.LeakIndex)"
            )
        return self


class Params(BaseModel):
    """The ``data`` section of 02_coding_rl/launch.yaml."""

    model_config = ConfigDict(extra="forbid")
    sources: dict[str, int] = Field(
        description="Problems per source: Table 7 (production), generated (embedded)."
    )
    specs: dict[str, CodeSource] = Field(description="Where each source lives; one entry per source.")
    max_tests: int = Field(MAX_TESTS, description="Tests per problem the reward runs (fixed by the reward).")
    warmup_samples: int = Field(4, ge=1, description="Policy samples per problem for drop-all-pass.")
    drop_above: float = Field(0.8, description="Drop problems whose warm-up pass rate exceeds this.")
    drop_zero_pass: bool = Field(
        False, description="Also drop problems no warm-up sample solved (RA keeps them; off by default)."
    )
    teacher_solvability: bool = Field(True, description="Keep only problems one teacher sample solves.")
    teacher_samples: int = Field(4, ge=1, description="Teacher samples per problem (count not given in RA).")
    lcb_leak: LeakRule = Field(default_factory=LeakRule)
    heldout_per_metric: int = Field(200, ge=1, description="Rows per held-out metric set.")
    system_prompts: dict[str, str] = Field(default_factory=lambda: dict(SYSTEM_PROMPTS))
    allow_unpinned: bool = Field(False, description="Stream hub sources without a pinned revision.")
    lcb_files: list[str] = Field(default_factory=list, description="Local LiveCodeBench release_v6 files.")
    teacher: Endpoint | None = None
    policy: Endpoint | None = Field(None, description="Endpoint serving the input checkpoint (production).")

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        missing = sorted(set(self.sources) - set(self.specs))
        if missing:
            raise ValueError(f"sources {missing} have no entry under specs (hub id, modality, field keys)")
        if self.max_tests != MAX_TESTS:
            raise ValueError(f"max_tests must be {MAX_TESTS}: rewards.code_reward.MAX_TESTS runs that many")
        if set(self.system_prompts) != set(MODALITIES):
            raise ValueError(f"system_prompts needs exactly the keys {MODALITIES}")
        return self


def source_specs(params: Params) -> dict[str, CodeSource]:
    """Return the spec of every configured source, in ``sources`` order."""
    return {name: params.specs[name] for name in params.sources}


def load_candidates(
    params: Params, profile: str, seed: int, manifest: Manifest | None = None
) -> list[Problem]:
    """Return all sources' problems in order: hub or local files; generated when embedded without files."""
    specs = source_specs(params)
    if profile != "embedded":
        check_pinned(specs, params.allow_unpinned)
    malformed, out, per_source = MalformedCounter(), [], {}
    for name, spec in specs.items():
        local = bool(spec.local_files) or profile != "embedded"
        probs = (
            source_problems(name, spec, malformed)
            if local
            else generated_problems(name, spec, params.sources[name], seed)
        )
        per_source[name] = len(probs)
        out += probs
        if manifest is not None:
            entry = {"name": name, **spec.model_dump(), "revision": spec.revision or "unpinned"}
            if not local:
                entry = {"name": name, "generated": "data_prep.tiny_tasks.code", "license": "generated"}
            entry["local_sha256"] = {f: sha256_file(f) for f in spec.local_files} if local else {}
            manifest.add_source(entry)
    if manifest is not None:
        manifest.set("malformed", malformed.as_dict())
        manifest.step("loaded", len(out), per_source=per_source, malformed=malformed.total)
    return out


def schema_filter(problems: list[Problem], specs: dict[str, CodeSource]) -> tuple[list[Problem], Counter]:
    """Keep problems with a valid test payload in their source's modality; set ``modality``."""
    kept, dropped = [], Counter()
    for p in problems:
        try:
            mode = parse_problem(p.label).mode
        except ValueError as exc:
            dropped[_schema_reason(str(exc))] += 1
            continue
        p.modality = "fn" if mode == "functional" else "io"
        if specs[p.source].modality not in ("mixed", p.modality):
            dropped["modality_mismatch"] += 1
            continue
        kept.append(p)
    return kept, dropped


def _schema_reason(message: str) -> str:
    """Return a short drop reason for a ``parse_problem`` error message."""
    key = re.search(r"key '(\w+)'", message)
    if key:
        return f"bad_{key.group(1)}"
    if " but " in message:
        return "inputs_outputs_length_mismatch"
    return "no_tests" if "needs" in message else "not_an_object"


def dedup(problems: list[Problem]) -> tuple[list[Problem], int]:
    """Keep the first problem of each statement key (SHA-256 of the normalised, lowercased statement)."""
    kept = [p for p, dup in dedup_exact(problems, lambda p: p.statement) if not dup]
    return kept, len(problems) - len(kept)


def leak_filter(problems: list[Problem], index: LeakIndex) -> tuple[list[Problem], dict[str, Any]]:
    """Drop problems that leak into the evaluation set; return the kept ones and a report naming each leak."""
    kept, leaks = [], []
    for p in problems:
        leak = index.check(p.statement)
        if leak is None:
            kept.append(p)
        else:
            leaks.append(
                {"id": p.id, "eval_id": leak.eval_id, "reason": leak.reason, "shared": leak.shared_ngrams}
            )
    by_reason = dict(Counter(x["reason"] for x in leaks))
    return kept, {"scanned": len(problems), "removed": len(leaks), "by_reason": by_reason, "leaks": leaks}


def _score(rows: list[PromptRow], groups: list[list[str]]) -> list[list[RewardResult]]:
    """Score every (row, response) pair in one sandbox batch; results grouped per row."""
    reqs = [
        RewardRequest(prompt=r.prompt, response=c, label=r.label, metadata=r.metadata)
        for r, group in zip(rows, groups, strict=True)
        for c in group
    ]
    flat, out = iter(score_batch(reqs)), []
    for group in groups:
        out.append([next(flat) for _ in group])
    return out


def _check_sandbox(results: list[RewardResult]) -> None:
    """Raise when no result was scored: the sandbox could not start (never read that as "all failed")."""
    if results and all(r.aborted for r in results):
        from infra.sandbox import SandboxUnavailable

        detail = results[0].details.get("error", results[0].failure)
        raise SandboxUnavailable(f"Coding RL data prep needs the code sandbox: {detail}")


def reference_check(
    problems: list[Problem], system_prompts: dict[str, str], require: bool
) -> tuple[list[Problem], dict[str, int]]:
    """Keep problems whose reference passes the stage reward in the sandbox (and, unless ``require``, those
    without a reference); return them and the drop counts by reason."""
    with_ref = [p for p in problems if p.reference is not None]
    results = [
        g[0] for g in _score([p.row(system_prompts) for p in with_ref], [[p.reference] for p in with_ref])
    ]
    _check_sandbox(results)
    verdict = {p.id: r for p, r in zip(with_ref, results, strict=True)}
    kept, counts = [], Counter()
    for p in problems:
        r = verdict.get(p.id)
        if r is None:
            counts["no_reference"] += 1
            if require:
                continue
        elif r.score != 1.0 or r.aborted:
            counts["aborted" if r.aborted else r.failure or "score_below_1"] += 1
            continue
        kept.append(p)
    return kept, dict(counts)


def screen(
    rows: list[PromptRow], groups: list[list[str]], rule: filters.BandRule
) -> tuple[filters.FilterReport, dict[str, Any]]:
    """Apply ``rule`` to sampled completions scored in one sandbox batch; return the report and stats."""
    scored = _score(rows, groups)
    results = [r for g in scored for r in g]
    _check_sandbox(results)
    # aborted samples (infrastructure) leave the denominator, as in data_prep.filters
    counts = [(sum(r.passed for r in g if not r.aborted), sum(not r.aborted for r in g)) for g in scored]
    report = filters.apply_rule(rows, counts, rule)
    stats = {
        "pass_histogram": dict(sorted(Counter(p for p, _ in counts).items())),
        "no_code_block": sum(r.failure == "no_code_block" for r in results),
        "kept_zero_pass": sum(report.pass_counts[r.id][0] == 0 for r in report.kept),
    }
    return report, stats


def _params(ctx: Any) -> Params:
    p = ctx.params
    return p if isinstance(p, Params) else Params.model_validate(p)


def leak_index(params: Params, embedded: bool, seed: int) -> tuple[LeakIndex, str, int]:
    """Return the LiveCodeBench index (the code_pass1 held-out set when embedded), its name and size."""
    if embedded:
        held = heldout_tasks("code_pass1", params.heldout_per_metric, seed)
        evals, against = [(t.id, prompt_text(t.prompt_row())) for t in held], "heldout/code_pass1"
    elif params.lcb_files:
        evals, against = (
            lcb_problems(params.lcb_files),
            "LiveCodeBench release_v6 " + ", ".join(params.lcb_files),
        )
    else:
        raise ValueError("data.lcb_files: production needs local LiveCodeBench release_v6 files (leak check)")
    return LeakIndex(evals, min_shared=params.lcb_leak.min_shared_ngrams), against, len(evals)


def _teacher_step(
    rows: list[PromptRow], params: Params, embedded: bool, manifest: Manifest
) -> list[PromptRow]:
    if not params.teacher_solvability or embedded or params.teacher is None:
        why = "no teacher endpoint configured (data.teacher)"
        if embedded:
            why = "no teacher LLM at the embedded scale; the sandboxed reference check stands in"
        if not params.teacher_solvability:
            why = "disabled (data.teacher_solvability: false)"
        manifest.step("teacher_solvability", len(rows), skipped=True, reason=why)
        return rows
    n = params.teacher_samples
    groups = endpoint_generate(params.teacher, temperature=1.0)([r.prompt for r in rows], n)
    report, stats = screen(rows, groups, filters.teacher_solvability(n))
    manifest.step("teacher_solvability", len(report.kept), **report.counts(), **stats, samples=n)
    return report.kept


def _warmup_step(rows: list[PromptRow], params: Params, ctx: Any, manifest: Manifest) -> list[PromptRow]:
    n, budget = params.warmup_samples, ctx.stage.config.rl.rollout.max_response_tokens
    seed = int_seed(ctx.seed, "02_coding_rl", "warmup")
    if ctx.profile == "embedded":
        model_dir = Path(ctx.tokenizer_dir)
        groups = checkpoint_completions(model_dir, [r.prompt for r in rows], n, budget, seed)
        policy: dict[str, Any] = {"model": str(model_dir), "weights_sha256": weights_sha256(model_dir)}
    elif params.policy is not None:
        groups = endpoint_generate(params.policy, temperature=1.0, max_tokens=budget)(
            [r.prompt for r in rows], n
        )
        policy = params.policy.model_dump()
    else:
        manifest.step("drop_all_pass", len(rows), skipped=True, reason="no policy endpoint (data.policy)")
        return rows
    rule = filters.coding_drop_all_pass(n, params.drop_above, params.drop_zero_pass)
    report, stats = screen(rows, groups, rule)
    zero = "zero-pass dropped" if params.drop_zero_pass else "zero-pass kept"
    manifest.step(
        "drop_all_pass", len(report.kept), **report.counts(), **stats, samples=n, temperature=1.0,
        max_new_tokens=budget, seed=seed, policy=policy,
        rule=f"drop pass rate > {params.drop_above}; {zero}; not repeated during training",
    )  # fmt: skip
    return report.kept


def prepare(ctx: Any) -> dict[str, Any]:
    """Write train.jsonl, heldout/<metric>.jsonl and manifest.json into ``ctx.out_dir``."""
    params, embedded = _params(ctx), ctx.profile == "embedded"
    if embedded and ctx.tokenizer_dir is None:
        raise ValueError(
            "02_coding_rl data prep needs the input checkpoint (ctx.tokenizer_dir) for the warm-up"
        )
    code_files = [Path(__file__), Path(code_problems.__file__)]
    manifest, heldout = start_manifest(ctx, "rl_prompts:02_coding_rl", params, code_files)

    problems = load_candidates(params, ctx.profile, ctx.seed, manifest)
    manifest.step("system_prompt", len(problems), prompts=params.system_prompts)
    problems, bad = schema_filter(problems, source_specs(params))
    manifest.step("schema", len(problems), dropped_by_reason=dict(bad))
    problems, dups = dedup(problems)
    manifest.step("dedup", len(problems), dropped=dups, rule="sha256 of the normalised, lowercased statement")
    index, against, n_items = leak_index(params, embedded, ctx.seed)
    problems, leak = leak_filter(problems, index)
    manifest.set(
        "decontamination", {"against": against, "items": n_items, **params.lcb_leak.model_dump(), **leak}
    )
    manifest.step("lcb_leak", len(problems), dropped=leak["removed"], by_reason=leak["by_reason"])
    problems, failures = reference_check(problems, params.system_prompts, require=embedded)
    unchecked = 0 if embedded else failures.pop("no_reference", 0)
    manifest.step(
        "reference_check", len(problems), dropped_by_reason=failures, unchecked_no_reference=unchecked,
        rule="the reference solution passes the stage's code reward in the sandbox",
    )  # fmt: skip
    rows = [p.row(params.system_prompts) for p in problems]
    rows = _teacher_step(rows, params, embedded, manifest)
    rows = _warmup_step(rows, params, ctx, manifest)

    per_source = dict(Counter(r.metadata["source"] for r in rows))
    per_modality = dict(Counter(r.metadata["modality"] for r in rows))
    table7 = None if embedded else dict(params.sources)
    manifest.step("final", len(rows), per_source=per_source, per_modality=per_modality, table7=table7)
    write_train(ctx.out_dir, rows, manifest)
    heldout_paths = {m: str(p) for m, p in heldout.items()}
    return {"train": len(rows), "sources": per_source, "modalities": per_modality, "heldout": heldout_paths}
