"""Export a stage's torch_dist checkpoint to HF and verify the handoff to the next stage (cluster CLI).

``python -m infra.production.handoff export`` picks the iteration (the latest, ``--iteration N``, or the
one a held-out selection chose: ``--selection selection.json`` from ``infra.production.sft_select``) and
runs slime's ``tools/convert_torch_dist_to_hf.py`` with
``--origin-hf-dir`` so tokenizer and config come from the stage's input. ``verify`` checks what the next
stage depends on: the model shape in ``config.json`` is unchanged, the tokenizer files and chat template
are byte-identical to the input's, every weight the input has is present, and the export is not an FP8
copy; a verified export is then signed (``handoff.json`` beside it, ``infra.handoff``), which the next
stage's ``rufus preflight`` checks. Pure file checks, so they run (and are tested) without a GPU.

The multi-token-prediction (MTP) layer: GLM-4.5-Air's HF checkpoints carry one at layer 46
(``model.layers.46.*``, after the 46 decoder layers). No stage trains it (the model flags build no MTP
block, as slime's ``glm4.5-106B-A12B.sh``), so the converter's export lacks it; ``export
--carry-mtp-from-layer 46`` copies exactly those tensors from the stage's input into ``model-mtp.safetensors``
(README "Deviations": the MTP head is carried from the base model unchanged). Any other missing weight
still fails ``verify``. ``seed-phase`` starts a later training phase's checkpoint folder from the previous
phase's last iteration, so each phase loads and saves its own folder and a restart resumes that phase.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from infra.production.model_args import HF_SHAPE

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def iteration_dir(torch_dist: Path, iteration: int | None = None) -> Path:
    """The ``iter_<7-digit iteration>`` folder of ``iteration``, or of the latest one Megatron recorded."""
    if iteration is None:
        marker = torch_dist / "latest_checkpointed_iteration.txt"
        if not marker.is_file():
            raise FileNotFoundError(f"{marker}: no checkpoint recorded in {torch_dist}")
        text = marker.read_text().strip()
        if not text.isdigit():
            raise ValueError(f"{marker}: expected an iteration number, got {text!r}")
        iteration = int(text)
    path = torch_dist / f"iter_{iteration:07d}"
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: iteration folder missing")
    return path


def selected_iteration(selection: Path) -> int:
    """The iteration recorded in a ``selection.json``; raise naming the file when it has none."""
    if not selection.is_file():
        raise FileNotFoundError(f"{selection}: no selection (run infra.production.sft_select first)")
    value = json.loads(selection.read_text()).get("iteration")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{selection}: 'iteration' must be an integer, got {value!r}")
    return value


def convert_argv(
    iter_dir: str, output_dir: str, origin_hf_dir: str, slime_dir: str, vocab_size: int
) -> list[str]:
    """slime's torch_dist → HF conversion command for one iteration folder."""
    return [
        sys.executable,
        f"{slime_dir}/tools/convert_torch_dist_to_hf.py",
        "--input-dir",
        iter_dir,
        "--output-dir",
        output_dir,
        "--origin-hf-dir",
        origin_hf_dir,
        "--vocab-size",
        str(vocab_size),
        "--force",
    ]


_LAYER_INDEX = re.compile(r"^model\.layers\.(\d+)\.")


def carry_mtp(output_dir: Path, origin_hf_dir: Path, first_layer: int) -> list[str]:
    """Copy the input's MTP tensors (``model.layers.<n>.*``, n >= ``first_layer``) missing from the export."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    origin, mine = _weight_names(origin_hf_dir), _weight_names(output_dir)
    if origin is None or mine is None:
        raise FileNotFoundError(f"{origin_hf_dir} or {output_dir}: no model.safetensors.index.json")
    index_path = origin_hf_dir / "model.safetensors.index.json"
    weight_map = json.loads(index_path.read_text())["weight_map"]
    wanted = sorted(
        n for n in origin - mine if (m := _LAYER_INDEX.match(n)) and int(m.group(1)) >= first_layer
    )
    if not wanted:
        return []
    tensors = {}
    for name in wanted:
        with safe_open(origin_hf_dir / weight_map[name], framework="pt") as f:
            tensors[name] = f.get_tensor(name)
    shard = "model-mtp.safetensors"
    save_file(tensors, str(output_dir / shard), metadata={"format": "pt"})
    out_index = output_dir / "model.safetensors.index.json"
    data = json.loads(out_index.read_text())
    data["weight_map"].update({n: shard for n in wanted})
    out_index.write_text(json.dumps(data, indent=2))
    return wanted


def seed_phase(src: Path, dest: Path) -> int | None:
    """Point ``dest`` at ``src``'s last iteration unless ``dest`` already has one; return what it seeded."""
    if (dest / "latest_checkpointed_iteration.txt").is_file():
        return None
    it = iteration_dir(src)
    n = int(it.name.removeprefix("iter_"))
    dest.mkdir(parents=True, exist_ok=True)
    link = dest / it.name
    if not link.exists():
        link.symlink_to(it.resolve(), target_is_directory=True)
    state = src / "rollout" / f"global_dataset_state_dict_{n}.pt"
    if state.is_file():
        (dest / "rollout").mkdir(exist_ok=True)
        target = dest / "rollout" / state.name
        if not target.exists():
            target.symlink_to(state.resolve())
    (dest / "latest_checkpointed_iteration.txt").write_text(f"{n}\n")
    return n


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _weight_names(hf_dir: Path) -> set[str] | None:
    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        return set(json.loads(index.read_text()).get("weight_map", {}))
    return None


def verify_handoff(hf_dir: Path, origin_hf_dir: Path) -> list[str]:
    """Return the problems of an HF export relative to the stage's input (empty = a good handoff)."""
    problems: list[str] = []
    cfg_path, origin_cfg_path = hf_dir / "config.json", origin_hf_dir / "config.json"
    if not cfg_path.is_file():
        return [f"{cfg_path}: missing"]
    cfg = json.loads(cfg_path.read_text())
    origin = json.loads(origin_cfg_path.read_text()) if origin_cfg_path.is_file() else {}
    for key in HF_SHAPE:
        if key in origin and cfg.get(key) != origin[key]:
            problems.append(f"{cfg_path}: {key} = {cfg.get(key)!r}, input has {origin[key]!r}")
    if "quantization_config" in cfg:
        problems.append(f"{cfg_path}: has quantization_config (an FP8 rollout copy, not a BF16 export)")
    for name in TOKENIZER_FILES:
        a, b = hf_dir / name, origin_hf_dir / name
        if b.is_file() and (not a.is_file() or _sha(a) != _sha(b)):
            problems.append(f"{a}: differs from the input's {name} (tokenizer/chat template must not change)")
    mine, theirs = _weight_names(hf_dir), _weight_names(origin_hf_dir)
    if theirs is not None:
        if mine is None:
            problems.append(f"{hf_dir}: no model.safetensors.index.json")
        elif theirs - mine:
            missing = sorted(theirs - mine)
            problems.append(f"{hf_dir}: {len(missing)} weights of the input are missing, e.g. {missing[:3]}")
    return problems


def sign_export(hf_dir: Path, origin_hf_dir: Path) -> dict:
    """Write ``handoff.json`` beside a verified export (file hashes, lineage): the next stage's preflight
    verifies its input against it (``infra.handoff.verify_handoff``)."""
    from infra.handoff import write_handoff

    lineage = {"origin_hf_dir": str(origin_hf_dir)}
    stage_dir = hf_dir.parent
    return write_handoff(stage_dir, hf_dir, stage=stage_dir.name, lineage=lineage, config_hash="", metrics={})


def main(argv: list[str] | None = None) -> int:
    """CLI: ``export`` (select iteration + convert) or ``verify``; non-zero exit on any problem."""
    ap = argparse.ArgumentParser(prog="python -m infra.production.handoff")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--torch-dist", required=True, type=Path)
    pick = ex.add_mutually_exclusive_group()
    pick.add_argument("--iteration", type=int)
    pick.add_argument("--selection", type=Path, help="selection.json whose 'iteration' to export")
    ex.add_argument("--output-dir", required=True)
    ex.add_argument("--origin-hf-dir", required=True)
    ex.add_argument("--slime-dir", default="/root/slime")
    ex.add_argument("--vocab-size", type=int, required=True)
    ex.add_argument("--carry-mtp-from-layer", type=int, help="copy the input's MTP layers from this index")
    ve = sub.add_parser("verify")
    ve.add_argument("--hf-dir", required=True, type=Path)
    ve.add_argument("--origin-hf-dir", required=True, type=Path)
    se = sub.add_parser("seed-phase")
    se.add_argument("--from", dest="src", required=True, type=Path)
    se.add_argument("--to", dest="dest", required=True, type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "seed-phase":
        n = seed_phase(args.src, args.dest)
        print(f"{args.dest}: " + ("resuming its own checkpoint" if n is None else f"seeded at iteration {n}"))
        return 0
    if args.cmd == "export":
        iteration = selected_iteration(args.selection) if args.selection else args.iteration
        it = iteration_dir(args.torch_dist, iteration)
        cmd = convert_argv(str(it), args.output_dir, args.origin_hf_dir, args.slime_dir, args.vocab_size)
        print(" ".join(cmd), flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        if rc == 0 and args.carry_mtp_from_layer is not None:
            carried = carry_mtp(Path(args.output_dir), Path(args.origin_hf_dir), args.carry_mtp_from_layer)
            print(f"carried {len(carried)} MTP tensors from {args.origin_hf_dir}")
        return rc
    problems = verify_handoff(args.hf_dir, args.origin_hf_dir)
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        sign_export(args.hf_dir, args.origin_hf_dir)
        print(f"handoff OK: {args.hf_dir} (signed in {args.hf_dir.parent / 'handoff.json'})")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
