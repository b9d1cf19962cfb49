"""Where things live on the cluster: the paths, image and environment a rendered command refers to.

A :class:`ClusterProfile` is the only machine-specific input of the production backend. The defaults
describe the layout the Dockerfile builds (slime at ``/root/slime``, Megatron at ``/root/Megatron-LM``,
this repository at ``/workspace/rufus-recipes``) with shared storage mounted at ``/mnt/rufus``.
Per-stage paths are derived here so the renderer, the checkpoint chain and the plan agree on them.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field


class ClusterProfile(BaseModel):
    """Paths, image and environment of an 8×H200 Ray cluster running the pinned slime image."""

    model_config = ConfigDict(extra="forbid")

    gpus_per_node: int = Field(default=8, description="GPUs per node (H200).")
    model_dir: str = Field(default="/mnt/rufus/models", description="Folder holding base HF checkpoints.")
    checkpoint_root: str = Field(default="/mnt/rufus/ckpt", description="Per-stage checkpoints go below.")
    data_root: str = Field(default="/mnt/rufus/data", description="Per-stage data-prep output goes below.")
    megatron_path: str = Field(default="/root/Megatron-LM", description="Megatron-LM checkout in the image.")
    slime_dir: str = Field(
        default="/root/slime", description="slime checkout in the image (train.py, tools/)."
    )
    repo_dir: str = Field(default="/workspace/rufus-recipes", description="This repository in the image.")
    image: str = Field(default="rufus-recipes:slime-624b824a", description="Image built from ./Dockerfile.")
    dashboard: str = Field(default="http://127.0.0.1:8265", description="Ray dashboard of the head node.")
    socket_ifname: str = Field(
        default="eth0", description="Interface for GLOO/TP sockets and NCCL bootstrap."
    )
    has_nvlink: bool = Field(default=True, description="H200 HGX nodes have NVLink/NVSwitch (NCCL NVLS).")
    wandb_project: str = Field(default="rufus-air", description="W&B project.")
    wandb_mode: str = Field(default="online", description="online | offline | disabled.")
    namespace: str = Field(default="rufus", description="Kubernetes namespace of the RayJobs.")
    native_hf_load: bool = Field(
        default=True,
        description="slime loads HF folders with --load/--ref-load (true from f655e13d9, 2026-08-04, on).",
    )

    def base_hf(self, base_model: str) -> str:
        """The HF folder of the recipe's base model (hub ids map to their last path component)."""
        if base_model.startswith("/"):
            return base_model
        return str(PurePosixPath(self.model_dir) / PurePosixPath(base_model).name)

    def stage_ckpt(self, stage_id: str) -> PurePosixPath:
        """Checkpoint folder of one stage."""
        return PurePosixPath(self.checkpoint_root) / stage_id

    def torch_dist(self, stage_id: str, phase: int = 0) -> str:
        """Megatron torch_dist checkpoints (``--save``/``--load``) of one stage phase."""
        return str(self.stage_ckpt(stage_id) / ("torch_dist" if phase == 0 else f"torch_dist_phase{phase}"))

    def hf_export(self, stage_id: str) -> str:
        """The HF export of a stage: what the next stage loads (the handoff)."""
        return str(self.stage_ckpt(stage_id) / "hf")

    def hf_snapshots(self, stage_id: str) -> str:
        """Template for slime's ``--save-hf`` periodic HF snapshots (checkpoint selection)."""
        return str(self.stage_ckpt(stage_id) / "hf_snapshots" / "rollout_{rollout_id}")

    def fp8_copy(self, stage_id: str) -> str:
        """FP8 block-quantised copy of a stage's input, served by the SGLang rollout engines."""
        return str(self.stage_ckpt(stage_id) / "input_fp8")

    def stage_data(self, stage_id: str) -> PurePosixPath:
        """Data-prep output of one stage (train.jsonl, heldout/<metric>.jsonl)."""
        return PurePosixPath(self.data_root) / stage_id

    def launch_dir(self, stage_id: str) -> PurePosixPath:
        """Where the stage's generated config files (hook YAML) are written on shared storage."""
        return self.stage_ckpt(stage_id) / "launch"

    def runtime_env(self) -> dict[str, str]:
        """Environment of every Ray worker: import paths (Megatron, this repo), CUDA and NCCL settings."""
        return {
            "PYTHONPATH": f"{self.megatron_path}/:{self.repo_dir}",
            "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "NCCL_NVLS_ENABLE": "1" if self.has_nvlink else "0",
            "NCCL_SOCKET_IFNAME": self.socket_ifname,
            "GLOO_SOCKET_IFNAME": self.socket_ifname,
            "TP_SOCKET_IFNAME": self.socket_ifname,
            "NCCL_CUMEM_ENABLE": "0",
            "no_proxy": "127.0.0.1,localhost",
        }


def http_wait(url: str, retries: int = 90, delay_s: int = 10) -> list[str]:
    """A runbook step that waits until ``url`` answers 2xx (a server started by an earlier step)."""
    return ["curl", "--silent", "--fail", "--retry", str(retries), "--retry-delay", str(delay_s),
            "--retry-all-errors", url]  # fmt: skip
