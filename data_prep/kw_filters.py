"""Stage 08's task filters (UM §Instructions and Graders): answer leakage, reward hacking, curriculum band.
Rubric and grading are the reward's (:mod:`rewards.knowledge_work`), the ground truth is
:class:`data_prep.kw_taxonomy.GroundTruth`: ``answers`` (computed) must appear nowhere the agent can see;
``lookups`` (read from the system of record) must not sit in the workspace files or the instruction.

* :func:`leakage_filter` drops a task whose answers or lookups are reachable (numbers compared as
  numbers, text case-folded) or whose rubric text (a word n-gram of a requirement) sits in a workspace
  file or a system-of-record row; files are read as the grader reads them (:mod:`rewards.deliverables`).
* :func:`hacking_filter` writes degenerate deliverables (do nothing, empty files, the instruction copied
  back, every number/date/id of the workspace and the system of record dumped, a template of the rubric's
  words) over the workspace and drops a task where one scores above ``max_degenerate_score``. It grades
  with ``grade(rubric, workspace_dir) -> float``, by default the reward's code criteria alone
  (:func:`rewards.knowledge_work.grade_code_criteria`: judge criteria unmet, no judge call).
* :func:`curriculum_filter` keeps tasks whose mean base-policy score lies in a band.

Each returns the kept tasks and its drops counted by reason.
"""

from __future__ import annotations

import math
import re
import sqlite3
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.io import MalformedCounter
from data_prep.kw_taxonomy import GroundTruth
from rewards.deliverables import RendererUnavailable, load_deliverable
from rewards.knowledge_work import Criterion, grade_code_criteria, normalise, relative_name

MAX_READ = 2 << 20  # bytes of a file the grader cannot render that the leakage screen still searches
FileContent = str | bytes | dict[str, dict[str, Any]]  # text, raw bytes, or xlsx {sheet: {cell: value}}
Grade = Callable[[list[Criterion], Path], float]


class FilterableTask(Protocol):
    """What the filters read of a task (``data_prep.kw_synthesis.KwTask`` has it)."""

    name: str
    instruction: str
    deliverables: tuple[str, ...]
    rubric: list[Criterion]
    ground_truth: GroundTruth
    files: Mapping[str, FileContent]
    database: bytes | None


# ---- files ------------------------------------------------------------------------------------------------
def write_xlsx(path: Path, sheets: Mapping[str, Mapping[str, Any]]) -> None:
    """Write a workbook of ``{sheet: {cell: value}}`` (a text value starting with ``=`` is a formula)."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    for name, cells in sheets.items():
        ws = wb.create_sheet(name)
        for ref, value in cells.items():
            ws[ref] = value
    wb.save(path)


def materialize(folder: Path, files: Mapping[str, FileContent]) -> None:
    """Write ``files`` under ``folder`` (a dict content is an xlsx workbook); a path leaving it raises."""
    for rel, content in files.items():
        path = folder / relative_name(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            write_xlsx(path, content)
        else:
            path.write_bytes(content.encode() if isinstance(content, str) else content)


def file_texts(files: Mapping[str, FileContent]) -> list[str]:
    """The text of each file as the grader renders it; a type it does not render, or a corrupt file, as its
    decoded bytes. Raises :class:`~rewards.deliverables.RendererUnavailable` when a renderer is missing."""
    out = []
    with tempfile.TemporaryDirectory(prefix="rufus-kw-files-") as tmp:
        materialize(Path(tmp), files)
        for rel in files:
            doc = load_deliverable(tmp, relative_name(rel))
            if doc.infra:
                raise RendererUnavailable(doc.error or rel)
            if doc.ok:
                out.append(doc.text or "")
            else:
                raw = (Path(tmp) / relative_name(rel)).read_bytes()[:MAX_READ]
                out.append(raw.decode("utf-8", errors="replace"))
    return out


def number(value: Any) -> float | None:
    """``value`` as a number ("$1,250.00", "(3.5)" and 7 included), else None: leakage and grounding compare
    values this loosely so that a reformatted answer still counts as the same value."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    text = re.sub(r"[\s,$€£]", "", str(value))
    text = "-" + text[1:-1] if text.startswith("(") and text.endswith(")") else text
    try:
        out = float(text)
    except ValueError:
        return None
    return out if math.isfinite(out) else None


# ---- the filters ------------------------------------------------------------------------------------------
@dataclass
class FilterResult:
    """Tasks a filter kept, its drops by reason, and per-task notes (scores) for the manifest."""

    name: str
    kept: list[Any] = field(default_factory=list)
    dropped: MalformedCounter = field(default_factory=lambda: MalformedCounter(max_examples=10))
    notes: dict[str, Any] = field(default_factory=dict)

    def manifest_fields(self) -> dict[str, Any]:
        """Keyword arguments for ``Manifest.step``."""
        return {"kept": len(self.kept), "dropped": self.dropped.as_dict(), **self.notes}


class LeakageParams(BaseModel):
    """What counts as a distinctive value, and the rubric-text n-gram length."""

    model_config = ConfigDict(extra="forbid")
    min_number: float = Field(100.0, ge=0, description="Whole numbers below this are too common to check.")
    min_chars: int = Field(
        5, ge=1, description="Shortest text value checked (it also needs a digit or space)."
    )
    rubric_ngram: int = Field(8, ge=3, description="Words of a requirement that, verbatim, are a leak.")
    tolerance: float = Field(0.005, ge=0, description="Numbers this close are the same value.")


def database_cells(database: bytes | None) -> list[Any]:
    """Every cell of every table of a SQLite database given as bytes."""
    if not database:
        return []
    with tempfile.TemporaryDirectory(prefix="rufus-kw-db-") as tmp:
        path = Path(tmp) / "sor.db"
        path.write_bytes(database)
        conn = sqlite3.connect(path)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return [v for n in names for row in conn.execute(f'SELECT * FROM "{n}"') for v in row]
        finally:
            conn.close()


_TOKEN = re.compile(r"[A-Za-z0-9$€£(](?:[A-Za-z0-9./:()-]|,(?=\d{3}(?!\d)))*")  # 1,250.00 is one token


def tokens_with_digits(text: str) -> list[str]:
    """Numbers, dates and ids of ``text`` (tokens holding a digit), trailing punctuation removed."""
    return [t.rstrip(".,:)") for t in _TOKEN.findall(text) if any(c.isdigit() for c in t)]


def _distinctive(value: Any, p: LeakageParams) -> bool:
    num = number(value)
    if num is not None:
        return abs(num) >= p.min_number or num != int(num)
    text = str(value).strip()
    return len(text) >= p.min_chars and any(c.isdigit() or c.isspace() for c in text)


def _found(value: Any, texts: list[str], cells: list[Any], p: LeakageParams) -> bool:
    num = number(value)
    if num is not None:
        seen = [number(c) for c in cells] + [number(t) for s in texts for t in tokens_with_digits(s)]
        return any(n is not None and abs(n - num) <= p.tolerance for n in seen)
    needle = normalise(str(value))
    return any(needle in normalise(s) for s in texts) or any(needle in normalise(str(c)) for c in cells)


def _ngrams(text: str, n: int) -> set[str]:
    words = re.findall(r"\w+", text.casefold())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def find_leaks(task: FilterableTask, params: LeakageParams | None = None) -> list[tuple[str, str]]:
    """Return ``(reason, detail)`` for each way ``task``'s answers or rubric reach what the agent sees."""
    p = params or LeakageParams()
    files = file_texts(task.files)
    cells = database_cells(task.database)
    leaks: list[tuple[str, str]] = []
    for key, value in task.ground_truth.answers.items():
        if not _distinctive(value, p):
            continue
        for where, texts, row_cells in (("workspace", files, []), ("instruction", [task.instruction], []),
                                         ("system_of_record", [], cells)):  # fmt: skip
            if _found(value, texts, row_cells, p):
                leaks.append((f"answer_in_{where}", f"{key}={value!r}"))
    for key, value in task.ground_truth.lookups.items():
        if _distinctive(value, p) and _found(value, [*files, task.instruction], [], p):
            leaks.append(("lookup_in_workspace", f"{key}={value!r}"))
    visible = set().union(*(_ngrams(t, p.rubric_ngram) for t in [*files, " ".join(map(str, cells))]))
    for crit in task.rubric:
        hit = _ngrams(crit.requirement, p.rubric_ngram) & visible
        if hit:
            leaks.append(("rubric_text_in_workspace", f"{crit.id}: {sorted(hit)[0]!r}"))
    return leaks


def leakage_filter(tasks: Sequence[FilterableTask], params: LeakageParams | None = None) -> FilterResult:
    """Keep the tasks with no leak; a dropped task counts under its first leak's reason."""
    result = FilterResult("leakage")
    for task in tasks:
        leaks = find_leaks(task, params)
        if leaks:
            result.dropped.add(leaks[0][0], task.name, leaks[0][1])
        else:
            result.kept.append(task)
    return result


DEGENERATES = ("do_nothing", "empty", "instruction_copy", "number_dump", "keyword_template")


def degenerate_deliverables(task: FilterableTask) -> dict[str, dict[str, FileContent]]:
    """The degenerate attempts at ``task``: deliverable files written over its workspace, by name."""
    seen_text = file_texts(task.files)
    cells = [str(c) for c in database_cells(task.database) if c is not None]
    dump = list(dict.fromkeys(t for s in [*seen_text, *cells] for t in tokens_with_digits(s)))
    words = [" ".join(re.findall(r"\b[A-Za-z][A-Za-z-]{3,}\b", c.requirement)) for c in task.rubric]
    lines = {"empty": [], "instruction_copy": task.instruction.splitlines(), "number_dump": dump,
             "keyword_template": words}  # fmt: skip
    out: dict[str, dict[str, FileContent]] = {"do_nothing": {}}
    for name, body in lines.items():
        files: dict[str, FileContent] = {}
        for rel in task.deliverables:
            if rel.lower().endswith((".xlsx", ".xlsm")) and name != "empty":
                sheets = {
                    getattr(c.check, "sheet", None) for c in task.rubric if c.check and c.check.file == rel
                }
                sheets.discard(None)
                column = {f"A{i}": v for i, v in enumerate(body, 1)}
                files[rel] = {s: column for s in sorted(sheets) or ["Sheet1"]}
            else:
                files[rel] = "\n".join(body) + ("\n" if body else "")
        out[name] = files
    return out


class HackingParams(BaseModel):
    """The highest score a degenerate deliverable may earn before its task is dropped."""

    model_config = ConfigDict(extra="forbid")
    max_degenerate_score: float = Field(
        0.25, ge=0, le=1, description="Tolerates a small existence credit; nothing more without the work."
    )


def degenerate_scores(task: FilterableTask, grade: Grade = grade_code_criteria) -> dict[str, float]:
    """Grade each degenerate attempt of ``task`` (workspace files plus the degenerate deliverables)."""
    scores = {}
    for name, deliverables in degenerate_deliverables(task).items():
        with tempfile.TemporaryDirectory(prefix="rufus-kw-hack-") as tmp:
            materialize(Path(tmp), {**task.files, **deliverables})
            scores[name] = float(grade(task.rubric, Path(tmp)))
    return scores


def hacking_filter(
    tasks: Sequence[FilterableTask], grade: Grade = grade_code_criteria, params: HackingParams | None = None
) -> FilterResult:
    """Drop a task where a degenerate deliverable scores above the threshold (reason ``hackable_<name>``)."""
    p = params or HackingParams()
    result = FilterResult("hacking", notes={"max_degenerate_score": p.max_degenerate_score})
    for task in tasks:
        scores = degenerate_scores(task, grade)
        worst = max(scores, key=lambda k: scores[k])
        if scores[worst] > p.max_degenerate_score:
            result.dropped.add(f"hackable_{worst}", task.name, f"scored {scores[worst]:.2f}")
        else:
            result.kept.append(task)
    return result


class CurriculumParams(BaseModel):
    """The band of mean base-policy scores a task must fall in, and how many attempts score it.

    The paper filters on the base model's performance without numbers; our defaults drop tasks the base
    policy nearly always fails (mean < 0.05: no signal) or nearly masters (mean > 0.85: FireFlash's upper
    pass-rate bound), keeping the partial-credit middle that rubric rewards make common.
    """

    model_config = ConfigDict(extra="forbid")
    low: float = Field(0.05, ge=0, le=1)
    high: float = Field(0.85, ge=0, le=1)
    samples: int = Field(4, ge=1, description="Base-policy attempts per task.")
    min_scored: int = Field(2, ge=1, description="Fewest non-aborted attempts to judge a task.")

    @model_validator(mode="after")
    def _band(self) -> CurriculumParams:
        if self.low > self.high or self.min_scored > self.samples:
            raise ValueError("curriculum: need low <= high and min_scored <= samples")
        return self


Scorer = Callable[[Any, int], Sequence[float | None]]


def curriculum_filter(
    tasks: Sequence[FilterableTask], scorer: Scorer, params: CurriculumParams | None = None
) -> FilterResult:
    """Keep tasks whose mean base-policy score is in ``[low, high]``; ``scorer(task, k)`` returns ``k``
    scores, None for an aborted attempt (ignored, never counted as 0)."""
    p = params or CurriculumParams()
    result = FilterResult("curriculum", notes={"band": [p.low, p.high], "samples": p.samples, "means": {}})
    for task in tasks:
        scores = [float(s) for s in scorer(task, p.samples) if s is not None]
        if len(scores) < p.min_scored:
            result.dropped.add("unscored", task.name, f"{len(scores)} of {p.samples} attempts scored")
            continue
        mean = sum(scores) / len(scores)
        result.notes["means"][task.name] = round(mean, 4)
        if mean < p.low:
            result.dropped.add("too_hard", task.name, f"mean {mean:.2f}")
        elif mean > p.high:
            result.dropped.add("too_easy", task.name, f"mean {mean:.2f}")
        else:
            result.kept.append(task)
    return result
