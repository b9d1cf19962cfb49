"""The knowledge-work reward (UM, stage 08): a weighted rubric over the agent's deliverable files.

Contract of ``kw_rubric``:

* ``label = {"rubric": [criterion, ...], "deliverables": ["memo.docx", ...]}``; file names are relative
  to the workspace (no absolute paths, no ``..``);
* ``metadata["workspace"]`` is a local directory holding the episode's final workspace, copied out of
  the sandbox by the environment before the reward runs. A missing workspace is an infrastructure
  problem (``aborted``), never a 0.

A criterion is ``{id, requirement, weight, kind, check?, file?}``: one proposition judged met/unmet
(UM: "each criterion tests one coherent proposition"). ``weight`` reflects importance and may be negative
for a "must not" (met = the error is present). ``kind: "code"`` criteria carry a ``check`` decided here
without a judge: ``cell_value`` (a workbook cell's computed value: ``equals`` or ``approx`` within
``tolerance``), ``contains`` (case- and whitespace-insensitive), ``date_in`` (common renderings of a
date), ``regex`` and ``file_exists``. ``kind: "judge"`` criteria go to the LLM judge through the
``rubric`` package's ``PerCriterionOneShotGrader`` (the IF reward's path,
:func:`rewards.instruction_following.judge_requirements`: ``RUFUS_JUDGE_BASE_URL`` /
``RUFUS_JUDGE_MODEL`` / ``RUFUS_JUDGE_API_KEY``), which sees the task prompt, the final message and every
deliverable rendered as text (:mod:`rewards.deliverables`). A judge criterion may name its ``file``:
when that file cannot be read the criterion is unmet without asking the judge.

score = clip(sum of the weights of met criteria / sum of the positive weights, 0, 1): the
``rubric`` package's normalisation. A file that is missing, corrupt or outside the workspace makes its
criteria unmet (failure ``deliverable_unreadable``). No judge endpoint with judge criteria, a judge
that fails, or a missing renderer (markitdown, ``formulas``) is ``aborted``.

:func:`grade_code_criteria` scores the code criteria alone (judge criteria unmet, no judge call): data
prep's screens (stage 08's hacking filter) grade with it, so they share this one rubric format and checker.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rewards.answer_extract import split_thinking
from rewards.contract import RewardRequest, RewardResult, register_reward
from rewards.deliverables import Deliverable, RendererUnavailable, load_deliverable
from rewards.instruction_following import InfraError, judge_endpoint, judge_requirements

MAX_JUDGE_CHARS_PER_FILE = 60_000


def relative_name(name: str) -> str:
    """Return ``name`` as a POSIX path inside the workspace; raise ValueError for one that would leave it."""
    path = PurePosixPath(name.replace("\\", "/"))
    if not name.strip() or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"file {name!r} must be a relative path inside the workspace")
    return str(path)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CellValueCheck(_Strict):
    type: Literal["cell_value"]
    file: str
    sheet: str | None = Field(default=None, description="Sheet name (case-insensitive); None = first.")
    cell: str = Field(pattern=r"^\$?[A-Za-z]{1,3}\$?[0-9]{1,7}$")
    equals: bool | int | float | str | None = None
    approx: float | None = None
    tolerance: float = Field(default=1e-6, ge=0, description="Absolute tolerance of ``approx``.")

    @model_validator(mode="after")
    def _one_target(self) -> CellValueCheck:
        if (self.equals is None) == (self.approx is None):
            raise ValueError("cell_value needs exactly one of 'equals' or 'approx'")
        return self


class ContainsCheck(_Strict):
    type: Literal["contains"]
    file: str
    text: str = Field(min_length=1)


class DateInCheck(_Strict):
    type: Literal["date_in"]
    file: str
    date: dt.date


class RegexCheck(_Strict):
    type: Literal["regex"]
    file: str
    pattern: str = Field(min_length=1)
    ignore_case: bool = True

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:  # not a ValueError: pydantic would let it escape
            raise ValueError(f"pattern {value!r} does not compile: {exc}") from None
        return value


class FileExistsCheck(_Strict):
    type: Literal["file_exists"]
    file: str


Check = Annotated[
    CellValueCheck | ContainsCheck | DateInCheck | RegexCheck | FileExistsCheck, Field(discriminator="type")
]


class Criterion(_Strict):
    """One rubric criterion: a proposition, its weight, and how it is decided."""

    id: str = Field(min_length=1)
    requirement: str = Field(min_length=1)
    weight: float
    kind: Literal["judge", "code"]
    check: Check | None = None
    file: str | None = Field(default=None, description="Judge criteria: the deliverable it is about.")

    @model_validator(mode="after")
    def _consistent(self) -> Criterion:
        if not math.isfinite(self.weight) or self.weight == 0:
            raise ValueError(f"criterion {self.id!r}: weight must be finite and non-zero")
        if (self.kind == "code") != (self.check is not None):
            raise ValueError(f"criterion {self.id!r}: code criteria need a check, judge criteria take none")
        if self.check is not None:
            self.check.file = relative_name(self.check.file)
        if self.file is not None:
            self.file = relative_name(self.file)
        return self


class KWLabel(_Strict):
    """The ``kw_rubric`` label: the weighted rubric and the deliverables shown to the judge."""

    rubric: list[Criterion] = Field(min_length=1)
    deliverables: list[str] = Field(default_factory=list)

    @field_validator("deliverables")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return [relative_name(v) for v in value]

    @model_validator(mode="after")
    def _ids_and_weights(self) -> KWLabel:
        ids = [c.id for c in self.rubric]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate criterion ids: {sorted({i for i in ids if ids.count(i) > 1})}")
        if not any(c.weight > 0 for c in self.rubric):
            raise ValueError("the rubric needs at least one positive weight")
        return self

    def judge_files(self) -> list[str]:
        """The files the judge reads: the deliverables, then files named by judge criteria."""
        named = [c.file for c in self.rubric if c.file]
        return list(dict.fromkeys([*self.deliverables, *named]))

    def text_files(self) -> list[str]:
        """Every file whose text is needed (``file_exists`` alone only looks at the file system)."""
        checked = [c.check.file for c in self.rubric if c.check and c.check.type != "file_exists"]
        return list(dict.fromkeys([*self.judge_files(), *checked]))


def weighted_score(rubric: list[Criterion], met: dict[str, bool]) -> float:
    """Return clip(sum of met weights / sum of positive weights, 0, 1)."""
    positive = sum(c.weight for c in rubric if c.weight > 0)
    earned = sum(c.weight for c in rubric if met.get(c.id))
    return min(max(earned / positive, 0.0), 1.0)


# ---- code checks ----------------------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Casefold, NFKC and collapse whitespace: what ``contains`` compares."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september"]
_MONTHS += ["october", "november", "december"]


def date_pattern(day: dt.date) -> re.Pattern[str]:
    """A pattern for ``day`` in its common renderings: ISO, US and European numerals, month names.

    Numeric day-month orders are both accepted, so 03/04/2025 matches 3 April and 4 March.
    """
    y, m, d = str(day.year), day.month, day.day
    mm, dd = rf"0?{m}", rf"0?{d}"
    name = _MONTHS[m - 1]
    month = rf"(?:{name}|{name[:3]}\.?" + (r"|sept\.?" if m == 9 else "") + ")"
    day_word = rf"{dd}(?:st|nd|rd|th)?"
    forms = [
        rf"{y}(?P<s1>[-/.]){mm}(?P=s1){dd}",
        rf"{mm}(?P<s2>[-/.]){dd}(?P=s2){y}",
        rf"{dd}(?P<s3>[-/.]){mm}(?P=s3){y}",
        rf"{month}\s+{day_word},?\s+{y}",
        rf"{day_word}(?:\s+of)?[\s-]+{month},?[\s-]+{y}",
    ]
    return re.compile(r"(?<![\d])(?:" + "|".join(forms) + r")(?![\d])", re.IGNORECASE)


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().replace(",", ""))
        except ValueError:
            return None
    return None


def _cell_matches(value: Any, check: CellValueCheck) -> bool:
    if check.approx is not None:
        got = _as_number(value)
        return got is not None and abs(got - check.approx) <= check.tolerance
    want = check.equals
    if isinstance(want, bool):
        return value is want
    if isinstance(want, int | float):
        got = _as_number(value)
        return got is not None and abs(got - want) <= 1e-9 * max(1.0, abs(want))
    if isinstance(value, dt.date) and isinstance(want, str):
        try:
            day = value.date() if isinstance(value, dt.datetime) else value
            return day == dt.date.fromisoformat(want.strip()[:10])
        except ValueError:
            pass
    return normalise(str(value)) == normalise(str(want))


def run_check(check: Check, files: dict[str, Deliverable]) -> tuple[bool, str]:
    """Decide one code check against the loaded files; return ``(met, note)``. Never raises."""
    doc = files[check.file]
    if isinstance(check, FileExistsCheck):
        return doc.exists, "" if doc.exists else doc.error or "missing"
    if not doc.ok:
        return False, doc.error or "unreadable"
    text = doc.text or ""
    if isinstance(check, ContainsCheck):
        return normalise(check.text) in normalise(text), ""
    if isinstance(check, DateInCheck):
        return date_pattern(check.date).search(text) is not None, ""
    if isinstance(check, RegexCheck):
        flags = re.IGNORECASE if check.ignore_case else 0
        return re.search(check.pattern, text, flags) is not None, ""
    if not doc.cells:
        return False, f"{check.file}: not a workbook"
    sheets = {name.casefold(): name for name in doc.cells}
    sheet = sheets.get(check.sheet.casefold()) if check.sheet else next(iter(doc.cells))
    if sheet is None:
        return False, f"{check.file}: no sheet {check.sheet!r}"
    value = doc.cells[sheet].get(check.cell.replace("$", "").upper())
    return _cell_matches(value, check), f"{sheet}!{check.cell} = {value!r}"[:200]


def _load_files(workspace: Path, text_files: list[str], rubric: list[Criterion]) -> dict[str, Deliverable]:
    """Render ``text_files``; the other files of code checks (``file_exists`` only) are only looked up."""
    files = {name: load_deliverable(workspace, name) for name in text_files}
    for check in (c.check for c in rubric if c.check and c.check.file not in files):
        files[check.file] = load_deliverable(workspace, check.file, render_text=False)
    return files


def grade_code_criteria(rubric: list[Criterion], workspace: str | Path) -> float:
    """Score ``rubric`` on ``workspace`` from its code criteria alone: judge criteria count as unmet and no
    judge is called (data prep's screens: a deliverable earns nothing it would need a judge for).

    Raises :class:`~rewards.deliverables.RendererUnavailable` when a renderer is missing (infrastructure,
    never a 0) and ValueError for a rubric without a positive weight.
    """
    if not any(c.weight > 0 for c in rubric):
        raise ValueError("rubric: needs at least one positive weight")
    checks = [c.check for c in rubric if c.check is not None]
    read = [ch.file for ch in checks if ch.type != "file_exists"]
    files = _load_files(Path(workspace), list(dict.fromkeys(read)), rubric)
    if broken := [d.error or d.name for d in files.values() if d.infra]:
        raise RendererUnavailable("; ".join(broken))
    return weighted_score(rubric, {c.id: run_check(c.check, files)[0] for c in rubric if c.check is not None})


# ---- the reward -----------------------------------------------------------------------------------------
def grading_text(final_message: str, label: KWLabel, files: dict[str, Deliverable]) -> str:
    """What the judge reads: the final message, then each deliverable's text (or why it is missing)."""
    parts = [f"## Final message\n{final_message or '(none)'}"]
    for name in label.judge_files():
        doc = files[name]
        body = (doc.text or "") if doc.ok else f"[could not be read: {doc.error}]"
        if len(body) > MAX_JUDGE_CHARS_PER_FILE:
            body = (
                body[:MAX_JUDGE_CHARS_PER_FILE] + f"\n[... {len(body) - MAX_JUDGE_CHARS_PER_FILE} chars cut]"
            )
        parts.append(f"## Deliverable: {name}\n{body}")
    return "\n\n".join(parts)


def _aborted(failure: str, error: str) -> RewardResult:
    return RewardResult(score=0.0, aborted=True, failure=failure, details={"error": error})


def grade(label: KWLabel, workspace: Path, response: str, prompt: list[dict[str, Any]]) -> RewardResult:
    """Grade a workspace against a validated label (see the module docstring)."""
    judged = [c for c in label.rubric if c.kind == "judge"]
    if judged and judge_endpoint() is None:
        return _aborted("judge_unavailable", "judge criteria but no RUFUS_JUDGE_BASE_URL / RUFUS_JUDGE_MODEL")
    text_files = label.text_files()
    files = _load_files(workspace, text_files, label.rubric)
    if broken := [d.error for d in files.values() if d.infra]:
        return _aborted("renderer_unavailable", "; ".join(e or "" for e in broken))
    met: dict[str, bool] = {}
    notes: dict[str, str] = {}
    ask: list[Criterion] = []
    for crit in label.rubric:
        if crit.check is not None:
            met[crit.id], note = run_check(crit.check, files)
        elif crit.file is not None and not files[crit.file].ok:
            met[crit.id], note = False, files[crit.file].error or ""
        else:
            ask.append(crit)
            continue
        if note:
            notes[crit.id] = note
    _, final, problem = split_thinking(response)
    if ask:
        try:
            verdicts = judge_requirements(
                [c.requirement for c in ask], grading_text(final, label, files), prompt
            )
        except InfraError as exc:
            return _aborted("judge_unavailable", str(exc))
        met.update({c.id: ok for c, ok in zip(ask, verdicts, strict=True)})
    score = weighted_score(label.rubric, met)
    unreadable = {n: files[n].error for n in text_files if not files[n].ok}
    failure = None if score >= 1.0 else "wrong" if score <= 0.0 else "partial_credit"
    if unreadable:
        failure = "deliverable_unreadable"
    components = {f"criterion_{c.id}": float(met[c.id]) for c in label.rubric}
    components["score"] = score
    details: dict[str, Any] = {"notes": notes, "unreadable": unreadable}
    details["file_notes"] = {n: d.notes for n, d in files.items() if d.notes}
    if problem:
        details["final_message_problem"] = problem
    return RewardResult(
        score=score, parsed=final[:2000] or None, components=components, failure=failure, details=details
    )


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"label.{where}: {err['msg']}" if where else f"label: {err['msg']}"


@register_reward("kw_rubric")
def kw_rubric_reward(request: RewardRequest) -> RewardResult:
    """Weighted-rubric grade of an episode's deliverables (label and workspace contract: module docstring)."""
    try:
        label = KWLabel.model_validate(request.label)
    except ValidationError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": _first_error(exc)})
    workspace = request.metadata.get("workspace")
    if not isinstance(workspace, str | Path) or not Path(workspace).is_dir():
        return _aborted("no_workspace", f"metadata['workspace'] is not a local directory: {workspace!r:.200}")
    return grade(label, Path(workspace), request.response, request.prompt)
