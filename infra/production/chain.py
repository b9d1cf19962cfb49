"""The checkpoint chain between stages and the conversion commands around ``train.py``.

Path used with the pinned slime (624b824a): the previous stage's HF export is passed straight to
``--ref-load`` (and reached through ``--load`` on first start, when the stage's torch_dist folder is
still empty, slime falls back to ``ref_load``). slime loads HF folders natively since f655e13d9
(2026-08-04, "Internalize mbridge", #2251); from mid-2025 to then it needed Megatron-Bridge/mbridge,
and before that an explicit ``tools/convert_hf_to_torch_dist.py`` step. ``ClusterProfile.native_hf_load
= False`` renders that explicit conversion for older images. After training, the selected torch_dist
iteration is exported with ``tools/convert_torch_dist_to_hf.py --origin-hf-dir`` (tokenizer and config
copied from the stage's input) and verified by ``infra.production.handoff`` before the next stage starts.
"""

from __future__ import annotations

from infra.production.cluster import ClusterProfile
from infra.production.model_args import VOCAB_SIZE, glm45_air_model_args


def fp8_commands(
    stage_id: str, init_hf: str, cluster: ClusterProfile, bf16_first_layers: int
) -> list[list[str]]:
    """HF(BF16) → FP8 block-quantised copy for SGLang; leading layers restored to BF16 (RA §3.2)."""
    out = cluster.fp8_copy(stage_id)
    cmds = [
        [
            "python3",
            f"{cluster.slime_dir}/tools/convert_hf_to_fp8.py",
            "--model-dir",
            init_hf,
            "--save-dir",
            out,
            "--strategy",
            "block",
            "--block-size",
            "128",
            "128",
            "--max-workers",
            "4",
        ]
    ]
    if bf16_first_layers:
        cmds.append(
            [
                "python3",
                "-m",
                "infra.production.fp8_layers",
                "--bf16-dir",
                init_hf,
                "--fp8-dir",
                out,
                "--layers",
                str(bf16_first_layers),
            ]
        )
    return cmds


def hf_to_torch_dist_command(init_hf: str, dest: str, cluster: ClusterProfile) -> list[str]:
    """Explicit HF → torch_dist conversion, needed only when the image cannot load HF folders."""
    return [
        "torchrun",
        "--nproc-per-node",
        str(cluster.gpus_per_node),
        f"{cluster.slime_dir}/tools/convert_hf_to_torch_dist.py",
        *glm45_air_model_args(),
        "--hf-checkpoint",
        init_hf,
        "--save",
        dest,
    ]


def export_commands(
    stage_id: str, init_hf: str, cluster: ClusterProfile, phase: int, selection: str | None = None
) -> list[list[str]]:
    """torch_dist (latest, or the iteration ``selection`` names) → HF with ``--origin-hf-dir``, then verify.

    ``handoff export`` resolves the iteration folder and runs slime's ``tools/convert_torch_dist_to_hf.py``
    (argv from :func:`infra.production.handoff.convert_argv`); ``handoff verify`` then checks the result.
    ``selection``: a ``selection.json`` of ``infra.production.sft_select`` (SFT's held-out plateau pick).
    """
    src = cluster.torch_dist(stage_id, phase)
    dest = cluster.hf_export(stage_id)
    pick = ["--selection", selection] if selection else []
    return [
        [
            "python3",
            "-m",
            "infra.production.handoff",
            "export",
            "--torch-dist",
            src,
            *pick,
            "--output-dir",
            dest,
            "--origin-hf-dir",
            init_hf,
            "--slime-dir",
            cluster.slime_dir,
            "--vocab-size",
            str(VOCAB_SIZE),
        ],
        ["python3", "-m", "infra.production.handoff", "verify", "--hf-dir", dest, "--origin-hf-dir", init_hf],
    ]
