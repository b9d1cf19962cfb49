"""Bring an AgentWorldModel release into a local folder: from the hub at a pinned revision, or local files.

``prepare_release(source, dest, profile=..., manifest=...)`` returns the release folder that
``infra.agents.awm.release.load_release`` and the ``awm:release=DIR`` environment read, and records the
source in the manifest (hub id or local paths, revision, whether it is pinned, license, each file's
sha256). The config section is :class:`AwmSource` (``data.source`` in the stage config).

* **hub**: ``huggingface_hub.snapshot_download(hub_id, repo_type="dataset", revision=...,
  allow_patterns=<the release files>)``. The production profile refuses a revision that is not a
  40-hex commit (a branch such as ``main``, or none), naming the config key.
* **local**: ``local_dir`` (a release folder, used in place) or ``local_files`` (release files named as
  published, copied into ``dest``).

File names verified against the hub: the first commit of ``Snowflake/AgentWorldModel-1K``
(``1beaefd1765fe40fa72c002fe843fdb8db341a7d``) adds, at the repository root, ``gen_db``, ``gen_envs``,
``gen_sample``, ``gen_scenario``, ``gen_spec``, ``gen_tasks``, ``gen_verifier`` and
``gen_verifier.pure_code`` (``.jsonl``); the AWM README downloads the whole repository into one folder
(``hf download ... --repo-type dataset --local-dir``) and its pipeline reads and writes those names. They
are exactly :data:`~infra.agents.awm.release.RELEASE_STEMS` plus ``gen_verifier.jsonl`` (the SQL /
LLM-judge verifiers, which the code-verifier environment does not use, so it is not downloaded).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.io import sha256_file
from data_prep.manifest import Manifest
from infra.agents.awm.release import RELEASE_STEMS, REQUIRED, ReleaseError
from infra.layering import ConfigError

HUB_ID = "Snowflake/AgentWorldModel-1K"
#: The release's files, by the names the hub uses.
RELEASE_FILES = tuple(f"{stem}.jsonl" for stem in RELEASE_STEMS)
#: Written by ``data_prep.awm_generate`` beside the release (gold action sequences); recorded when present.
GOLD_FILE = "gold_actions.jsonl"
_COMMIT = re.compile(r"[0-9a-f]{40}")


class AwmSource(BaseModel):
    """Where the AWM release comes from: a hub data set at a revision, a local folder, or local files."""

    model_config = ConfigDict(extra="forbid")

    hub_id: str = Field(HUB_ID, description="Hub data set holding the release files at its root.")
    revision: str | None = Field(
        None, description="Hub commit (40 hex) to download; the production profile requires one."
    )
    local_dir: str | None = Field(None, description="A release folder on disk, used in place (no download).")
    local_files: list[str] = Field(
        default_factory=list, description="Release files on disk, named as published (gen_tasks.jsonl, ...)."
    )
    license: str = Field("cc-by-4.0", description="License recorded in the manifest (the hub card's).")

    @model_validator(mode="after")
    def _one_local_form(self) -> AwmSource:
        if self.local_dir and self.local_files:
            raise ValueError("give either local_dir or local_files, not both")
        return self

    @property
    def is_local(self) -> bool:
        """True when the release is read from disk rather than downloaded."""
        return bool(self.local_dir or self.local_files)


def is_pinned(revision: str | None) -> bool:
    """Return True when ``revision`` names one commit (40 hex digits), not a branch or tag."""
    return revision is not None and bool(_COMMIT.fullmatch(revision))


def check_pinned(source: AwmSource, profile: str, key: str = "data.source") -> None:
    """Raise :class:`ConfigError` when the production profile would download an unpinned revision."""
    if profile == "production" and not source.is_local and not is_pinned(source.revision):
        got = "none" if source.revision is None else repr(source.revision)
        raise ConfigError(
            f"{key}.revision: the production profile needs a 40-hex commit of {source.hub_id}, got {got}; "
            f"set {key}.revision: <commit> (or {key}.local_dir to a release folder)"
        )


def _check_complete(folder: Path, origin: str) -> None:
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        raise ReleaseError(f"{origin}: missing release file(s) {', '.join(missing)}")


def _copy_local_files(files: list[str], dest: Path, key: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        path = Path(name)
        if path.name not in (*RELEASE_FILES, GOLD_FILE):
            raise ReleaseError(
                f"{path}: not a release file name; expected one of {', '.join((*RELEASE_FILES, GOLD_FILE))}"
            )
        if not path.is_file():
            raise ReleaseError(f"{path}: no such file ({key}.local_files)")
        shutil.copyfile(path, dest / path.name)


def download_release(source: AwmSource, dest: Path) -> Path:
    """Download the release files of ``source.hub_id`` at ``source.revision`` into ``dest``; return it."""
    from huggingface_hub import snapshot_download

    snapshot_download(
        source.hub_id,
        repo_type="dataset",
        revision=source.revision,
        allow_patterns=list(RELEASE_FILES),
        local_dir=dest,
    )
    return dest


def release_files(folder: Path) -> dict[str, str]:
    """Return ``name -> sha256`` of every release file (and the gold file) present in ``folder``."""
    names = [*RELEASE_FILES, GOLD_FILE]
    return {name: sha256_file(folder / name) for name in names if (folder / name).is_file()}


def prepare_release(
    source: AwmSource,
    dest: str | Path,
    *,
    profile: str,
    manifest: Manifest | None = None,
    key: str = "data.source",
) -> Path:
    """Return the local release folder of ``source`` (downloaded or copied into ``dest`` when needed).

    ``profile`` is ``embedded`` or ``production``; production refuses an unpinned hub revision (the
    error names ``{key}.revision``). The source (hub id or local paths, revision, ``pinned``, license,
    file sha256s) is added to ``manifest``.
    """
    check_pinned(source, profile, key)
    dest = Path(dest)
    if source.local_dir:
        folder, origin = Path(source.local_dir), f"{key}.local_dir {source.local_dir}"
        if not folder.is_dir():
            raise ReleaseError(f"{origin}: not a directory")
    elif source.local_files:
        folder, origin = dest, f"{key}.local_files"
        _copy_local_files(source.local_files, dest, key)
    else:
        folder, origin = download_release(source, dest), f"{source.hub_id}@{source.revision or 'default'}"
    _check_complete(folder, origin)
    if manifest is not None:
        entry: dict[str, object] = {"name": "awm_release", "license": source.license}
        if source.is_local:
            entry.update(
                local=source.local_dir or list(source.local_files), revision=source.revision or "local"
            )
        else:
            pinned = is_pinned(source.revision)
            entry.update(hub_id=source.hub_id, revision=source.revision or "unpinned", pinned=pinned)
        entry["files"] = release_files(folder)
        manifest.add_source(entry)
    return folder
