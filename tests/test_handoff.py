"""Handoff records: hashes, chat-template pinning, load checks; atomic manifest writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.handoff import HandoffError, chat_template_hash, verify_handoff, write_handoff
from infra.manifest import RunManifest, StageEntry, without_timestamps


def _export(root: Path, template: str = "{{ messages }}") -> Path:
    export = root / "export"
    export.mkdir(parents=True)
    (export / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (export / "model.safetensors").write_bytes(b"\x00" * 64)
    (export / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return export


def _write(stage_dir: Path) -> dict:
    return write_handoff(
        stage_dir,
        stage_dir / "export",
        stage="00_sft",
        lineage={"base": {"model": "micro"}, "parent": None, "chain": ["00_sft"]},
        config_hash="abc",
        metrics={"sft_format": 0.5},
    )


def test_handoff_round_trip_and_tamper_detection(tmp_path: Path):
    _export(tmp_path)
    record = _write(tmp_path)
    assert record["export"] == "export"
    assert set(record["files"]) == {"config.json", "model.safetensors", "tokenizer_config.json"}
    assert record["chat_template_sha256"] == chat_template_hash(tmp_path / "export")
    assert verify_handoff(tmp_path, expected_template=record["chat_template_sha256"]) == record
    (tmp_path / "export" / "model.safetensors").write_bytes(b"\x01" * 64)
    with pytest.raises(HandoffError, match="model.safetensors"):
        verify_handoff(tmp_path)


def test_chat_template_must_stay_the_one_sft_fixed(tmp_path: Path):
    _export(tmp_path, template="{{ other }}")
    _write(tmp_path)
    with pytest.raises(HandoffError, match="differs from the one fixed at SFT"):
        verify_handoff(tmp_path, expected_template="0" * 64)


def test_export_that_does_not_load_is_rejected(tmp_path: Path):
    _export(tmp_path)
    _write(tmp_path)

    def refuse(path: Path) -> None:
        raise ValueError("no weights")

    with pytest.raises(HandoffError, match="does not load: no weights"):
        verify_handoff(tmp_path, check_loads=refuse)


def test_missing_or_empty_handoff(tmp_path: Path):
    with pytest.raises(HandoffError, match="no handoff record"):
        verify_handoff(tmp_path)
    (tmp_path / "export").mkdir()
    with pytest.raises(HandoffError, match="export is empty"):
        _write(tmp_path)


def test_manifest_is_written_atomically_and_compares_without_timestamps(tmp_path: Path):
    m = RunManifest(recipe="r", recipe_file="r.yaml", profile="embedded", seed=0, base={"model": "micro"})
    m.stages = [
        StageEntry(id="00_sft", folder="stages/00_sft", kind="sft", status="running", started_at="t0")
    ]
    m.save(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    loaded = RunManifest.load(tmp_path)
    assert loaded is not None and loaded.entry("00_sft").status == "running"
    a = loaded.model_dump(mode="json")
    loaded.entry("00_sft").started_at = "t1"
    loaded.save(tmp_path)
    b = RunManifest.load(tmp_path).model_dump(mode="json")
    assert a != b and without_timestamps(a) == without_timestamps(b)
    with pytest.raises(KeyError, match="01_reasoning_rl"):
        loaded.entry("01_reasoning_rl")
