"""The three public preference sets of RLHF (RA §3.8, Table 13) as one pair type, and the validity filter.

``load_preference_source(source)`` returns ``(pairs, counts)``: :class:`PreferencePair` records (chat prompt
ending with a user turn, chosen, rejected) and :class:`PreferenceCounts` (``original`` rows read, ``valid``
pairs kept, drops per reason with record ids). RLHF trains on the prompts only (:func:`to_prompt_rows`);
responses and labels feed the offline Table 13 (``data_prep.preference_table``). Releases (dataset cards
and public code that reads them; the split, config and hub id are config fields):

* ``hh_rlhf``: ``Dahoas/full-hh-rlhf`` train has exactly the paper's 112,052 rows (test 12,451); columns
  ``prompt`` (``"\\n\\nHuman: ...\\n\\nAssistant:"``), ``response``, ``chosen``, ``rejected`` (final turns).
  No combination of ``Anthropic/hh-rlhf`` splits gives 112,052 (train harmless-base 42,537, helpful-base
  43,835, helpful-online 22,007, helpful-rejection-sampled 52,421 = 160,800; test 2,312/2,354/1,137/2,749;
  the nearest sum of those eight, 111,870, mixes train and test). That release (``{chosen, rejected}``, full
  transcripts) is read too: ``hub_id: Anthropic/hh-rlhf`` with ``data_dirs``.
* ``helpsteer3``: ``nvidia/HelpSteer3`` config ``preference`` train has exactly 38,459 rows; ``context``
  (messages), ``response1``, ``response2``, ``overall_preference`` -3..3 (< 0: response1 is better; 0: no
  preference), ``domain``, ``language``.
* ``arena``: ``lmarena-ai/arena-human-preference-100k`` train, **not verified**: no release has 84,402 rows.
  55k has 57,477 (too few); 140k has 136,634, ~99K after ties (72.6% model_a/model_b in a public 10k
  sample); 100k (~106K rows) is the one that could give 84,402 if the paper counted after ties. Columns
  ``question_id``, ``model_a``/``_b``, ``winner`` (``model_a``, ``model_b``, ``tie``, ``tie (bothbad)``),
  ``conversation_a``/``_b`` (messages), ``language``. The 140k form (``id``, ``both_bad``, content as
  ``[{type: text, text}]``) is read too. Multi-turn: the prompt is the chosen side's history (each side saw
  its own answers; ``metadata.context_differs``).

Drops (:data:`DROP_REASONS`, counted with record ids, never raised): ``malformed`` (wrong types, bad
transcript or label, sides that disagree; kinds in ``counts.malformed_kinds``), ``no_preference`` (Arena
ties, HelpSteer3 0), ``no_user_turn`` (none non-empty, or the final one empty), ``missing_response``
(None), ``empty_response`` (whitespace), ``identical_responses`` (equal after whitespace collapse),
``repetitive_response`` (:func:`is_repetitive`); a response cut mid-word is kept. Local JSONL
(``.jsonl[.gz]``) is read line by line, not with ``load_dataset("json")``, which aborts a whole file on one
bad line; the hub and local Parquet are streamed with ``datasets.load_dataset``. Ids are the dataset's own
id (Arena) or the row's ``origin#index``, hashed with the dataset name: a re-run gives the same ids.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from data_prep.awm_source import is_pinned
from data_prep.io import MalformedCounter, parse_jsonl_line
from data_prep.manifest import Manifest
from data_prep.miroverse import check_pinned
from data_prep.schema import PromptRow

Dataset = Literal["arena", "helpsteer3", "hh_rlhf"]
#: dataset -> (hub id, hub config, license as the card states it)
DEFAULTS: dict[str, tuple[str, str | None, str]] = {
    "arena": ("lmarena-ai/arena-human-preference-100k", None, "see the dataset card"),
    "helpsteer3": ("nvidia/HelpSteer3", "preference", "cc-by-4.0"),
    "hh_rlhf": ("Dahoas/full-hh-rlhf", None, "mit (Anthropic/hh-rlhf)"),
}
HH_DATA_DIRS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
DROP_REASONS = (
    "malformed", "no_preference", "no_user_turn", "missing_response", "empty_response",
    "identical_responses", "repetitive_response",
)  # fmt: skip
_TIES = {"tie", "tie (bothbad)", "both_bad"}
_ROLES = {"system", "user", "assistant"}
_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")
_MAX_EXAMPLES = 5


class SourceError(ValueError):
    """A preference source that cannot be read at all; one line naming the file or config key."""


class PreferencePair(BaseModel):
    """One preference pair: ``prompt`` (chat messages ending with a user turn), chosen and rejected."""

    model_config = ConfigDict(extra="forbid")

    id: str
    source: Dataset
    prompt: list[dict[str, str]]
    chosen: str
    rejected: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("prompt")
    @classmethod
    def _chat(cls, prompt: list[dict[str, str]]) -> list[dict[str, str]]:
        for i, msg in enumerate(prompt):
            if set(msg) != {"role", "content"} or msg["role"] not in _ROLES:
                raise ValueError(f"prompt[{i}] is not a {{role, content}} system/user/assistant message")
        if not prompt or prompt[-1]["role"] != "user":
            raise ValueError("the prompt does not end with a user turn")
        return prompt


class PreferenceSource(BaseModel):
    """One preference set: the hub at a pinned commit, or local files in its release format."""

    model_config = ConfigDict(extra="forbid")

    dataset: Dataset
    hub_id: str | None = Field(None, description="Hub data set; None: the default of DEFAULTS.")
    config_name: str | None = Field(None, description="Hub config; None: the default of DEFAULTS.")
    revision: str | None = Field(None, description="Hub commit (40 hex); the production profile needs one.")
    split: str = "train"
    data_dirs: list[str] = Field(default_factory=list, description="Anthropic/hh-rlhf subsets to read.")
    local_files: list[str] = Field(default_factory=list, description=".jsonl, .jsonl.gz or .parquet files.")

    @model_validator(mode="after")
    def _check(self) -> PreferenceSource:
        if self.data_dirs and self.dataset != "hh_rlhf":
            raise ValueError(f"data_dirs is for hh_rlhf only, not {self.dataset}")
        if unknown := [d for d in self.data_dirs if d not in HH_DATA_DIRS]:
            raise ValueError(f"unknown hh-rlhf data_dirs {unknown}; known: {', '.join(HH_DATA_DIRS)}")
        odd = [f for f in self.local_files if not f.endswith((".jsonl", ".jsonl.gz", ".parquet"))]
        if odd:
            raise ValueError(f"local_files must be .jsonl, .jsonl.gz or .parquet, got {', '.join(odd)}")
        self.hub_id = self.hub_id or DEFAULTS[self.dataset][0]
        if self.config_name is None and self.hub_id == DEFAULTS[self.dataset][0]:
            self.config_name = DEFAULTS[self.dataset][1]
        return self

    @property
    def is_local(self) -> bool:
        """True when the rows are read from disk rather than downloaded."""
        return bool(self.local_files)


@dataclass
class PreferenceCounts:
    """``original == valid + sum(dropped.values())``; a few record ids kept per reason."""

    dataset: str
    original: int = 0
    valid: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    malformed_kinds: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, where: str, detail: str = "") -> None:
        """Count one dropped record and keep its id (and why) among the first few of that reason."""
        self.dropped[reason] += 1
        if reason == "malformed":
            self.malformed_kinds[detail.split(":")[0]] += 1
        kept = self.examples.setdefault(reason, [])
        if len(kept) < _MAX_EXAMPLES:
            kept.append(f"{where}" + (f" ({detail})" if detail else ""))

    def as_dict(self) -> dict[str, Any]:
        """Counts for the manifest and Table 13."""
        return {
            "dataset": self.dataset, "original": self.original, "valid": self.valid,
            "dropped": {r: self.dropped[r] for r in DROP_REASONS},
            "malformed_kinds": dict(sorted(self.malformed_kinds.items())), "examples": self.examples,
        }  # fmt: skip


class RecordDropped(Exception):
    """Why a row made no pair: a reason of :data:`DROP_REASONS`, a detail (``kind: why`` if malformed)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


# ---- the validity filter ---------------------------------------------------------------------------------
def _periodic_cover(seq: list[str], max_period: int) -> float:
    """The largest share of ``seq`` inside a stretch where one unit of ``p <= max_period`` items repeats
    back to back at least three times (``x x x``, ``a b a b a b``)."""
    best = 0.0
    for p in range(1, max_period + 1):
        covered = run = 0
        for i in range(p, len(seq) + 1):
            if i < len(seq) and seq[i] == seq[i - p]:
                run += 1
                continue
            covered += run + p if run >= 2 * p else 0
            run = 0
        best = max(best, covered / len(seq))
    return best


def is_repetitive(text: str) -> bool:
    """The degeneracy test: at least half of the response is one short unit repeated back to back.

    Words (whitespace-split, those with a letter or digit): 16 or more, and >= 50% of them in a run where a
    unit of 1-8 words repeats at least 3 times in a row. Lines (non-empty, stripped): 6 or more, and >= 50%
    of them in such a run of a 1-4 line unit. Prose, lists, code and tables repeat words and lines, but not
    whole units back to back over half the text (table rules like ``|`` are not words).
    """
    words = [w for w in text.split() if any(c.isalnum() for c in w)]
    if len(words) >= 16 and _periodic_cover(words, 8) >= 0.5:
        return True
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return len(lines) >= 6 and _periodic_cover(lines, 4) >= 0.5


def validity_reason(prompt: Any, chosen: Any, rejected: Any) -> tuple[str, str] | None:
    """``(reason, detail)`` when the pair fails the validity filter, else None; never raises."""
    if not isinstance(prompt, list) or not all(isinstance(m, dict) for m in prompt):
        return "malformed", f"bad_prompt: prompt is {type(prompt).__name__}"
    users = [m.get("content") for m in prompt if m.get("role") == "user"]
    if not any(isinstance(u, str) and u.strip() for u in users):
        return "no_user_turn", ""
    if not isinstance(users[-1], str) or not users[-1].strip():
        return "no_user_turn", "the final user turn is empty"
    for side, text in (("chosen", chosen), ("rejected", rejected)):
        if text is None:
            return "missing_response", side
        if not isinstance(text, str):
            return "malformed", f"bad_type: {side} is {type(text).__name__}"
        if not text.strip():
            return "empty_response", side
    if " ".join(chosen.split()) == " ".join(rejected.split()):
        return "identical_responses", ""
    for side, text in (("chosen", chosen), ("rejected", rejected)):
        if is_repetitive(text):
            return "repetitive_response", side
    return None


# ---- per-dataset parsing ---------------------------------------------------------------------------------
def _text(content: Any, where: str) -> str | None:
    """A message's text: a string, or the text parts of ``[{type, text}]``; None stays None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str)]
        return "\n".join(texts)
    raise RecordDropped("malformed", f"bad_message: {where} content is {type(content).__name__}")


def _messages(value: Any, name: str) -> list[dict[str, Any]]:
    if isinstance(value, str):  # some mirrors store the list JSON-encoded
        try:
            value = json.loads(value)
        except ValueError:
            raise RecordDropped("malformed", f"bad_messages: {name} is a string, not a JSON list") from None
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else f"{type(value).__name__}, not a list"
        raise RecordDropped("malformed", f"bad_messages: {name} is {got}")
    out = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
            raise RecordDropped("malformed", f"bad_message: {name}[{i}] is not a system/user/assistant turn")
        out.append({"role": msg["role"], "content": _text(msg.get("content"), f"{name}[{i}]")})
    return out


def _split_last(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """``(history, final assistant text)``; no final assistant turn: ``(messages, None)``."""
    if messages[-1]["role"] == "assistant":
        return messages[:-1], messages[-1]["content"]
    return messages, None


def _arena(row: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, Any, dict[str, Any]]:
    winner = row.get("winner")
    if winner in _TIES:
        raise RecordDropped("no_preference", f"winner={winner}")
    if winner not in ("model_a", "model_b"):
        raise RecordDropped("malformed", f"bad_label: winner={winner!r}")
    ctx_a, resp_a = _split_last(_messages(row.get("conversation_a"), "conversation_a"))
    ctx_b, resp_b = _split_last(_messages(row.get("conversation_b"), "conversation_b"))
    if [m for m in ctx_a if m["role"] == "user"] != [m for m in ctx_b if m["role"] == "user"]:
        raise RecordDropped("malformed", "sides_disagree: the two conversations' user turns differ")
    a_wins = winner == "model_a"
    meta = {
        "winner": winner, "language": row.get("language"), "turns": sum(m["role"] == "user" for m in ctx_a),
        "model_chosen": row.get("model_a" if a_wins else "model_b"),
        "model_rejected": row.get("model_b" if a_wins else "model_a"), "context_differs": ctx_a != ctx_b,
    }  # fmt: skip
    return (ctx_a if a_wins else ctx_b), (resp_a if a_wins else resp_b), (resp_b if a_wins else resp_a), meta


def _helpsteer3(row: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, Any, dict[str, Any]]:
    pref = row.get("overall_preference")
    if isinstance(pref, bool) or not isinstance(pref, int) or not -3 <= pref <= 3:
        raise RecordDropped("malformed", f"bad_label: overall_preference={pref!r}")
    if pref == 0:
        raise RecordDropped("no_preference", "overall_preference=0")
    context = _messages(row.get("context"), "context")
    first, second = row.get("response1"), row.get("response2")
    meta = {"overall_preference": pref, "domain": row.get("domain"), "language": row.get("language")}
    return context, (first if pref < 0 else second), (second if pref < 0 else first), meta


def parse_transcript(text: Any, name: str = "transcript") -> list[dict[str, str]]:
    """``"\\n\\nHuman: ...\\n\\nAssistant: ..."`` as user/assistant messages (content stripped)."""
    if not isinstance(text, str):
        raise RecordDropped("malformed", f"bad_type: {name} is {type(text).__name__}")
    marks = list(_TURN.finditer(text))
    if not marks or text[: marks[0].start()].strip():
        raise RecordDropped("malformed", f"bad_transcript: {name} does not start with Human:/Assistant:")
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return [
        {"role": "user" if m[1] == "Human" else "assistant", "content": text[m.end() : end].strip()}
        for m, end in zip(marks, ends, strict=True)
    ]


def _hh_rlhf(row: dict[str, Any]) -> tuple[list[dict[str, Any]], Any, Any, dict[str, Any]]:
    if "prompt" in row:  # Dahoas/full-hh-rlhf: the transcript up to a final empty "Assistant:"
        turns = parse_transcript(row["prompt"], "prompt")
        if turns[-1] != {"role": "assistant", "content": ""}:
            raise RecordDropped("malformed", "bad_transcript: prompt does not end with an empty Assistant:")
        chosen, rejected = (row.get(k) for k in ("chosen", "rejected"))
        chosen, rejected = (t.strip() if isinstance(t, str) else t for t in (chosen, rejected))
        return turns[:-1], chosen, rejected, {"format": "dahoas"}
    for side in ("chosen", "rejected"):
        if row.get(side) is None:
            raise RecordDropped("missing_response", side)
    ctx_c, chosen = _split_last(parse_transcript(row["chosen"], "chosen"))
    ctx_r, rejected = _split_last(parse_transcript(row["rejected"], "rejected"))
    if chosen is None or rejected is None:
        raise RecordDropped("malformed", "bad_transcript: a transcript does not end with an Assistant: turn")
    if ctx_c != ctx_r:
        raise RecordDropped("malformed", "sides_disagree: the transcripts differ before the final turn")
    return ctx_c, chosen, rejected, {"format": "anthropic"}


_PARSERS = {"arena": _arena, "helpsteer3": _helpsteer3, "hh_rlhf": _hh_rlhf}


def pair_id(dataset: str, key: str) -> str:
    """The deterministic id of a pair: its dataset and its own id or ``origin#index``."""
    return f"{dataset}-{hashlib.sha256(f'{dataset}:{key}'.encode()).hexdigest()[:16]}"


def filter_rows(
    dataset: str, rows: Iterable[tuple[str, int, Any]], counts: PreferenceCounts
) -> list[PreferencePair]:
    """Parse ``(origin, index, row)`` rows of ``dataset`` and keep the valid pairs; ``counts`` is updated."""
    kept: list[PreferencePair] = []
    seen: set[str] = set()
    for origin, index, row in rows:
        counts.original += 1
        own = (row.get("question_id") or row.get("id")) if isinstance(row, dict) else None
        pid = pair_id(dataset, own if isinstance(own, str) and own else f"{origin}#{index}")
        if pid in seen:  # a repeated own id: the position keeps the ids unique
            pid = pair_id(dataset, f"{own}@{origin}#{index}")
        seen.add(pid)
        where = f"{pid} ({origin}#{index})"
        try:
            if not isinstance(row, dict):
                raise RecordDropped("malformed", f"not_an_object: {type(row).__name__}")
            prompt, chosen, rejected, meta = _PARSERS[dataset](row)
            if bad := validity_reason(prompt, chosen, rejected):
                raise RecordDropped(*bad)
            meta["origin"] = f"{origin}#{index}"
            kept.append(
                PreferencePair(
                    id=pid, source=dataset, prompt=prompt, chosen=chosen, rejected=rejected, metadata=meta
                )
            )
        except RecordDropped as drop:
            counts.drop(drop.reason, where, drop.detail)
        except ValidationError as exc:
            counts.drop("malformed", where, f"bad_pair: {exc.errors()[0]['msg']}")
    counts.valid = len(kept)
    return kept


# ---- reading ---------------------------------------------------------------------------------------------
class _LineDrops(MalformedCounter):
    """Routes :func:`parse_jsonl_line`'s unreadable lines into ``counts`` as original, malformed records."""

    def __init__(self, counts: PreferenceCounts) -> None:
        super().__init__()
        self.target = counts

    def add(self, reason: str, where: str, detail: str = "") -> None:
        self.target.original += 1
        self.target.drop("malformed", where, f"{reason}: {detail}")


def _jsonl_rows(path: Path, counts: PreferenceCounts) -> Iterator[tuple[str, int, Any]]:
    """Rows of a (gzipped) JSONL file; an unreadable line counts as an original, malformed record."""
    drops = _LineDrops(counts)
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as fh:
        for index, raw in enumerate(fh):
            raw = raw.removeprefix(b"\xef\xbb\xbf") if index == 0 else raw  # a UTF-8 byte-order mark
            if (row := parse_jsonl_line(raw, path, index + 1, drops)) is not None:
                yield f"{path.parent.name}/{path.name}", index, row


def iter_rows(source: PreferenceSource, counts: PreferenceCounts) -> Iterator[tuple[str, int, Any]]:
    """``(origin, index, row)`` of the local files, else of the hub split(s) at the revision (streamed)."""
    import datasets

    for name in source.local_files:
        path = Path(name)
        if not path.is_file():
            raise SourceError(f"{path}: no such {source.dataset} file (local_files)")
        if path.suffix != ".parquet":
            yield from _jsonl_rows(path, counts)
            continue
        try:
            stream = datasets.load_dataset("parquet", data_files=[str(path)], split="train", streaming=True)
            yield from ((f"{path.parent.name}/{path.name}", i, dict(r)) for i, r in enumerate(stream))
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            raise SourceError(f"{path}: not a readable Parquet file ({exc})") from exc
    if source.is_local:
        return
    for data_dir in source.data_dirs or [None]:
        stream = datasets.load_dataset(
            source.hub_id, name=source.config_name, data_dir=data_dir, split=source.split,
            revision=source.revision, streaming=True,
        )  # fmt: skip
        origin = f"{data_dir or source.config_name or 'default'}/{source.split}"
        yield from ((origin, i, dict(r)) for i, r in enumerate(stream))


def load_preference_source(
    source: PreferenceSource | dict[str, Any],
    *,
    profile: str = "production",
    key: str = "data.source",
    manifest: Manifest | None = None,
) -> tuple[list[PreferencePair], PreferenceCounts]:
    """Read one preference set (local files, else the hub at a pinned commit) into valid pairs and counts."""
    source = PreferenceSource.model_validate(source)
    check_pinned(source, profile, key)
    counts = PreferenceCounts(source.dataset)
    pairs = filter_rows(source.dataset, iter_rows(source, counts), counts)
    if manifest is not None:
        manifest.add_source(
            {
                "name": source.dataset, "hub_id": source.hub_id, "config": source.config_name,
                "split": source.split, "data_dirs": source.data_dirs,
                "revision": "local" if source.is_local else source.revision,
                "pinned": source.is_local or is_pinned(source.revision),
                "license": DEFAULTS[source.dataset][2], "local_files": source.local_files,
            }
        )  # fmt: skip
        manifest.step(f"preference_{source.dataset}", counts.valid, **counts.as_dict())
    return pairs, counts


def to_prompt_rows(pairs: Iterable[PreferencePair]) -> list[PromptRow]:
    """The RL prompts of the pairs (prompt only, no label): what the RLHF stage trains on."""
    return [
        PromptRow(id=p.id, prompt=p.prompt, label=None, metadata={"source": p.source, "pair_id": p.id})
        for p in pairs
    ]
