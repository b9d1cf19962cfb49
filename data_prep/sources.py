"""Registry of the 17 public SFT sources of the paper's Table 17 (App. C) and how to stream their rows.

Each :class:`SourceSpec` records the hub id, the revision pin (``None`` until a stage config pins it;
production builds refuse unpinned sources unless told otherwise), the usage terms transcribed from the
paper's table, the upstream generators of the released responses, the capability category per subset
(Table 3's six categories) and the row format the converter expects. Hub ids follow the dataset pages
the releases are published on; a stage config can override any field.

Rows are streamed with ``datasets.load_dataset(..., revision=..., streaming=True)`` in production and
from local JSONL files (same format) in tests and offline runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from data_prep.io import MalformedCounter, read_jsonl

CATEGORIES = ("General Agent", "General Chat", "STEM", "Math", "Code", "Coding Agent")
FORMATS = ("auto", "sharegpt", "openai", "prompt_response")


@dataclass(frozen=True)
class Subset:
    """One hub config/split (or data file) of a source and the capability category its rows count as."""

    category: str
    config: str | None = None
    split: str = "train"
    data_files: str | None = None


@dataclass(frozen=True)
class SourceSpec:
    """One SFT source: where it lives, its terms and provenance, and how to read it."""

    name: str
    hub_id: str
    license: str
    upstream_generators: tuple[str, ...]
    subsets: tuple[Subset, ...]
    format: str = "auto"
    revision: str | None = None
    terms_note: str = ""
    system_prompt_patterns: tuple[str, ...] = ()
    keep_answer_tags: bool = field(default=False, metadata={"doc": "the reply's <answer> tag is the target"})
    local_files: tuple[tuple[str, str], ...] = field(default=(), metadata={"doc": "(path, category) pairs"})

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"source {self.name!r}: format {self.format!r} is not one of {FORMATS}")
        for sub in self.subsets:
            if sub.category not in CATEGORIES:
                raise ValueError(
                    f"source {self.name!r}: category {sub.category!r} is not one of {CATEGORIES}"
                )

    def with_local_files(self, *paths: str | Path, category: str | None = None) -> SourceSpec:
        """Return a copy that streams from local JSONL files in this source's format instead of the hub."""
        cat = category or self.subsets[0].category
        return replace(self, local_files=tuple((str(p), cat) for p in paths))

    def manifest_entry(self) -> dict:
        """What the manifest records about this source."""
        return {
            "name": self.name,
            "hub_id": self.hub_id,
            "revision": self.revision or "unpinned",
            "license": self.license,
            "terms_note": self.terms_note,
            "upstream_generators": list(self.upstream_generators),
            "format": self.format,
            "keep_answer_tags": self.keep_answer_tags,
            "local_files": [p for p, _ in self.local_files],
        }


def local_source(
    path: str | Path, name: str | None = None, *, fmt: str = "auto", category: str = "General Chat"
) -> SourceSpec:
    """Return an ad-hoc source reading one local JSONL file (license recorded as unknown)."""
    path = Path(path)
    return SourceSpec(
        name=name or path.stem,
        hub_id=f"local:{path}",
        license="unknown (local file)",
        upstream_generators=(),
        subsets=(Subset(category),),
        format=fmt,
        local_files=((str(path), category),),
    )


def iter_source_rows(
    spec: SourceSpec, malformed: MalformedCounter, *, allow_unpinned: bool = False
) -> Iterator[tuple[str, str, dict]]:
    """Yield ``(where, category, row)`` from local files if set, else from the hub at the pinned revision."""
    if spec.local_files:
        for path, category in spec.local_files:
            for where, row in read_jsonl(path, malformed):
                yield where, category, row
        return
    if spec.revision is None and not allow_unpinned:
        raise ValueError(
            f"source {spec.name!r} ({spec.hub_id}) has no pinned revision; pin one in the stage config "
            "or pass allow_unpinned=True (the manifest then records 'unpinned')"
        )
    import datasets  # heavy import, production path only

    for sub in spec.subsets:
        stream = datasets.load_dataset(
            spec.hub_id,
            name=sub.config,
            split=sub.split,
            data_files=sub.data_files,
            revision=spec.revision,
            streaming=True,
        )
        for i, row in enumerate(stream):
            yield f"{spec.hub_id}[{sub.config or 'default'}/{sub.split}]#{i}", sub.category, dict(row)


def _s(category: str, **kw: str) -> tuple[Subset, ...]:
    return (Subset(category, **kw),)


APACHE, CC_BY, MIT = "Apache-2.0", "CC BY 4.0", "MIT"
# Control lines some generators put in system prompts; they select a generation mode, not a persona.
_THINK_SWITCHES = (
    r"^\s*detailed thinking (on|off)\s*$",
    r"^\s*/(no_)?think\s*$",
    r"^\s*reasoning:\s*(low|medium|high)\s*$",
)

SFT_SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec(
        "Ring-lite-sft-data",
        "inclusionAI/Ring-lite-sft-data",
        APACHE,
        ("aggregated: BigMath, DeepScaleR, DAPO problems",),
        _s("Math"),
        "openai",
    ),
    SourceSpec(
        "hermes_reasoning_tool_use",
        "interstellarninja/hermes_reasoning_tool_use",
        APACHE,
        ("derived from ShareGPT conversations",),
        _s("General Agent"),
        "sharegpt",
    ),
    SourceSpec(
        "ToolMind",
        "Nanbeige/ToolMind",
        APACHE,
        ("DeepSeek-V2-Chat", "Mixtral-8x22B-Instruct", "DeepSeek-V3"),
        _s("General Agent"),
        "auto",
    ),
    SourceSpec(
        "tool-use-multiturn-reasoning",
        "interstellarninja/tool-use-multiturn-reasoning",
        APACHE,
        ("DeepSeek-R1", "QwQ-32B"),
        _s("General Agent"),
        "sharegpt",
    ),
    SourceSpec(
        "ToolMind-Web-QA",
        "Nanbeige/ToolMind-Web-QA",
        APACHE,
        ("MiroThinker with Qwen3-235B-A22B-Thinking-2507",),
        _s("General Agent"),
        "auto",
    ),
    SourceSpec(
        "Toucan-1.5M",
        "Agent-Ark/Toucan-1.5M",
        APACHE,
        ("Qwen3-32B", "Kimi-K2", "GPT-OSS"),
        _s("General Agent"),
        "openai",
    ),
    SourceSpec(
        "Scale-SWE-Distilled",
        "AweAI-Team/Scale-SWE-Distilled",
        CC_BY,
        ("GitHub pull requests (distilled agent trajectories)",),
        _s("Coding Agent"),
        "openai",
    ),
    SourceSpec(
        "Nemotron-Terminal-Corpus",
        "nvidia/Nemotron-Terminal-Corpus",
        CC_BY,
        ("Terminal-Task-Gen", "OpenCodeReasoning", "SWE-bench", "SWE-Smith"),
        _s("Coding Agent"),
        "auto",
    ),
    SourceSpec(
        "Nemotron-Post-Training-Dataset-v1",
        "nvidia/Nemotron-Post-Training-Dataset-v1",
        CC_BY,
        ("DeepSeek-R1", "QwQ-32B"),
        (
            Subset("Code", split="code"),
            Subset("Math", split="math"),
            Subset("STEM", split="stem"),
            Subset("General Chat", split="chat"),
            Subset("General Agent", split="tool_calling"),
        ),
        "openai",
        system_prompt_patterns=_THINK_SWITCHES,
    ),
    SourceSpec(
        "AM-Thinking-v1-Distilled",
        "a-m-team/AM-Thinking-v1-Distilled",
        "research use only; commercial and harmful uses prohibited",
        ("AM-Thinking-v1",),
        (
            Subset("Math", data_files="math.jsonl"),
            Subset("Code", data_files="code.jsonl"),
            Subset("STEM", data_files="science.jsonl"),
            Subset("General Chat", data_files="if.jsonl"),
            Subset("General Chat", data_files="general_chat.jsonl"),
        ),
        "openai",
        terms_note="model is Apache-2.0; the dataset page adds the research-only restriction",
    ),
    SourceSpec(
        "AReaL-tau2-data",
        "inclusionAI/AReaL-tau2-data",
        APACHE,
        ("Qwen3-30B-A3B",),
        _s("General Agent"),
        "openai",
    ),
    SourceSpec(
        "TxT360-3efforts", "LLM360/TxT360-3efforts", CC_BY, ("DeepSeek-R1", "QwQ-32B"), _s("Math"), "openai"
    ),
    SourceSpec(
        "Superior-Reasoning-SFT-gpt-oss-120b",
        "Alibaba-Apsara/Superior-Reasoning-SFT-gpt-oss-120b",
        CC_BY,
        ("GPT-OSS-120B",),
        _s("STEM", config="stage1"),
        "prompt_response",
        system_prompt_patterns=_THINK_SWITCHES,
    ),
    SourceSpec(
        "Logics-STEM-SFT-Dataset-Open-1.6M",
        "Logics-MLLM/Logics-STEM-SFT-Dataset-Open-1.6M",
        CC_BY,
        ("QwQ-32B", "DeepSeek-R1"),
        _s("STEM"),
        "auto",
    ),
    SourceSpec(
        "OpenSeeker-v1-30B-SFT",
        "OpenSeeker/OpenSeeker-v1-Data",
        MIT,
        ("Qwen3-30B-A3B-Thinking-2507",),
        _s("General Agent"),
        "openai",
    ),
    SourceSpec(
        "OpenResearcher-Dataset",
        "OpenResearcher/OpenResearcher-Dataset",
        MIT,
        ("GPT-OSS-120B",),
        _s("General Agent", config="seed_42"),
        "openai",
    ),
    SourceSpec(
        "SWESwiss-SFT-Merged-10K",
        "SWE-Swiss/SWESwiss-SFT-Merged-10K",
        MIT,
        ("SWE-Gym, SWE-Smith and SWE-bench train issues/PRs",),
        _s("Coding Agent"),
        "auto",
    ),
)

SOURCES_BY_NAME: dict[str, SourceSpec] = {s.name: s for s in SFT_SOURCES}


def get_source(name: str) -> SourceSpec:
    """Return the registered source called ``name`` (error lists the known names)."""
    try:
        return SOURCES_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown SFT source {name!r}; known: {', '.join(SOURCES_BY_NAME)}") from None
