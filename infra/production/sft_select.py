"""Pick the SFT checkpoint carried forward by held-out loss plateau on the cluster (RA: step 3799 of 7112).

slime trains SFT with ``--debug-train-only``, so nothing is evaluated during the run. Every
``--save-interval`` steps it saves the torch_dist ``iter_<N>`` and, through ``--save-hf``, an HF snapshot
``rollout_<N>`` (the same N: both come from one ``save_model(rollout_id)`` call). This step scores the
snapshots in training order on the held-out conversations — token-mean NLL over exactly the tokens SFT
supervises, read from ``heldout_sft.tokens.jsonl`` and its packed ``.bin``, which
``infra.production.sft_data`` writes with the training masks — and applies the embedded trainer's plateau
rule (:func:`infra.plateau.observe_heldout`):
the lowest loss before ``patience`` evaluations in a row without a new best is selected, and snapshots after
the plateau are not scored. ``selection.json`` records every loss, the held-out file's hash and the
choice; a rerun scores only what it lacks (so a crash loses at most one snapshot's work).
``python -m infra.production.handoff export --selection selection.json`` then converts that iteration.

Written by hand: slime has no held-out selection for SFT, and transformers' ``Trainer`` would need the
model inside its own training loop. Each sequence is scored alone and its logits are formed in chunks of
``--chunk-tokens`` positions, so a 128K-token conversation never materializes a 128K × vocabulary matrix.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_prep.io import MalformedCounter, read_jsonl
from infra.atomic import atomic_write_json
from infra.hashing import sha256_file
from infra.plateau import observe_heldout

SNAPSHOT = re.compile(r"rollout_(\d+)$")


def list_snapshots(root: Path) -> list[tuple[int, Path]]:
    """Return ``(rollout id, folder)`` of every complete HF snapshot under ``root``, in training order."""
    found = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        m = SNAPSHOT.match(d.name)
        if m and d.is_dir() and (d / "config.json").is_file() and any(d.glob("*.safetensors")):
            found.append((int(m.group(1)), d))
    if not found:
        raise FileNotFoundError(
            f"{root}: no HF snapshots (rollout_<N> folders with config.json and *.safetensors); "
            "the SFT run writes them with --save-hf"
        )
    return sorted(found)


def read_heldout(path: Path, dropped: MalformedCounter) -> list[tuple[list[int], list[int]]]:
    """Return ``(token_ids, loss_mask)`` per held-out row; rows without ids and mask are dropped, counted."""
    from infra.production.sft_data import read_tokens, tokens_path

    bin_path = tokens_path(path)
    rows = []
    for where, row in read_jsonl(path, dropped):
        meta = row.get("metadata")
        try:
            ids, mask = read_tokens(bin_path, meta) if isinstance(meta, dict) else ([], [])
        except (ValueError, OSError):
            ids, mask = [], []
        if len(ids) < 2:
            dropped.add("no_token_ids_or_mask", where)
        elif not any(mask[1:]):
            dropped.add("no_supervised_tokens", where)
        else:
            rows.append((ids, mask))
    if not rows:
        raise ValueError(f"{path}: no usable held-out rows (dropped: {dropped.as_dict()})")
    return rows


def heldout_nll(model: Any, rows: list[tuple[list[int], list[int]]], chunk_tokens: int = 4096) -> float:
    """Return the token-mean next-token NLL of ``model`` over the supervised tokens of ``rows``.

    The decoder runs once per sequence; the output head and cross-entropy run over ``chunk_tokens``
    positions at a time (the model's logits are the head applied to the decoder's final hidden states, as
    for GLM-4.5 and Llama; a model with logit soft-capping would need it applied here).
    """
    import torch

    device = next(model.parameters()).device
    head = model.get_output_embeddings()
    total, count = 0.0, 0.0
    with torch.no_grad():
        for ids, mask in rows:
            x = torch.tensor([ids], device=device)
            hidden = model.base_model(input_ids=x, use_cache=False).last_hidden_state[0, :-1]
            target, weight = x[0, 1:], torch.tensor(mask[1:], dtype=torch.float32)
            for a in range(0, hidden.shape[0], chunk_tokens):
                b = min(a + chunk_tokens, hidden.shape[0])
                logits = head(hidden[a:b]).float()  # under device_map="auto" the head may sit on another GPU
                nll = torch.nn.functional.cross_entropy(
                    logits, target[a:b].to(logits.device), reduction="none"
                )
                total += float((nll * weight[a:b].to(logits.device)).sum())
            count += float(weight.sum())
    return total / max(count, 1.0)


def load_snapshot(path: Path) -> Any:
    """Load an HF snapshot for scoring: bf16 across every visible GPU, or float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    if torch.cuda.is_available():
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="auto").eval()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def select_checkpoint(
    snapshots_dir: Path,
    heldout: Path,
    output: Path,
    patience: int,
    chunk_tokens: int = 4096,
    load: Callable[[Path], Any] = load_snapshot,
) -> dict[str, Any]:
    """Score snapshots in order until the plateau, write ``output`` (selection.json) and return it."""
    snaps = list_snapshots(snapshots_dir)
    dropped = MalformedCounter()
    rows = read_heldout(heldout, dropped)
    digest = sha256_file(heldout)
    record: dict[str, Any] = {}
    if output.is_file():
        record = json.loads(output.read_text())
        if record.get("heldout_sha256") != digest:
            record = {}  # a different held-out set: earlier losses do not compare
    losses: dict[str, float] = record.get("losses", {})
    record = {"heldout": str(heldout), "heldout_sha256": digest, "heldout_rows": len(rows), "losses": losses}
    record["dropped_rows"] = dropped.as_dict()
    state: dict[str, Any] = {}
    output.parent.mkdir(parents=True, exist_ok=True)
    for rid, path in snaps:
        if str(rid) not in losses:
            model = load(path)
            losses[str(rid)] = heldout_nll(model, rows, chunk_tokens)
            del model
            atomic_write_json(output, record)
            print(f"rollout_{rid}: held-out loss {losses[str(rid)]:.5f}", flush=True)
        observe_heldout(state, rid, losses[str(rid)], patience)
        if state.get("plateau"):
            break
    chosen = int(state["selected_step"])
    record.update(
        selected_rollout=chosen,
        iteration=chosen,  # torch_dist iter_<N> is saved by the same save_model(rollout_id) call
        snapshot=str(dict(snaps)[chosen]),
        best_loss=state["best"],
        plateau=bool(state.get("plateau")),
        patience=patience,
        snapshots=[rid for rid, _ in snaps],
    )
    atomic_write_json(output, record)
    return record


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m infra.production.sft_select --snapshots DIR --heldout FILE --output FILE``."""
    ap = argparse.ArgumentParser(
        prog="python -m infra.production.sft_select", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--snapshots", required=True, type=Path, help="Folder of slime's rollout_<N> HF snapshots."
    )
    ap.add_argument("--heldout", required=True, type=Path, help="heldout_sft.tokens.jsonl from sft_data.")
    ap.add_argument("--output", required=True, type=Path, help="selection.json to write (and resume from).")
    ap.add_argument("--patience", type=int, default=3, help="Evaluations without a new best = plateau.")
    ap.add_argument("--chunk-tokens", type=int, default=4096, help="Positions per logits chunk.")
    args = ap.parse_args(argv)
    record = select_checkpoint(args.snapshots, args.heldout, args.output, args.patience, args.chunk_tokens)
    state = "plateau" if record["plateau"] else "no plateau before the last snapshot"
    print(f"selected rollout_{record['selected_rollout']} (loss {record['best_loss']:.5f}; {state})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
