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
from infra.production.model_args import NUM_LAYERS, VOCAB_SIZE, glm45_air_model_args

#: Block edge of slime's block FP8 (``--block-size 128 128``), the only block size SGLang's kernels take.
FP8_BLOCK = 128


def fp8_commands(stage_id: str, init_hf: str, cluster: ClusterProfile, strategy: str) -> list[list[str]]:
    """HF(BF16) → FP8 copy for SGLang with slime's converter (``strategy``: ``tensor`` or ``block``).

    Per-tensor is the default (README "Deviations"): 128×128 blocks need every per-GPU linear width to be
    a multiple of 128, and GLM-4.5-Air's 1408-wide routed and shared experts split over an 8-GPU engine
    are 176 wide. slime's weight sync re-quantizes every decoder linear in the copy's own scheme (the
    per-tensor branch of its FP8 quantizer), so the copy's layout is what SGLang serves all run long.
    """
    out = cluster.fp8_copy(stage_id)
    cmd = [
        "python3",
        f"{cluster.slime_dir}/tools/convert_hf_to_fp8.py",
        "--model-dir",
        init_hf,
        "--save-dir",
        out,
        "--strategy",
        strategy,
    ]
    if strategy == "block":
        cmd += ["--block-size", str(FP8_BLOCK), str(FP8_BLOCK)]
    return [[*cmd, "--max-workers", "4"]]


def seed_phase_command(cluster: ClusterProfile, stage_id: str, phase: int) -> list[str]:
    """Seed phase ``phase``'s checkpoint folder with the previous phase's last iteration (idempotent)."""
    return [
        "python3",
        "-m",
        "infra.production.handoff",
        "seed-phase",
        "--from",
        cluster.torch_dist(stage_id, phase - 1),
        "--to",
        cluster.torch_dist(stage_id, phase),
    ]


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
            "--carry-mtp-from-layer",
            str(NUM_LAYERS),
        ],
        ["python3", "-m", "infra.production.handoff", "verify", "--hf-dir", dest, "--origin-hf-dir", init_hf],
    ]
