"""MiroVerse-v0.1 as a QA set for Search Agent RL (RA §3.7): questions, gold answers, the held-out split.

``load_miroverse(source, profile=...)`` returns ``(records, counts)``: one record per distinct
question, ``{id, question, answers, source, subset, metadata}``, and :class:`MiroVerseCounts` (rows
read, kept, and every drop by reason, malformed rows named by file and line/row). ``heldout_split``
splits the records by a salted hash of their id (10% by default: ~4.07K of the paper's 40,683).

**The release format** (no hub access here; the hub repository is gated, so accept its terms and set
``HF_TOKEN`` before a production download). Found in public code that reads it:

* Files: ``jsonl_sft/MiroVerse-<Subset>.jsonl``, one per subset (:data:`SUBSETS`), one trajectory per
  line (neulab/agent-data-protocol ``datasets/miroverse_v0_1/extract_raw.py``, ``CONFIG_FILES``). The
  hub configs are those subset names plus ``MiroVerse-v0.1-all`` (split ``train``, column ``messages``,
  read by MiroMindAI/MiroTrain ``recipes/configs/mirothinker_v0_1/sft/*.yaml`` with
  ``conversation_style: traces``) and ``MiroVerse-DPO`` (splits such as ``MuSiQue_8B_DPO``, the ``dpo``
  recipes; not read here). The viewer's Parquet conversion (``refs/convert/parquet``,
  ``<config>/train/0000.parquet``) holds the same columns; both forms are read.
* Columns: ``messages``, a list of ``{role: system|user|assistant, content: str}``, plus the subset
  name in ``split`` (agent-data-protocol ``schema_raw.py`` and its ``README.md``: "Raw rows contain a
  ``messages`` list ... plus a ``split`` name"); ``id`` is not in the release (that converter makes one).
  There is **no answer column**: every row is a MiroFlow rollout "that reached the verified answer"
  (MiroMindAI/MiroFlow ``docs/mkdocs/docs/data.md``), and the answer is the last ``\\boxed{}`` of the
  final assistant turn. Tool calls are ``<use_mcp_tool>`` XML in assistant turns and their results are
  user turns; the question is the first user turn followed by the boxed-answer instruction
  (:data:`_ANSWER_SUFFIX`); the run ends with a "Summarize the above conversation, and output the FINAL
  ANSWER" user turn and the reformatted answer (agent-data-protocol ``sample_raw.json``; MiroFlow
  branch ``miroflow-0.1`` ``libs/miroflow/src/miroflow/utils/prompt_utils.py``).
* 147,985 rows = 60,412 main traces + 87,573 browsing sub-agent traces (``data.md``). A sub-agent trace
  answers a subtask the main agent wrote, not a dataset question: its system prompt says "You are an
  agent that performs the task of ..." (``prompt_utils.py``); it is dropped as ``sub_agent_trace``.
  The paper's 40,683 questions (36,614 candidates + 4,069 held out) are what the main traces leave
  after the drops below; with no hub access here that count is not reproduced.
* Attachments are not shipped; MiroFlow appends "Note: A <Type> file '<path>' is associated with this
  task." to the question (``miroflow-0.1`` ``utils/io_utils.py``, ``process_input``).

**Per row**, in this order: malformed structure (counted by reason and named by file and line or row,
never raised: ``invalid_json``/``not_an_object``/``not_utf8`` from :func:`data_prep.io.read_jsonl`,
``no_messages``, ``bad_message``), ``sub_agent_trace``, malformed content (``no_question``,
``no_boxed_answer``), ``vision_dependent``, ``attached_file`` (a non-image file the row does not
carry), then ``duplicate`` (same :func:`question_key`; the first row is kept and the
duplicate's answers are added as aliases). The vision rule (:func:`vision_signal`, the signal counted
in ``counts.vision_signals``) fires on: an image column (``image``, ``images``, ``image_path``,
``image_url``) that is not empty; an image part in a user turn's content list; an image placeholder
(``<image>``, ``<img``, a Markdown image) or an image URL in the question; an image attachment note; a
phrase pointing at a visual (:data:`_VISUAL_PHRASES`: "in the image", "this photo", "the figure
below", "as shown in the diagram", "Figure 3", ...; "figure" alone is not one, since "this figure" is
usually a person); or a ``visual_question_answering`` call by the main agent (every system prompt
lists that tool, so only calls count).

**Answers**: the gold is the final turn's last ``\\boxed{}``; the boxed answer of the turn before the
summarize prompt is an alias when it differs (e.g. ``2011-04-02`` and ``April 2, 2011``), and so are
duplicates' answers. Hand-written rather than ``datasets.load_dataset("json", data_files=...)``: that
builder aborts the whole file on one bad line and casts every row to one inferred schema, so it can
neither count nor name a malformed row. Production downloads the same JSONL files at a pinned commit
(:func:`check_pinned`) and reads them with the same code as the tests.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from data_prep.awm_source import is_pinned
from data_prep.io import MalformedCounter, read_jsonl, sha256_file
from data_prep.manifest import Manifest
from data_prep.miroverse_vision import ATTACHMENT, message_text, vision_signal
from infra.layering import ConfigError

HUB_ID = "miromind-ai/MiroVerse-v0.1"
#: Trace license; questions and answers keep their source's license (``data.md``), listed per subset.
TRACE_LICENSE = "cc-by-nc-4.0"
SUBSETS: dict[str, str] = {
    "MiroVerse-Voyager1.0": "cc-by-nc-4.0", "MiroVerse-MuSiQue": "cc-by-4.0",
    "MiroVerse-HotpotQA": "cc-by-sa-4.0", "MiroVerse-WebWalkerQA-Silver": "apache-2.0",
    "MiroVerse-MegaScience": "cc-by-nc-sa-4.0", "MiroVerse-TaskCraft": "mit",
    "MiroVerse-QA-Expert-Multi-Hop-V1.0": "apache-2.0", "MiroVerse-OneGen-TrainDataset-MultiHopQA": "mit",
    "MiroVerse-2WikiMultihopQA": "apache-2.0", "MiroVerse-WikiTables": "mit",
    "MiroVerse-WebShaper": "mit", "MiroVerse-WebDancer": "mit",
}  # fmt: skip
HELDOUT_FRACTION = 0.1
HELDOUT_SALT = "miroverse-heldout-v1"
DROP_REASONS = ("malformed", "sub_agent_trace", "vision_dependent", "attached_file", "duplicate")

_ROLES = {"system", "user", "assistant"}
_SUB_AGENT = re.compile(r"You are an agent that performs\b")
_ANSWER_SUFFIX = re.compile(
    r"\s*You should follow the format instruction in the re?question strictly and wrap the final answer "
    r"in \\boxed\{\}\.?\s*$"
)
_TOOL_CALL = re.compile(r"<use_mcp_tool>")
_FINALIZER = re.compile(r"Summarize the above conversation,? and output the FINAL ANSWER", re.IGNORECASE)


class SourceError(ValueError):
    """A MiroVerse source that cannot be read at all; one line naming the file or config key."""


class MiroVerseSource(BaseModel):
    """Where MiroVerse comes from: the hub at a pinned commit, or local files in the release format."""

    model_config = ConfigDict(extra="forbid")

    hub_id: str = Field(HUB_ID, description="Hub data set (gated: accept its terms, set HF_TOKEN).")
    revision: str | None = Field(None, description="Hub commit (40 hex); the production profile needs one.")
    subsets: list[str] = Field(
        default_factory=lambda: list(SUBSETS), description="Subsets to read (jsonl_sft/<name>.jsonl)."
    )
    local_files: list[str] = Field(
        default_factory=list, description="Release files on disk (.jsonl, or .parquet from the viewer)."
    )

    @field_validator("subsets")
    @classmethod
    def _known_subsets(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in SUBSETS]
        if unknown or not value:
            raise ValueError(f"unknown subset(s) {unknown or '(none given)'}; known: {', '.join(SUBSETS)}")
        return value

    @model_validator(mode="after")
    def _file_types(self) -> MiroVerseSource:
        odd = [f for f in self.local_files if Path(f).suffix not in (".jsonl", ".parquet")]
        if odd:
            raise ValueError(f"local_files must be .jsonl or .parquet, got {', '.join(odd)}")
        return self

    @property
    def is_local(self) -> bool:
        """True when the rows are read from disk rather than downloaded."""
        return bool(self.local_files)

    def hub_files(self) -> list[str]:
        """The release paths of the chosen subsets."""
        return [f"jsonl_sft/{s}.jsonl" for s in self.subsets]


def check_pinned(source: Any, profile: str, key: str = "data.source") -> None:
    """Raise :class:`ConfigError` when the production profile would download an unpinned revision.

    ``source`` is any hub source with ``hub_id``, ``revision`` and ``is_local`` (MiroVerse, the RLHF
    preference sets)."""
    if profile == "production" and not source.is_local and not is_pinned(source.revision):
        got = "none" if source.revision is None else repr(source.revision)
        raise ConfigError(
            f"{key}.revision: the production profile needs a 40-hex commit of {source.hub_id}, got {got}; "
            f"set {key}.revision: <commit> (or {key}.local_files)"
        )


@dataclass
class MiroVerseCounts:
    """What the load kept and dropped; ``rows == kept + sum(dropped_by_reason().values())``."""

    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)  # every reason but malformed
    malformed: MalformedCounter = field(default_factory=lambda: MalformedCounter(max_examples=50))
    vision_signals: Counter[str] = field(default_factory=Counter)
    kept_by_subset: Counter[str] = field(default_factory=Counter)

    def dropped_by_reason(self) -> dict[str, int]:
        """Rows dropped per reason of :data:`DROP_REASONS` (malformed included)."""
        return {r: self.malformed.total if r == "malformed" else self.dropped[r] for r in DROP_REASONS}

    @property
    def rows(self) -> int:
        """Rows read (non-blank lines or Parquet rows)."""
        return self.kept + sum(self.dropped_by_reason().values())

    def as_dict(self) -> dict[str, Any]:
        """Counts for the manifest."""
        return {
            "rows": self.rows,
            "kept": self.kept,
            "dropped": self.dropped_by_reason(),
            "malformed": self.malformed.as_dict(),
            "vision_signals": dict(sorted(self.vision_signals.items())),
            "kept_by_subset": dict(sorted(self.kept_by_subset.items())),
        }


class RowDropped(Exception):
    """Why :func:`parse_row` made no record: the reason, a detail, and whether it counts as malformed."""

    def __init__(self, reason: str, detail: str = "", malformed: bool = True) -> None:
        super().__init__(reason)
        self.reason, self.detail, self.malformed = reason, detail, malformed


# ---- text helpers ----------------------------------------------------------------------------------------
def boxed_answers(text: str) -> list[str]:
    """Every non-empty ``\\boxed{...}`` payload of ``text`` in order (nested braces balanced)."""
    out, start = [], text.find("\\boxed{")
    while start >= 0:
        i, depth = start + len("\\boxed{"), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0 and (inner := text[start + len("\\boxed{") : i - 1].strip()):
            out.append(inner)
        start = text.find("\\boxed{", i if depth == 0 else start + 1)
    return out


def question_key(text: str) -> str:
    """The duplicate key: NFKC, casefolded, punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def _messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RowDropped("no_messages", f"messages is {type(messages).__name__}, not a non-empty list")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
            raise RowDropped("bad_message", f"messages[{i}] is not a system/user/assistant message")
        if not isinstance(msg.get("content"), (str, list)):
            raise RowDropped("bad_message", f"messages[{i}].content is {type(msg.get('content')).__name__}")
    return messages


def _answers(messages: list[dict[str, Any]]) -> list[str]:
    last = messages[-1]
    gold = boxed_answers(message_text(last["content"])) if last["role"] == "assistant" else []
    if not gold:
        raise RowDropped("no_boxed_answer", "the final turn is not an assistant turn with \\boxed{}")
    answers = [gold[-1]]
    for i in range(len(messages) - 2, 0, -1):  # the answer given before the summarize prompt
        if messages[i]["role"] == "user" and _FINALIZER.search(message_text(messages[i]["content"])):
            before = messages[i - 1]
            if before["role"] == "assistant" and (pre := boxed_answers(message_text(before["content"]))):
                _add_alias(answers, pre[-1])
            break
    return answers


def _add_alias(answers: list[str], answer: str) -> None:
    if question_key(answer) not in {question_key(a) for a in answers}:
        answers.append(answer)


def parse_row(row: dict[str, Any], where: str, subset: str) -> dict[str, Any]:
    """Return the QA record of one release row; raise :class:`RowDropped` with the reason it is not one."""
    messages = _messages(row)
    system = message_text(messages[0]["content"]) if messages[0]["role"] == "system" else ""
    if _SUB_AGENT.search(system):
        raise RowDropped("sub_agent_trace", malformed=False)
    user = next((m for m in messages if m["role"] == "user"), None)
    raw_question = message_text(user["content"]).strip() if user else ""
    question = _ANSWER_SUFFIX.sub("", raw_question).strip()
    if not question:
        raise RowDropped("no_question", "no non-empty user turn")
    answers = _answers(messages)
    if signal := vision_signal(row, messages, question):
        raise RowDropped("vision_dependent", signal, malformed=False)
    if note := ATTACHMENT.search(question):
        raise RowDropped("attached_file", f"{note['kind']} file {note['name']}", malformed=False)
    assistant = [message_text(m["content"]) for m in messages if m["role"] == "assistant"]
    tool_calls = sum(len(_TOOL_CALL.findall(text)) for text in assistant)
    return {
        "id": "miroverse-" + hashlib.sha256(question_key(question).encode()).hexdigest()[:16],
        "question": question,
        "answers": answers,
        "source": HUB_ID,
        "subset": subset,
        "metadata": {
            "where": where,
            "row_id": row.get("id"),
            "license": SUBSETS.get(subset, "unknown"),
            "trace_license": TRACE_LICENSE,
            "turns": len(messages),
            "tool_calls": tool_calls,
            "traces": 1,
        },
    }


# ---- reading ---------------------------------------------------------------------------------------------
def _read_parquet(path: Path, malformed: MalformedCounter) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
        n = 0
        for batch in batches:
            for row in batch.to_pylist():
                n += 1
                yield f"{path} row {n}", row
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: not a readable Parquet file ({exc})") from exc


def _subset_of(path: Path, row: dict[str, Any]) -> str:
    """The row's ``split``, else the subset named by the file or a folder above it, else the file stem."""
    if isinstance(row.get("split"), str) and row["split"].strip():
        return row["split"].strip()
    names = (part.removesuffix(".jsonl") for part in reversed(path.parts))
    return next((name for name in names if name in SUBSETS), path.stem)


def iter_rows(
    paths: Iterable[Path], malformed: MalformedCounter
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield ``(where, subset, row)`` of release files; unreadable lines go to ``malformed``."""
    for path in paths:
        if not path.is_file():
            raise SourceError(f"{path}: no such MiroVerse file")
        rows = _read_parquet(path, malformed) if path.suffix == ".parquet" else read_jsonl(path, malformed)
        for where, row in rows:
            yield where, _subset_of(path, row), row


def download(source: MiroVerseSource, dest: Path | None = None) -> list[Path]:
    """Download the chosen subsets' JSONL files at ``source.revision``; return their local paths."""
    from huggingface_hub import snapshot_download

    root = Path(
        snapshot_download(
            source.hub_id,
            repo_type="dataset",
            revision=source.revision,
            allow_patterns=source.hub_files(),
            local_dir=dest,
        )
    )
    paths = [root / f for f in source.hub_files()]
    if missing := [str(p.relative_to(root)) for p in paths if not p.is_file()]:
        raise SourceError(f"{source.hub_id}@{source.revision}: missing release file(s) {', '.join(missing)}")
    return paths


def load_miroverse(
    source: MiroVerseSource | dict[str, Any],
    *,
    profile: str = "production",
    key: str = "data.source",
    dest: Path | None = None,
    manifest: Manifest | None = None,
) -> tuple[list[dict[str, Any]], MiroVerseCounts]:
    """Read MiroVerse (local files, else the hub at a pinned commit) into distinct QA records and counts."""
    source = MiroVerseSource.model_validate(source)
    check_pinned(source, profile, key)
    paths = [Path(f) for f in source.local_files] if source.is_local else download(source, dest)
    counts = MiroVerseCounts()
    kept: dict[str, dict[str, Any]] = {}
    for where, subset, row in iter_rows(paths, counts.malformed):
        try:
            record = parse_row(row, where, subset)
        except RowDropped as drop:
            if drop.malformed:
                counts.malformed.add(drop.reason, where, drop.detail)
            else:
                counts.dropped[drop.reason] += 1
                if drop.reason == "vision_dependent":
                    counts.vision_signals[drop.detail] += 1
            continue
        first = kept.get(record["id"])
        if first is None:
            kept[record["id"]] = record
            counts.kept += 1
            counts.kept_by_subset[subset] += 1
            continue
        counts.dropped["duplicate"] += 1
        first["metadata"]["traces"] += 1
        for answer in record["answers"]:
            _add_alias(first["answers"], answer)
    if manifest is not None:
        _record(manifest, source, paths, counts)
    return list(kept.values()), counts


def _record(manifest: Manifest, source: MiroVerseSource, paths: list[Path], counts: MiroVerseCounts) -> None:
    manifest.add_source(
        {
            "name": "miroverse",
            "hub_id": source.hub_id,
            "revision": "local" if source.is_local else source.revision,
            "pinned": source.is_local or is_pinned(source.revision),
            "license": {"traces": TRACE_LICENSE, **{s: SUBSETS[s] for s in source.subsets}},
            "files": {str(p): sha256_file(p) for p in paths},
        }
    )
    manifest.step("miroverse_load", counts.kept, **counts.as_dict())


def heldout_split(
    records: Iterable[dict[str, Any]], fraction: float = HELDOUT_FRACTION, salt: str = HELDOUT_SALT
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return ``(train, heldout)``: a record is held out when the salted hash of its id falls below
    ``fraction``, so membership depends on the id alone (not on order or on the other records)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"held-out fraction must be in [0, 1), got {fraction}")
    train, heldout = [], []
    for record in records:
        digest = hashlib.sha256(f"{salt}:{record['id']}".encode()).digest()
        (heldout if int.from_bytes(digest[:8], "big") < fraction * 2**64 else train).append(record)
    return train, heldout
