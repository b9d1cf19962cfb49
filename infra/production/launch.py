"""Cluster bring-up for one stage: Ray head/worker commands, ``ray job submit`` and a KubeRay RayJob.

The runtime env puts Megatron and this repository on ``PYTHONPATH`` (slime loads our hooks by dotted
path inside its Ray actors) and sets ``CUDA_DEVICE_MAX_CONNECTIONS=1`` and the NCCL/GLOO settings of
slime's multi-node scripts. ``${MASTER_ADDR}``/``${NODE_IP}`` are left for the shell to expand, and so
are the stage's ``production.forward_env`` variables (e.g. stage 03's ``RUFUS_JUDGE_*``): the Ray actors
that score rewards see only the runtime env, not the head node's shell. On KubeRay they come from the
``rufus-env`` secret.

Every pod of the RayJob carries :data:`SANDBOX_SECURITY_CONTEXT`, what the bubblewrap code sandbox
(``infra.sandbox``; Coding RL's rewards, IF RL's teacher checkers) needs inside a container, and an
annotation saying why (README "The sandbox inside a pod"). Reward scoring runs in slime's rollout actors,
on any node, so head and workers get the same.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from infra.production.cluster import ClusterProfile

#: The least a container needs for the sandbox's bwrap, run as root without a user namespace so each job
#: gets its own unprivileged uid: SYS_ADMIN for the mount/PID/net/IPC/UTS namespaces and its tmpfs/proc
#: mounts; seccomp Unconfined because the runtime default profile refuses pivot_root (bwrap's switch to
#: the fresh root) even with SYS_ADMIN; AppArmor Unconfined because the runtime default profile denies
#: mount. Not privileged: no host devices, no host namespaces, every other default capability dropped
#: as usual. A Localhost seccomp profile (the runtime default plus pivot_root) may replace Unconfined.
SANDBOX_SECURITY_CONTEXT: dict[str, Any] = {
    "capabilities": {"add": ["SYS_ADMIN"]},
    "seccompProfile": {"type": "Unconfined"},
    "appArmorProfile": {"type": "Unconfined"},
}
SANDBOX_NOTE = (
    "bubblewrap code sandbox (infra.sandbox): SYS_ADMIN for namespaces and mounts, seccomp Unconfined for "
    "pivot_root, AppArmor Unconfined for mount; see README 'The sandbox inside a pod'"
)


def ray_head(cluster: ClusterProfile) -> list[str]:
    """Start the Ray head on the first node."""
    return [
        "ray",
        "start",
        "--head",
        "--node-ip-address",
        "${MASTER_ADDR}",
        "--num-gpus",
        str(cluster.gpus_per_node),
        "--disable-usage-stats",
        "--dashboard-host=0.0.0.0",
        "--dashboard-port=8265",
    ]


def ray_worker(cluster: ClusterProfile) -> list[str]:
    """Join one worker node (run on each of the other N-1 nodes)."""
    return [
        "ray",
        "start",
        "--address=${MASTER_ADDR}:6379",
        "--num-gpus",
        str(cluster.gpus_per_node),
        "--node-ip-address",
        "${NODE_IP}",
        "--disable-usage-stats",
    ]


def runtime_env_json(cluster: ClusterProfile, forward_env: tuple[str, ...] = ()) -> str:
    """The ``--runtime-env-json`` value (MASTER_ADDR and ``forward_env`` expanded by the shell at submit)."""
    env = {**cluster.runtime_env(), "MASTER_ADDR": "${MASTER_ADDR}"}
    env.update({name: "${" + name + ":-}" for name in forward_env})
    return json.dumps({"env_vars": env}, sort_keys=True)


def job_submit(
    cluster: ClusterProfile, entry: str, train_argv: list[str], forward_env: tuple[str, ...] = ()
) -> list[str]:
    """``ray job submit`` of slime's entry point with the stage's arguments."""
    return [
        "ray",
        "job",
        "submit",
        f"--address={cluster.dashboard}",
        f"--runtime-env-json={runtime_env_json(cluster, forward_env)}",
        "--",
        "python3",
        f"{cluster.slime_dir}/{entry}",
        *train_argv,
    ]


def rayjob_manifest(
    name: str, nodes: int, cluster: ClusterProfile, entrypoint: str, forward_env: tuple[str, ...] = ()
) -> str:
    """A KubeRay ``RayJob`` (one head + N-1 workers, 8 GPUs each) running ``entrypoint``."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(cluster.runtime_env().items())]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": "rufus-env", "key": k, "optional": True}}}
        for k in forward_env
    ]
    res = {
        "limits": {"nvidia.com/gpu": cluster.gpus_per_node},
        "requests": {"nvidia.com/gpu": cluster.gpus_per_node},
    }

    def pod(role: str) -> dict[str, Any]:
        annotations = {
            "rufus.recipes/sandbox": SANDBOX_NOTE,
            # Clusters before Kubernetes 1.30 read AppArmor from this annotation, not the field.
            f"container.apparmor.security.beta.kubernetes.io/{role}": "unconfined",
        }
        return {
            "metadata": {"annotations": annotations},
            "spec": {
                "containers": [
                    {
                        "name": role,
                        "image": cluster.image,
                        "env": env,
                        "resources": res,
                        "securityContext": SANDBOX_SECURITY_CONTEXT,
                        "volumeMounts": [
                            {"name": "shared", "mountPath": "/mnt/rufus"},
                            {"name": "dshm", "mountPath": "/dev/shm"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "shared", "persistentVolumeClaim": {"claimName": "rufus-shared"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                ],
            },
        }

    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {
            "entrypoint": entrypoint,
            "shutdownAfterJobFinishes": True,
            "runtimeEnvYAML": yaml.safe_dump({"env_vars": cluster.runtime_env()}, sort_keys=True),
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {"num-gpus": str(cluster.gpus_per_node), "dashboard-host": "0.0.0.0"},
                    "template": pod("ray-head"),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": nodes - 1,
                        "minReplicas": nodes - 1,
                        "maxReplicas": nodes - 1,
                        "rayStartParams": {"num-gpus": str(cluster.gpus_per_node)},
                        "template": pod("ray-worker"),
                    }
                ],
            },
        },
    }
    return yaml.safe_dump(manifest, sort_keys=False)
