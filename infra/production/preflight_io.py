"""The file checks of a stage's preflight (:mod:`infra.production.preflight`): its data and its input.

:func:`check_data` loads every data file the stage's commands read, through slime's ``Dataset`` when slime
is importable (``RUFUS_SLIME_DIR`` or installed), else through our row schema (``data_prep.schema``),
and says which. :func:`check_handoff` verifies the input checkpoint against the ``handoff.json`` that
signs it (``infra.handoff``; the production ``handoff verify`` step writes one beside each export).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYMBOL = {"ok": "✓", "fail": "✗", "skip": "-"}


@dataclass
class Check:
    """One verdict: a check's name, ``ok``/``fail``/``skip`` and what was found."""

    name: str
    status: str
    detail: str

    def line(self) -> str:
        """The one printed line of this check."""
        return f"{SYMBOL[self.status]} {self.name}: {self.detail}"


def _error(exc: BaseException) -> str:
    """``Type: message``, first line only."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def slime_importable() -> bool:
    """True when slime imports here (``RUFUS_SLIME_DIR`` is put on ``sys.path`` first)."""
    slime_dir = os.environ.get("RUFUS_SLIME_DIR")
    if slime_dir and slime_dir not in sys.path:
        sys.path.insert(0, slime_dir)
    try:
        return importlib.util.find_spec("slime") is not None
    except (ImportError, ValueError):
        return False


def data_files(stage: Any, data_dir: Path) -> list[Path]:
    """The files the stage's commands read from its data folder."""
    config = stage.config
    if config.kind == "sft":
        heldout = config.sft.select_by == "heldout_plateau"
        return [data_dir / "train.jsonl", *([data_dir / "heldout_sft.jsonl"] if heldout else [])]
    metrics = [*config.eval.targets, *config.eval.guardrails]
    return [data_dir / "train.jsonl", *(data_dir / "heldout" / f"{m}.jsonl" for m in metrics)]


def _schema_rows(path: Path, kind: str) -> int:
    from data_prep.schema import PromptRow, SFTSample

    model = SFTSample if kind == "sft" else PromptRow
    n = 0
    with path.open() as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                try:
                    model.model_validate_json(line)
                except ValueError as exc:
                    raise ValueError(f"{path}:{i}: {str(exc).splitlines()[0]} ({model.__name__})") from None
                n += 1
    return n


def _slime_rows(path: Path, init_hf: Path) -> int:
    from slime.utils.data import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(init_hf))
    ds = Dataset(
        str(path), tok, None, None, prompt_key="prompt", label_key="label", metadata_key="metadata",
        tool_key="tools", apply_chat_template=True,
    )  # fmt: skip
    return len(ds)


def check_data(stage: Any, data_dir: Path, init_hf: Path | None) -> Check:
    """Every data file exists and loads: through slime's Dataset when importable, else our row schema."""
    files = data_files(stage, data_dir)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        return Check("data", "fail", f"{missing[0]}: missing ({len(missing)} of {len(files)} files)")
    use_slime = stage.config.kind == "rl" and slime_importable() and init_hf is not None
    rows = 0
    try:
        for f in files:
            n = _slime_rows(f, init_hf) if use_slime else _schema_rows(f, stage.config.kind)
            if n == 0:
                return Check("data", "fail", f"{f}: no rows")
            rows += n
    except Exception as exc:  # noqa: BLE001 - a row or file that does not load is the verdict
        return Check("data", "fail", _error(exc) if not use_slime else f"slime Dataset: {_error(exc)}")
    how = "slime's Dataset" if use_slime else "our schema (slime not importable: set RUFUS_SLIME_DIR)"
    return Check("data", "ok", f"{len(files)} file(s), {rows} rows load through {how}")


def handoff_dir(init_hf: Path) -> Path | None:
    """The folder holding the ``handoff.json`` that signs ``init_hf`` (itself or its parent), or None."""
    from infra.handoff import HANDOFF

    for cand in (init_hf, init_hf.parent):
        record = cand / HANDOFF
        if record.is_file():
            try:
                export = json.loads(record.read_text()).get("export")
            except ValueError:
                return cand
            if cand == init_hf or (cand / str(export)).resolve() == init_hf.resolve():
                return cand
    return None


def check_handoff(init_hf: Path | None, base: bool) -> Check:
    """The input checkpoint matches its handoff record; a base checkpoint (``--base``) may have none."""
    from infra.handoff import HandoffError, verify_handoff

    if init_hf is None:
        return Check("handoff", "fail", "no input checkpoint given (--init-from)")
    signed = handoff_dir(init_hf)
    if signed is None:
        if not base:
            return Check(
                "handoff", "fail", f"{init_hf}: no handoff.json signs it (the previous stage's export)"
            )
        if not (init_hf / "config.json").is_file():
            return Check("handoff", "fail", f"{init_hf}/config.json: missing (not an HF checkpoint)")
        return Check("handoff", "ok", f"{init_hf}: base checkpoint (no handoff record), config.json present")
    try:
        record = verify_handoff(signed)
    except HandoffError as exc:
        return Check("handoff", "fail", str(exc).splitlines()[0])
    return Check("handoff", "ok", f"{signed}/handoff.json: {len(record['files'])} files match")
