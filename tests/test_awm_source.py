"""The AWM release source: local folder/files, the hub download at a pinned revision, the manifest entry.

No network: the hub path replaces ``huggingface_hub.snapshot_download`` with a double that writes the
fixture release into ``local_dir`` (a boundary double for the hub, which CI cannot reach) and records
how it was called.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from data_prep.awm_source import RELEASE_FILES, AwmSource, is_pinned, prepare_release
from data_prep.io import sha256_file
from data_prep.manifest import Manifest
from infra.agents.awm.release import RELEASE_STEMS, ReleaseError, load_release
from infra.layering import ConfigError

RELEASE = Path(__file__).parent / "fixtures" / "awm" / "release"
COMMIT = "1beaefd1765fe40fa72c002fe843fdb8db341a7d"


def test_release_files_are_the_published_names() -> None:
    assert set(RELEASE_FILES) == {f"{s}.jsonl" for s in RELEASE_STEMS}
    assert "gen_verifier.pure_code.jsonl" in RELEASE_FILES and "gen_verifier.jsonl" not in RELEASE_FILES
    assert is_pinned(COMMIT) and not is_pinned("main") and not is_pinned(None)
    assert not is_pinned(COMMIT.upper()) and not is_pinned(COMMIT[:12])


def test_local_dir_is_used_in_place_and_recorded_with_file_hashes(tmp_path: Path) -> None:
    manifest = Manifest("t")
    folder = prepare_release(
        AwmSource(local_dir=str(RELEASE)), tmp_path / "out", profile="production", manifest=manifest
    )
    assert folder == RELEASE and not (tmp_path / "out").exists()
    (entry,) = manifest.data["sources"]
    assert entry["revision"] == "local" and entry["local"] == str(RELEASE) and entry["license"] == "cc-by-4.0"
    assert entry["files"]["gen_tasks.jsonl"] == sha256_file(RELEASE / "gen_tasks.jsonl")
    assert set(entry["files"]) == {p.name for p in RELEASE.glob("*.jsonl")}
    assert "tiny_music_streaming" in load_release(folder)


def test_local_files_are_copied_and_bad_names_or_missing_files_are_named(tmp_path: Path) -> None:
    files = [str(p) for p in sorted(RELEASE.glob("*.jsonl"))]
    folder = prepare_release(AwmSource(local_files=files), tmp_path / "r", profile="embedded")
    assert folder == tmp_path / "r" and sorted(p.name for p in folder.iterdir()) == sorted(
        Path(f).name for f in files
    )
    odd = tmp_path / "tasks.jsonl"
    shutil.copy(RELEASE / "gen_tasks.jsonl", odd)
    with pytest.raises(ReleaseError, match=r"tasks.jsonl: not a release file name"):
        prepare_release(AwmSource(local_files=[str(odd)]), tmp_path / "x", profile="embedded")
    partial = [f for f in files if not f.endswith("gen_envs.jsonl")]
    with pytest.raises(ReleaseError, match=r"missing release file\(s\) gen_envs.jsonl"):
        prepare_release(AwmSource(local_files=partial), tmp_path / "y", profile="embedded")
    with pytest.raises(ReleaseError, match="not a directory"):
        prepare_release(AwmSource(local_dir=str(tmp_path / "nope")), tmp_path / "z", profile="embedded")


def test_config_section_rejects_unknown_keys_and_two_local_forms() -> None:
    with pytest.raises(ValidationError, match="revison"):
        AwmSource.model_validate({"revison": COMMIT})
    with pytest.raises(ValidationError, match="either local_dir or local_files"):
        AwmSource(local_dir="a", local_files=["b"])


class Hub(list):
    """Calls made to the hub double; ``repo`` is the folder it serves (the fixture release)."""

    repo = RELEASE


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    """Replace the hub download (boundary double): copy the served folder's allowed files into local_dir."""
    calls = Hub()

    def snapshot_download(repo_id: str, **kw: object) -> str:
        calls.append({"repo_id": repo_id, **kw})
        dest = Path(str(kw["local_dir"]))
        dest.mkdir(parents=True, exist_ok=True)
        for name in kw["allow_patterns"]:  # type: ignore[union-attr]
            if (calls.repo / name).is_file():
                shutil.copy(calls.repo / name, dest / name)
        return str(dest)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_production_refuses_an_unpinned_revision_naming_the_key(tmp_path: Path, hub: Hub) -> None:
    for revision in (None, "main"):
        with pytest.raises(ConfigError, match=r"^data\.source\.revision: the production profile needs"):
            prepare_release(AwmSource(revision=revision), tmp_path, profile="production")
    with pytest.raises(ConfigError, match=r"^stage\.awm\.revision: .* got 'v1'"):
        prepare_release(AwmSource(revision="v1"), tmp_path, profile="production", key="stage.awm")
    assert hub == []  # refused before any download


def test_pinned_hub_download_asks_for_the_release_files_and_records_them(tmp_path: Path, hub: Hub) -> None:
    manifest = Manifest("t")
    src = AwmSource(revision=COMMIT)
    folder = prepare_release(src, tmp_path / "rel", profile="production", manifest=manifest)
    (call,) = hub
    assert call["repo_id"] == "Snowflake/AgentWorldModel-1K" and call["repo_type"] == "dataset"
    assert call["revision"] == COMMIT and sorted(call["allow_patterns"]) == sorted(RELEASE_FILES)
    (entry,) = manifest.data["sources"]
    assert entry["hub_id"] == "Snowflake/AgentWorldModel-1K" and entry["revision"] == COMMIT
    assert entry["pinned"] is True
    assert entry["files"]["gen_envs.jsonl"] == sha256_file(RELEASE / "gen_envs.jsonl")
    assert "tiny_music_streaming" in load_release(folder)


def test_embedded_may_download_unpinned_and_says_so(tmp_path: Path, hub: Hub) -> None:
    manifest = Manifest("t")
    prepare_release(AwmSource(), tmp_path / "rel", profile="embedded", manifest=manifest)
    entry = manifest.data["sources"][0]
    assert hub[0]["revision"] is None and entry["revision"] == "unpinned" and entry["pinned"] is False


def test_an_incomplete_hub_snapshot_is_an_error(tmp_path: Path, hub: Hub) -> None:
    hub.repo = tmp_path / "repo"
    shutil.copytree(RELEASE, hub.repo)
    (hub.repo / "gen_envs.jsonl").unlink()
    src = AwmSource(hub_id="someone/partial", revision=COMMIT)
    with pytest.raises(ReleaseError, match=rf"someone/partial@{COMMIT}: missing .*gen_envs.jsonl"):
        prepare_release(src, tmp_path / "rel", profile="production")
