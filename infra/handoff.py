"""The handoff between stages: a verified contract, not a path typed by hand.

Each stage ends by writing ``handoff.json`` beside its HF-format ``export/``: every file's SHA-256, the
tokenizer and chat-template hashes, the lineage (base model and parent stage), the stage's config hash, the
repository commit and headline metrics. Before a stage starts, the driver verifies its input handoff:
the files still match their hashes, the export loads, and the chat template is the one the SFT stage fixed
(the recipe keeps one template from SFT through the agent stages).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from infra.atomic import atomic_write_json
from infra.hashing import hash_tree, sha256_bytes, sha256_json
from infra.layering import ConfigError

HANDOFF = "handoff.json"
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


class HandoffError(RuntimeError):
    """An input checkpoint does not match its handoff record."""


class TamperedHandoffError(HandoffError):
    """A stored checkpoint no longer matches the handoff that signed it; it is never re-signed."""


def chat_template_of(export_dir: Path) -> str | None:
    """The chat template saved with a tokenizer (``chat_template.jinja`` or ``tokenizer_config.json``)."""
    jinja = export_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    cfg = export_dir / "tokenizer_config.json"
    if cfg.is_file():
        template = json.loads(cfg.read_text()).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: hash them all, in order
            return json.dumps(template, sort_keys=True)
    return None


def chat_template_hash(export_dir: Path) -> str | None:
    """SHA-256 of the chat template, or None when the tokenizer has none."""
    template = chat_template_of(export_dir)
    return sha256_bytes(template.encode()) if template is not None else None


def repo_commit() -> str:
    """The repository's HEAD commit, or 'unknown' outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head


def write_handoff(
    stage_dir: Path,
    export_dir: Path,
    *,
    stage: str,
    lineage: dict[str, Any],
    config_hash: str,
    metrics: dict[str, Any],
) -> dict[str, Any]:
    """Hash the export and write ``stage_dir/handoff.json``; returns the record."""
    files = hash_tree(export_dir)
    if not files:
        raise HandoffError(f"{export_dir}: export is empty; nothing to hand forward")
    record = {
        "stage": stage,
        "export": Path(export_dir).resolve().relative_to(Path(stage_dir).resolve()).as_posix(),
        "files": files,
        "content_hash": sha256_json(files),
        "tokenizer_sha256": sha256_json({k: v for k, v in files.items() if k in _TOKENIZER_FILES}),
        "chat_template_sha256": chat_template_hash(export_dir),
        "lineage": lineage,
        "config_hash": config_hash,
        "commit": repo_commit(),
        "metrics": metrics,
    }
    atomic_write_json(Path(stage_dir) / HANDOFF, record)
    return record


def read_handoff(stage_dir: Path) -> dict[str, Any]:
    """Read ``stage_dir/handoff.json`` with a clear error if absent or malformed."""
    path = Path(stage_dir) / HANDOFF
    if not path.is_file():
        raise HandoffError(f"{path}: no handoff record (the stage did not finish)")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HandoffError(f"{path}: not valid JSON: {exc}") from exc
    for key in ("export", "files", "content_hash", "chat_template_sha256"):
        if key not in record:
            raise HandoffError(f"{path}: missing key {key!r}")
    return record


def export_path(stage_dir: Path, record: dict[str, Any]) -> Path:
    """Absolute path of the export a handoff record describes."""
    return (Path(stage_dir) / record["export"]).resolve()


def verify_handoff(
    stage_dir: Path,
    *,
    expected_template: str | None = None,
    check_loads: Any = None,
) -> dict[str, Any]:
    """Check files against hashes, the chat template, and (if given) that the export loads."""
    record = read_handoff(stage_dir)
    export = export_path(stage_dir, record)
    if not export.is_dir():
        raise HandoffError(f"{stage_dir}/{HANDOFF}: export folder {export} is missing")
    actual = hash_tree(export)
    if actual != record["files"]:
        changed = sorted(set(actual.items()) ^ set(record["files"].items()))
        names = sorted({name for name, _ in changed})[:5]
        raise HandoffError(f"{export}: files differ from {stage_dir}/{HANDOFF} (e.g. {', '.join(names)})")
    if expected_template is not None and record["chat_template_sha256"] != expected_template:
        raise HandoffError(
            f"{export}: chat template {record['chat_template_sha256']} differs from the one fixed at SFT "
            f"({expected_template}); the recipe keeps one template from SFT on"
        )
    if check_loads is not None:
        try:
            check_loads(export)
        except Exception as exc:  # noqa: BLE001 - re-raised with the path that failed
            raise HandoffError(f"{export}: export does not load: {exc}") from exc
    return record


def external_checkpoint_record(path: Path) -> dict[str, Any]:
    """A handoff-like record for a checkpoint given by hand (``rufus stage --init-from``)."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"--init-from {path}: not a folder (expected an HF-format checkpoint)")
    files = hash_tree(path)
    return {
        "stage": None,
        "export": str(path.resolve()),
        "files": files,
        "content_hash": sha256_json(files),
        "chat_template_sha256": chat_template_hash(path),
    }
