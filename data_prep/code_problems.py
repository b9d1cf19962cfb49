"""Coding RL problem sources: where a source's fields live, record parsing, generated and LCB problems.

* :class:`CodeSource` names a hub dataset (or local JSONL copies) and the dotted paths of its statement,
  tests (assert strings or stdin/stdout pairs), function name and reference solution;
* :func:`source_problems` reads one source into :class:`Problem` rows, dropping and counting records
  without a statement; :func:`problem_label` turns a record's tests into the code reward's label;
* :func:`generated_problems` draws the embedded profile's problems from ``data_prep.tiny_tasks.code``;
* :func:`lcb_problems` reads local LiveCodeBench files for the leakage index.

The stage folder ``stages/02_coding_rl`` is loaded by file path, so its loaders live here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.io import MalformedCounter
from data_prep.rl_stage import source_records
from data_prep.schema import PromptRow
from data_prep.tiny_tasks import generate
from data_prep.tiny_tasks.common import int_seed

MODALITIES = ("fn", "io")


class CodeSource(BaseModel):
    """One problem source: hub dataset (or local JSONL copies) and where its fields live (dotted paths)."""

    model_config = ConfigDict(extra="forbid")
    hub_id: str
    revision: str | None = Field(None, description="Hub commit to pin; production refuses None.")
    config: str | None = None
    split: str = "train"
    modality: Literal["fn", "io", "mixed"]
    modality_mix: dict[Literal["fn", "io"], int] | None = Field(None, description="fn/io counts if mixed.")
    statement_key: str = Field("question", description="Statement text, or chat messages (last user turn).")
    tests_key: str | None = Field("tests", description="Assert strings (or a JSON string of them / of io).")
    fn_name_key: str | None = None
    inputs_key: str | None = "inputs"
    outputs_key: str | None = "outputs"
    reference_key: str | None = Field(None, description="Reference solution code, if the source has one.")
    license: str = "see hub page"
    local_files: list[str] = Field(default_factory=list, description="Read these JSONL files instead.")

    @model_validator(mode="after")
    def _mix(self) -> CodeSource:
        if (self.modality == "mixed") != bool(self.modality_mix and sum(self.modality_mix.values()) > 0):
            raise ValueError(
                "modality_mix (positive fn/io counts) is required for, and only for, mixed sources"
            )
        return self


def check_pinned(specs: dict[str, CodeSource], allow_unpinned: bool) -> None:
    """Raise ValueError naming every hub source without a pinned revision (local files are hashed)."""
    unpinned = [f"{n} ({s.hub_id})" for n, s in specs.items() if s.revision is None and not s.local_files]
    if unpinned and not allow_unpinned:
        raise ValueError(
            f"{len(unpinned)} Coding RL source(s) have no pinned revision: {', '.join(unpinned)}; set "
            "data.specs.<name>.revision: <commit> (or specs.<name>.local_files, or data.allow_unpinned: true)"
        )


@dataclass
class Problem:
    """One candidate problem: statement, test payload (the reward's label) and optional reference."""

    id: str
    source: str
    statement: str
    label: dict[str, Any]
    reference: str | None = None  # a full response (fenced code), as the policy would write it
    modality: str = ""

    def row(self, system_prompts: dict[str, str]) -> PromptRow:
        """Return the RL prompt row (system prompt of the modality, if not empty, then the statement)."""
        meta = {"reward": "code", "family": "code", "modality": self.modality, "source": self.source}
        if self.label.get("fn_name"):
            meta["fn_name"] = self.label["fn_name"]
        system = system_prompts[self.modality]
        prompt = [{"role": "system", "content": system}] if system else []
        prompt.append({"role": "user", "content": self.statement})
        return PromptRow(id=self.id, prompt=prompt, label=self.label, metadata=meta)


def _dig(record: dict, path: str | None) -> Any:
    """Return the value at a dotted ``path`` of a record (None when the path is unset or absent)."""
    if not path:
        return None
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _statement(raw: Any) -> str | None:
    """Return the statement text of a record's field (text, or the last user turn of chat messages)."""
    if isinstance(raw, list):  # chat messages: the last user turn is the statement
        users = [m.get("content") for m in raw if isinstance(m, dict) and m.get("role") == "user"]
        raw = users[-1] if users else None
    return raw if isinstance(raw, str) and raw.strip() else None


def problem_label(record: dict, spec: CodeSource) -> dict[str, Any]:
    """Return the code reward's label of a record: assert ``tests`` (+ ``fn_name``), else inputs/outputs."""
    tests = _dig(record, spec.tests_key)
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            tests = [tests]
    if isinstance(tests, dict) and ("inputs" in tests or "outputs" in tests):
        return {"inputs": tests.get("inputs"), "outputs": tests.get("outputs")}
    if tests is not None:
        label = {"tests": tests}
        fn_name = _dig(record, spec.fn_name_key)
        return {**label, "fn_name": fn_name} if fn_name else label
    return {"inputs": _dig(record, spec.inputs_key), "outputs": _dig(record, spec.outputs_key)}


def source_problems(name: str, spec: CodeSource, malformed: MalformedCounter) -> list[Problem]:
    """Return the problems of one source (its local files, else the hub at its revision)."""
    records = source_records(
        spec.local_files, spec.hub_id, malformed, split=spec.split, revision=spec.revision, config=spec.config
    )
    out = []
    for where, rec in records:
        statement = _statement(_dig(rec, spec.statement_key))
        if statement is None:
            malformed.add("missing_statement", where, f"key {spec.statement_key}")
            continue
        ref = _dig(rec, spec.reference_key)
        ref = f"```python\n{ref}\n```" if isinstance(ref, str) and ref.strip() else None
        out.append(Problem(f"{name}-{len(out)}", name, statement, problem_label(rec, spec), ref))
    return out


def generated_problems(name: str, spec: CodeSource, count: int, seed: int) -> list[Problem]:
    """Return ``count`` tiny coding problems for one source, in its modality mix (embedded profile)."""
    mix = spec.modality_mix or {spec.modality: 1}
    n_fn = round(count * mix.get("fn", 0) / sum(mix.values()))
    want = {"fn": n_fn, "io": count - n_fn}
    tasks = generate("code", 2 * max(want.values()) + 1, int_seed(seed, name), "train")
    picked = [t for m in MODALITIES for t in [t for t in tasks if t.metadata["modality"] == m][: want[m]]]
    return [Problem(f"{name}-{t.id}", name, t.prompt[-1]["content"], t.label, t.response()) for t in picked]


def lcb_problems(paths: list[str]) -> list[tuple[str, str]]:
    """Return ``(question_id, question_content)`` of local LiveCodeBench files (tests are not decoded)."""
    from eval.loaders import BadRecord, read_records

    out = []
    for path in paths:
        for no, row in read_records(Path(path)):
            if isinstance(row, BadRecord) or not isinstance(row.get("question_content"), str):
                raise ValueError(f"{path} record {no}: not a LiveCodeBench row with 'question_content'")
            out.append((str(row.get("question_id", f"{Path(path).name}:{no}")), row["question_content"]))
    return out
