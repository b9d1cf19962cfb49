"""What the decontamination screen reads: the text of a corpus row, and benchmark files in chain order.

Split from :mod:`data_prep.decontam_pipeline` (which runs the screen over a file); benchmark and corpus
records that cannot be used are counted by the caller's :class:`~data_prep.io.MalformedCounter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_prep.benchmarks import (
    ALL_BENCHMARKS,
    EXHAUSTIVE,
    BenchmarkError,
    BenchmarkItem,
    benchmark_records,
    load_benchmark,
)
from data_prep.decontaminate import SHORT_MIN_WORDS, PhraseIndex
from data_prep.io import MalformedCounter


def _turn_text(turn: Any) -> list[str]:
    if isinstance(turn, str):
        return [turn]
    if not isinstance(turn, dict):
        return []
    parts = [
        turn[k]
        for k in ("content", "value", "reasoning", "reasoning_content")
        if isinstance(turn.get(k), str)
    ]
    if isinstance(turn.get("content"), list):
        parts += [
            p.get("text", "")
            for p in turn["content"]
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    for call in turn.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        if isinstance(fn, dict):
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return parts


def _value_text(value: Any) -> str | None:
    """A non-blank string as it is, or the turns of a non-empty list of messages joined by newlines."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value:
        return "\n".join(part for turn in value for part in _turn_text(turn))
    return None


def row_text(row: dict) -> str | None:
    """The concatenation of all turns of a corpus row (messages, conversations or prompt), or None."""
    for key in ("messages", "conversations", "prompt"):
        text = _value_text(row.get(key))
        if text is not None:
            return text
    return None


def field_text(value: Any) -> str | None:
    """The text of one field: a string, or a list of chat messages whose contents are joined; else None."""
    text = _value_text(value)
    return text if text is not None and text.strip() else None


def load_custom_benchmark(
    name: str, path: str | Path, text_field: str, malformed: MalformedCounter | None = None
) -> list[BenchmarkItem]:
    """Load a held-out set not in the registry: rows of ``path`` with their text in ``text_field``.

    The field may hold a string or a list of chat messages (as :func:`row_text` reads them). A row
    without the field (``missing_field``) or whose field holds no text (``no_text``) is dropped and
    counted; the item id is the row's ``id`` (or ``key``), else its position.
    """
    malformed = malformed if malformed is not None else MalformedCounter()
    items = []
    for i, (where, rec) in enumerate(benchmark_records(name, path, malformed)):
        if text_field not in rec:
            malformed.add("missing_field", where, f"no field {text_field!r}")
            continue
        text = field_text(rec[text_field])
        if text is None:
            malformed.add("no_text", where, f"field {text_field!r} holds no text")
            continue
        ident = next((rec[k] for k in ("id", "key") if isinstance(rec.get(k), (str, int))), i)
        items.append(BenchmarkItem(str(ident), text))
    return items


def _dropped(counter: MalformedCounter) -> str:
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(counter.counts.items()))
    return f"{counter.total} record(s) dropped: {reasons}"


def load_benchmarks(
    specs: Mapping[str, str | Path],
    malformed: MalformedCounter,
    fields: Mapping[str, str] | None = None,
    *,
    per_benchmark: dict[str, MalformedCounter] | None = None,
    require_items: bool = False,
) -> list[tuple[str, list[BenchmarkItem], bool]]:
    """Load ``name -> file`` benchmarks and order them as the paper chains them.

    Names in ``fields`` (``name -> text field``) are custom held-out sets (:func:`load_custom_benchmark`),
    screened after the registered benchmarks in the order given. Dropped records are counted in
    ``malformed`` and, when ``per_benchmark`` is given, in one counter per benchmark there too. With
    ``require_items`` a benchmark that yields no item raises :class:`BenchmarkError`.
    """
    fields = dict(fields or {})
    clash = sorted(set(fields) & set(ALL_BENCHMARKS))
    if clash:
        raise BenchmarkError(
            f"benchmark {clash[0]} is registered and read in its public format; "
            "give a custom set with a text field another name"
        )
    stray = sorted(set(fields) - set(specs))
    if stray:
        raise BenchmarkError(f"text field given for {stray[0]}, which has no benchmark file")
    unknown = sorted(set(specs) - set(ALL_BENCHMARKS) - set(fields))
    if unknown:
        raise KeyError(f"unknown benchmark(s) {unknown}; known: {', '.join(ALL_BENCHMARKS)}")
    order = [n for n in ALL_BENCHMARKS if n in specs] + [n for n in specs if n in fields]
    loaded = []
    for name in order:
        counter = MalformedCounter()
        if name in fields:
            items = load_custom_benchmark(name, specs[name], fields[name], counter)
        else:
            items = load_benchmark(name, specs[name], counter)
        malformed.merge(counter)
        if per_benchmark is not None:
            per_benchmark[name] = counter
        if require_items and not items:
            if not counter.total:
                raise BenchmarkError(f"benchmark {name}: no items in {specs[name]} (the file has no records)")
            hint = f"is {fields[name]!r} its text field?" if name in fields else f"is it in {name}'s format?"
            raise BenchmarkError(f"benchmark {name}: no items in {specs[name]} ({_dropped(counter)}; {hint})")
        loaded.append((name, items, name in EXHAUSTIVE))
    return loaded


def require_screenable(
    index: PhraseIndex,
    loaded: list[tuple[str, list[BenchmarkItem], bool]],
    specs: Mapping[str, str | Path],
) -> None:
    """Raise :class:`BenchmarkError` for a benchmark none of whose items is long enough to screen."""
    for name, items, _ in loaded:
        if items and index.skipped_short.get(name, 0) == len(items):
            raise BenchmarkError(
                f"benchmark {name}: none of the {len(items)} item(s) in {specs[name]} has the "
                f"{SHORT_MIN_WORDS} words needed to screen for it"
            )
