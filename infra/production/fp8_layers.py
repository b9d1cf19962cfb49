"""Restore the first N decoder layers of an FP8 rollout copy to BF16 (RA §3.2: "first 3 layers BF16").

slime's ``tools/convert_hf_to_fp8.py`` quantises every eligible linear weight and has no option to skip
layers, so this step runs after it: for each ``model.layers.<i>.`` tensor with ``i < N`` it writes the
original BF16 weight back, deletes the matching ``weight_scale_inv`` and lists the modules under
``quantization_config.modules_to_not_convert`` so SGLang loads them unquantised. Files are rewritten
atomically, one safetensors shard at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _early(name: str, n: int) -> bool:
    m = _LAYER.match(name)
    return bool(m) and int(m.group(1)) < n


def restore_bf16_layers(bf16_dir: Path, fp8_dir: Path, layers: int) -> list[str]:
    """Put the BF16 weights of ``bf16_dir`` back into layers ``< layers`` of ``fp8_dir``; return modules."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    index_path = fp8_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    originals: dict[str, Path] = {}
    for shard in sorted(bf16_dir.glob("*.safetensors")):
        with safe_open(shard, framework="pt") as f:
            originals.update({k: shard for k in f.keys() if _early(k, layers)})
    restored: set[str] = set()
    for shard in sorted(fp8_dir.glob("*.safetensors")):
        with safe_open(shard, framework="pt") as f:
            names = list(f.keys())
            if not any(_early(k, layers) for k in names):
                continue
            tensors = {k: f.get_tensor(k) for k in names}
        for k in names:
            if not _early(k, layers):
                continue
            if k.endswith(".weight_scale_inv"):
                del tensors[k]
                index["weight_map"].pop(k, None)
            elif k in originals:
                with safe_open(originals[k], framework="pt") as src:
                    tensors[k] = src.get_tensor(k)
                if k.endswith(".weight"):
                    restored.add(k.removesuffix(".weight"))
        tmp = shard.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        os.replace(tmp, shard)
    index_path.write_text(json.dumps(index, indent=2))
    cfg_path = fp8_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    qc = cfg.setdefault("quantization_config", {})
    qc["modules_to_not_convert"] = sorted(set(qc.get("modules_to_not_convert", [])) | restored)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return sorted(restored)


def main(argv: list[str] | None = None) -> int:
    """CLI used by the rendered FP8 conversion step."""
    ap = argparse.ArgumentParser(prog="python -m infra.production.fp8_layers")
    ap.add_argument("--bf16-dir", required=True, type=Path)
    ap.add_argument("--fp8-dir", required=True, type=Path)
    ap.add_argument("--layers", required=True, type=int)
    a = ap.parse_args(argv)
    mods = restore_bf16_layers(a.bf16_dir, a.fp8_dir, a.layers)
    print(f"restored {len(mods)} modules of layers < {a.layers} to BF16")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
