"""Knowledge-work deliverables (xlsx, docx, pptx, pdf, md, csv, txt) rendered as text for grading (UM).

Office files and PDFs go through ``markitdown`` (the converter the knowledge-work notes verified offline);
md, csv and txt are read as UTF-8 text. Spreadsheets are graded by **value**: a workbook written by
openpyxl stores formulas without cached results (markitdown would show ``NaN``), and cached results are
agent-writable anyway (XlsxWriter's ``write_formula`` takes one), so every formula is recomputed here with
the ``formulas`` package (PyPI, maintained, offline; LibreOffice is not installed). It runs in a child
process with a timeout, which also keeps one runaway workbook or the package's progress bars away from
the reward worker. Each computed result replaces its formula before markitdown renders the sheet;
numbers in a date-formatted cell become dates. A formula that cannot be evaluated (unparsable, unknown
function, circular, timeout) renders as its formula text followed by :data:`UNEVALUATED`; genuine Excel
errors (``#DIV/0!``) render as Excel shows them.

:func:`deliverable_text` raises :class:`DeliverableError` (one line naming the file) on a missing,
unsupported or corrupt file; :func:`load_deliverable` never raises and returns the failure instead.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEXT_SUFFIXES = (".md", ".csv", ".txt")
MARKITDOWN_SUFFIXES = (".docx", ".pptx", ".pdf")
SUPPORTED_SUFFIXES = (".xlsx", *MARKITDOWN_SUFFIXES, *TEXT_SUFFIXES)
MAX_FILE_BYTES = 25 * 1024 * 1024
MAX_UNZIPPED_BYTES = 256 * 1024 * 1024  # office files are zips: refuse one that inflates past this
FORMULA_TIMEOUT_S = 60.0
UNEVALUATED = "[formula not evaluated]"
_REPO_ROOT = Path(__file__).resolve().parents[1]
_WORKER = "\n".join(
    (
        "import json, sys",
        "from rewards.deliverables import _evaluate_worker",
        "print(json.dumps(_evaluate_worker(sys.argv[1])))",
    )
)


class DeliverableError(ValueError):
    """A deliverable could not be rendered: missing, unsupported, too large or corrupt."""


class RendererUnavailable(RuntimeError):
    """A renderer (markitdown, a format extra, ``formulas``) is missing: infrastructure, not the file."""


@dataclass
class Deliverable:
    """One deliverable as the grader sees it: its text, or why it has none; a workbook's cell values."""

    name: str
    text: str | None = None
    error: str | None = None
    cells: dict[str, dict[str, Any]] = field(default_factory=dict)  # sheet -> coordinate -> value
    notes: list[str] = field(default_factory=list)
    infra: bool = False  # the error is a missing renderer, not the file: the grade must be aborted
    exists: bool = False  # a regular file inside the workspace (whether or not it could be read)

    @property
    def ok(self) -> bool:
        """True when the file was rendered."""
        return self.error is None


# ---- formula evaluation (child process) -----------------------------------------------------------------
def _formula_text(cell: Any) -> str | None:
    """Return an openpyxl cell's formula (``=...``, array formulas included), or None for other cells."""
    if cell.data_type != "f":
        return None
    text = getattr(cell.value, "text", cell.value)  # ArrayFormula keeps its formula in .text
    return text if isinstance(text, str) else None


def _jsonable(value: Any) -> Any:
    """Return a computed cell value as JSON: numbers, text, bools; Excel errors as ``{"error": "#..."}``."""
    from formulas.tokens.operand import XlError

    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, XlError):
        return {"error": str(value)}
    if isinstance(value, bool | int | float | str):
        return value
    if str(value) == "empty":  # schedula's EMPTY token: a reference to a blank cell shows 0
        return 0
    return {"error": f"unsupported result {type(value).__name__}"}


def _evaluate_worker(path: str) -> dict[str, Any]:
    """Compute every formula of the workbook at ``path``; return ``{"values": {sheet: {cell: v}}, "bad"}``.

    Formulas that do not parse are blanked in a temporary copy first, because one of them makes the
    ``formulas`` package reject the whole workbook.
    """
    import formulas
    import openpyxl

    wb = openpyxl.load_workbook(path)
    bad: list[str] = []
    parser = formulas.Parser()
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                text = _formula_text(cell)
                if text is None:
                    continue
                try:
                    parser.ast(text)
                except Exception:  # noqa: BLE001 - any parse failure means "not evaluated"
                    bad.append(f"{ws.title}!{cell.coordinate}")
                    cell.value = None
    by_upper = {name.upper(): name for name in wb.sheetnames}
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "book.xlsx")
        wb.save(copy)
        solution = formulas.ExcelModel().loads(copy).finish().calculate()
    values: dict[str, dict[str, Any]] = {}
    for key, ranges in solution.items():
        ref = str(key)
        if "!" not in ref or ":" in ref.rsplit("!", 1)[1]:
            continue
        sheet_part, coord = ref.rsplit("!", 1)
        sheet = by_upper.get(sheet_part.strip("'").split("]", 1)[-1])
        raw = getattr(ranges, "value", None)
        if sheet is None or raw is None:
            continue
        values.setdefault(sheet, {})[coord] = _jsonable(raw[0][0])
    return {"values": values, "bad": bad}


def evaluate_formulas(
    path: Path, timeout: float = FORMULA_TIMEOUT_S
) -> tuple[dict[str, dict[str, Any]], str]:
    """Return ``(values, note)``: computed results by sheet and cell, and why evaluation failed, if it did.

    Raises :class:`RendererUnavailable` when the ``formulas`` package is not installed.
    """
    try:
        found = importlib.util.find_spec("formulas") is not None
    except ValueError:  # present in sys.modules as None: import blocked
        found = False
    if not found:
        raise RendererUnavailable("the 'formulas' package is not installed (spreadsheet formulas)")
    path_var = os.pathsep.join(p for p in (str(_REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": path_var}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _WORKER, str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {}, f"formula evaluation timed out after {timeout:g}s"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {}, f"formula evaluation failed: {tail[:200]}"
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {}, "formula evaluation printed no result"
    note = f"unparsable formulas: {', '.join(out['bad'][:10])}" if out["bad"] else ""
    return out["values"], note


# ---- rendering ------------------------------------------------------------------------------------------
def _markitdown(data: bytes, suffix: str) -> str:
    """Return markitdown's text for a file's bytes through that format's own converter.

    The converter is called directly: ``MarkItDown.convert`` falls back to other converters when one
    fails, and its plain-text fallback turned a corrupt ``.docx`` into zip-header noise instead of an error.
    """
    try:
        from markitdown import StreamInfo
        from markitdown._exceptions import MissingDependencyException
        from markitdown.converters import DocxConverter, PdfConverter, PptxConverter, XlsxConverter
    except ImportError as exc:
        raise RendererUnavailable(f"markitdown is not installed: {exc}") from None
    converter = {".docx": DocxConverter, ".pptx": PptxConverter, ".pdf": PdfConverter, ".xlsx": XlsxConverter}
    try:
        result = converter[suffix]().convert(io.BytesIO(data), StreamInfo(extension=suffix))
    except MissingDependencyException as exc:
        raise RendererUnavailable(f"markitdown lacks its {suffix} extra: {exc}"[:300]) from None
    return result.text_content


def _computed(value: Any, number_format: str) -> Any:
    """Return a computed result as the cell would show it: errors as their code, serials as dates."""
    from openpyxl.styles.numbers import is_date_format
    from openpyxl.utils.datetime import from_excel

    if isinstance(value, dict):
        return value.get("error", "#VALUE!")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and is_date_format(number_format):
        try:
            return from_excel(value)
        except (ValueError, OverflowError):
            return value
    if isinstance(value, float):
        return float(f"{value:.12g}")  # drop binary noise such as 0.30000000000000004
    return value


def _workbook(path: Path, data: bytes, timeout: float) -> tuple[str, dict[str, dict[str, Any]], list[str]]:
    """Return a workbook's text, its cell values (formulas replaced by results) and notes."""
    import openpyxl

    wb = openpyxl.load_workbook(io.BytesIO(data))
    has_formulas = any(_formula_text(c) for ws in wb.worksheets for row in ws.iter_rows() for c in row)
    values, note = evaluate_formulas(path, timeout) if has_formulas else ({}, "")
    notes = [note] if note else []
    cells: dict[str, dict[str, Any]] = {}
    for ws in wb.worksheets:
        sheet_cells = cells.setdefault(ws.title, {})
        for row in ws.iter_rows():
            for cell in row:
                text = _formula_text(cell)
                if text is not None:
                    got = values.get(ws.title, {}).get(cell.coordinate)
                    unknown = got is None or (isinstance(got, dict) and got.get("error") == "#NAME?")
                    cell.value = f"{text} {UNEVALUATED}" if unknown else _computed(got, cell.number_format)
                    if isinstance(cell.value, str):
                        cell.data_type = "s"  # openpyxl would save a string starting with "=" as a formula
                if cell.value is not None:
                    sheet_cells[cell.coordinate] = cell.value
    buf = io.BytesIO()
    wb.save(buf)
    return _markitdown(buf.getvalue(), ".xlsx"), cells, notes


def _check_zip(name: str, suffix: str, data: bytes) -> None:
    """Raise :class:`DeliverableError` for an office file that is not a zip or inflates too far."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise DeliverableError(f"{name}: cannot be read as {suffix}: {type(exc).__name__}: {exc}") from None
    if inflated > MAX_UNZIPPED_BYTES:
        raise DeliverableError(f"{name}: inflates to {inflated} bytes, over {MAX_UNZIPPED_BYTES}")


def render(path: Path, timeout: float = FORMULA_TIMEOUT_S) -> Deliverable:
    """Render ``path``; raise :class:`DeliverableError` (naming the file) when it cannot be rendered."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DeliverableError(f"{path.name}: unsupported deliverable type {suffix or '(none)'!r}")
    if not path.is_file():
        raise DeliverableError(f"{path.name}: file not found")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise DeliverableError(f"{path.name}: {size} bytes is over the {MAX_FILE_BYTES}-byte limit")
    data = path.read_bytes()
    if suffix in (".xlsx", ".docx", ".pptx"):
        _check_zip(path.name, suffix, data)
    out = Deliverable(name=path.name)
    try:
        if suffix in TEXT_SUFFIXES:
            out.text = data.decode("utf-8", errors="replace")
        elif suffix == ".xlsx":
            out.text, out.cells, out.notes = _workbook(path, data, timeout)
        else:
            out.text = _markitdown(data, suffix)
    except RendererUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - any parser failure on agent-written bytes is a corrupt file
        first = (str(exc).strip().splitlines() or [""])[-1]
        why = f"{type(exc).__name__}: {first[:200]}"
        raise DeliverableError(f"{path.name}: cannot be read as {suffix}: {why}") from None
    return out


def deliverable_text(path: str | Path) -> str:
    """Return the text of one deliverable file; raise :class:`DeliverableError` naming it on failure."""
    return render(Path(path)).text or ""


def load_deliverable(
    workspace: str | Path, name: str, *, render_text: bool = True, timeout: float = FORMULA_TIMEOUT_S
) -> Deliverable:
    """Render ``workspace/name`` (or, without ``render_text``, only see whether it exists); never raises.

    A name that resolves outside the workspace (a symlink out of it) counts as a missing file.
    """
    root = Path(workspace).resolve()
    try:
        target = (root / name).resolve()
        if not target.is_relative_to(root):
            return Deliverable(name=name, error=f"{name}: resolves outside the workspace")
        exists = target.is_file()
        if not render_text:
            return Deliverable(name=name, exists=exists, error=None if exists else f"{name}: file not found")
        rendered = render(target, timeout)
    except DeliverableError as exc:
        return Deliverable(name=name, error=str(exc).replace(target.name, name, 1), exists=exists)
    except RendererUnavailable as exc:
        return Deliverable(name=name, error=f"{name}: {exc}", infra=True, exists=exists)
    except OSError as exc:
        return Deliverable(name=name, error=f"{name}: {type(exc).__name__}: {exc}"[:300])
    rendered.name, rendered.exists = name, True
    return rendered
