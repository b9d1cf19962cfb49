"""The cluster's SFT checkpoint pick: held-out NLL of slime's HF snapshots, the plateau rule, resume, export.

Snapshots here are micro models saved as ``rollout_<N>`` folders (what slime's ``--save-hf`` writes on the
cluster); the held-out rows come from the real ``infra.production.sft_data`` tokenizer pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from data_prep.io import MalformedCounter
from infra.embedded.models import build_micro
from infra.embedded.sft import Encoded, collate, token_nll_sum
from infra.plateau import observe_heldout
from infra.production import handoff
from infra.production.sft_select import heldout_nll, list_snapshots, read_heldout, select_checkpoint


def _rows(n: int = 6) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        length = 12 + 5 * i
        ids = torch.randint(5, 300, (length,), generator=g).tolist()
        rows.append((ids, [0] * (length // 2) + [1] * (length - length // 2)))
    return rows


def _write_heldout(path: Path, rows, extra_rows: tuple[tuple[list[int], list[int]], ...] = ()) -> Path:
    """Rows and packed tokens as ``sft_data`` writes them; ``extra_rows`` follow, then one non-JSON line."""
    from infra.production.sft_data import pack, tokens_path

    lines, packed, offset = [], [], 0
    for i, (a, m) in enumerate([*rows, *extra_rows]):
        lines.append(
            json.dumps(
                {"id": f"h{i}", "tools": [], "metadata": {"id": f"h{i}", "offset": offset, "length": len(a)}}
            )
        )
        packed.append(pack(a, m))
        offset += len(a)
    if extra_rows:
        lines.insert(len(rows) + 1, "not json")
    path.write_text("\n".join(lines) + "\n")
    tokens_path(path).write_bytes(b"".join(p.tobytes() for p in packed))
    return path


def test_chunked_nll_equals_the_sft_training_loss():
    model, _ = build_micro(seed=0)
    model.eval()
    rows = _rows()
    enc = [Encoded(a, m) for a, m in rows]
    with torch.no_grad():
        s, n = token_nll_sum(model, collate(enc, [[i] for i in range(len(enc))], 0, torch.device("cpu")))
    expected = float(s) / n
    assert heldout_nll(model, rows, chunk_tokens=7) == pytest.approx(expected, rel=1e-5)
    assert heldout_nll(model, rows, chunk_tokens=4096) == pytest.approx(expected, rel=1e-5)


def test_heldout_rows_bad_records_are_dropped_and_counted(tmp_path):
    path = _write_heldout(
        tmp_path / "h.jsonl",
        _rows(2),
        (([1], [0]), ([1, 2, 3], [1, 0, 0])),
    )
    dropped = MalformedCounter()
    assert len(read_heldout(path, dropped)) == 2
    assert dropped.total == 3 and dropped.counts["no_token_ids_or_mask"] == 1
    assert dropped.counts["no_supervised_tokens"] == 1
    empty = tmp_path / "e.jsonl"
    empty.write_text("{}\n")
    with pytest.raises(ValueError, match="e.jsonl: no usable held-out rows"):
        read_heldout(empty, MalformedCounter())


def _snapshots(root: Path, ids: list[int]) -> Path:
    for rid in ids:
        d = root / f"rollout_{rid}"
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_bytes(b"\0")
    (root / "rollout_999").mkdir()  # an unfinished save: no weights, not a candidate
    return root


def test_plateau_pick_stops_scoring_and_resumes(tmp_path):
    """Losses 5, 4, 3.5, 3.6, 3.7, 3.8, 1.0: patience 3 selects rollout 300 and never scores rollout 700."""
    losses = {100: 5.0, 200: 4.0, 300: 3.5, 400: 3.6, 500: 3.7, 600: 3.8, 700: 1.0}
    snaps = _snapshots(tmp_path / "hf_snapshots", list(losses))
    assert [rid for rid, _ in list_snapshots(snaps)] == sorted(losses)
    held = _write_heldout(tmp_path / "heldout.jsonl", _rows(2))
    scored: list[int] = []

    class Scored:  # a model double: the loss is looked up, not computed (the NLL itself is tested above)
        def __init__(self, rid: int) -> None:
            self.rid = rid

    def load(path: Path) -> Scored:
        rid = int(path.name.split("_")[1])
        scored.append(rid)
        return Scored(rid)

    import infra.production.sft_select as sel

    real = sel.heldout_nll
    sel.heldout_nll = lambda model, rows, chunk: losses[model.rid]
    try:
        out = tmp_path / "selection.json"
        record = select_checkpoint(snaps, held, out, patience=3, load=load)
        assert (record["selected_rollout"], record["iteration"], record["plateau"]) == (300, 300, True)
        assert scored == [100, 200, 300, 400, 500, 600]
        assert json.loads(out.read_text())["losses"]["600"] == 3.8
        # A rerun (e.g. after a crash) scores nothing it already has; a changed held-out set starts over.
        scored.clear()
        assert select_checkpoint(snaps, held, out, patience=3, load=load)["selected_rollout"] == 300
        assert scored == []
        _write_heldout(held, _rows(3))
        select_checkpoint(snaps, held, out, patience=5, load=load)
        assert scored == sorted(losses)  # no plateau within patience 5: every snapshot, best is the last
        assert json.loads(out.read_text())["selected_rollout"] == 700
    finally:
        sel.heldout_nll = real
    with pytest.raises(FileNotFoundError, match="no HF snapshots"):
        list_snapshots(tmp_path / "nowhere")


def test_plateau_rule_is_the_one_the_embedded_trainer_uses():
    state: dict = {}
    picks = [observe_heldout(state, step, loss, 2) for step, loss in [(1, 3.0), (2, 2.0), (3, 2.5), (4, 2.0)]]
    assert picks == [True, True, False, False] and state["selected_step"] == 2 and state["plateau"]
    free: dict = {}
    for step in range(5):
        observe_heldout(free, step, 1.0, None)
    assert "plateau" not in free and free["selected_step"] == 0


def test_export_takes_the_selected_iteration(tmp_path, monkeypatch):
    td = tmp_path / "torch_dist"
    for it in (300, 700):
        (td / f"iter_{it:07d}").mkdir(parents=True)
    (td / "latest_checkpointed_iteration.txt").write_text("700\n")
    selection = tmp_path / "selection.json"
    selection.write_text(json.dumps({"iteration": 300}))
    ran: list[list[str]] = []
    monkeypatch.setattr(
        handoff.subprocess, "run", lambda cmd, check: ran.append(cmd) or type("R", (), {"returncode": 0})
    )
    common = [
        "export",
        "--torch-dist",
        str(td),
        "--output-dir",
        "o",
        "--origin-hf-dir",
        "i",
        "--vocab-size",
        "8",
    ]
    assert handoff.main([*common, "--selection", str(selection)]) == 0
    assert ran[-1][ran[-1].index("--input-dir") + 1].endswith("iter_0000300")
    assert handoff.main(common) == 0 and ran[-1][ran[-1].index("--input-dir") + 1].endswith("iter_0000700")
    selection.write_text(json.dumps({"iteration": "300"}))
    with pytest.raises(ValueError, match="selection.json: 'iteration' must be an integer"):
        handoff.main([*common, "--selection", str(selection)])
