"""``infra/production/slime_patches/train_metadata.patch`` applies to the pinned slime and does what it says.

The checkout named by ``RUFUS_SLIME_DIR`` is copied twice into a temporary folder: one copy unpatched
(reverse-applied first if the checkout already carries the patch, as the image's ``/root/slime`` does),
one with ``git apply --check`` and ``git apply`` of the patch. The key lists are read by AST from both.
The path from slime ``Sample``s to the custom loss's ``batch`` then runs on CPU, in a child interpreter
per copy (this file run as a script: conftest already put the checkout itself on ``sys.path``):
``RolloutManager._post_process_rewards`` / ``_convert_samples_to_train_data`` / ``_split_train_data_by_dp``
compiled from the copy's ``slime/ray/rollout.py`` (the module imports SGLang), slime's real
``build_dp_schedule`` (dynamic batch size: first-fit packing reorders samples), ``process_rollout_data``,
``DataIterator`` and ``get_batch`` with ``train_one_step``'s own key list, then
``infra.production.fireflash_loss`` on each micro-batch, and ``train_metric_utils.log_rollout_data``.

Doubles, only at boundaries that cannot run here: ``ray.put``/``ray.get`` (a pickle round trip),
Megatron's ``mpu`` (TP = PP = CP = 1, the DP ranks played in turn), ``PackedSeqParams`` and ``wandb``
(plain stand-ins), slime's accelerator device (CPU), the actor's train-side fields (``log_probs`` =
rollout log-probs, GRPO ``advantages`` = the sample's reward per token; the GPU forward and
``compute_advantages_and_returns`` make them) and the rollout metric gather (records the log dict).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "infra" / "production" / "slime_patches" / "train_metadata.patch"
ROLLOUT, MODEL, METRICS = (
    "slime/ray/rollout.py",
    "slime/backends/megatron_utils/model.py",
    "slime/observability/train_metric_utils.py",
)
#: Response lengths of the probe's 8 samples (prompts are 4 tokens): two steps of 4 rollouts, DP 2,
#: ``max_tokens_per_gpu`` 32. slime's schedule gives rank 0 samples [0, 3, 5, 4] and rank 1 [2, 1, 7, 6],
#: the last two of each in one micro-batch: out of rollout order within a rank and within a micro-batch.
RESPONSE_LENGTHS = (19, 7, 16, 14, 2, 5, 2, 5)
PROMPT_LENGTH = 4


def _git(tree: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``git`` in ``tree`` without letting it find a repository above it (the copy has no .git)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    return subprocess.run(["git", *argv], cwd=tree, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """``{"pristine": unpatched copy, "patched": copy with the patch applied}``."""
    root = tmp_path_factory.mktemp("slime-patches")
    pristine = root / "pristine"
    shutil.copytree(os.environ["RUFUS_SLIME_DIR"], pristine, ignore=shutil.ignore_patterns(".git"))
    if _git(pristine, "apply", "--reverse", "--check", str(PATCH)).returncode == 0:
        assert _git(pristine, "apply", "--reverse", str(PATCH)).returncode == 0
    patched = root / "patched"
    shutil.copytree(pristine, patched)
    check = _git(patched, "apply", "--check", str(PATCH))
    assert check.returncode == 0, f"{PATCH.name} does not apply to RUFUS_SLIME_DIR: {check.stderr}"
    applied = _git(patched, "apply", str(PATCH))
    assert applied.returncode == 0, applied.stderr
    return {"pristine": pristine, "patched": patched}


def test_patch_applies_once(trees):
    """After ``git apply`` the patch reverses cleanly and no longer applies forward (no fuzz, no repeat)."""
    assert _git(trees["patched"], "apply", "--reverse", "--check", str(PATCH)).returncode == 0
    assert _git(trees["patched"], "apply", "--check", str(PATCH)).returncode != 0


def _function(tree: ast.AST, *path: str) -> ast.FunctionDef:
    """The function at ``path`` of nested names, e.g. ``("RolloutManager", "_split_train_data_by_dp")``."""
    node = tree
    for name in path:
        node = next(
            n
            for n in ast.walk(node)
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name and n is not node
        )
    assert isinstance(node, ast.FunctionDef)
    return node


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a list/set literal (starred and computed elements skipped)."""
    assert isinstance(node, (ast.List, ast.Set, ast.Tuple)), ast.dump(node)
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def split_keys(source: str) -> list[str]:
    """The per-sample keys ``RolloutManager._split_train_data_by_dp`` copies to each DP rank."""
    fn = _function(ast.parse(source), "RolloutManager", "_split_train_data_by_dp")
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.iter, ast.List)]
    return _strings(max(loops, key=lambda n: len(n.iter.elts)).iter)


def loss_batch_keys(source: str) -> list[str]:
    """The keys ``train_one_step``'s ``forward_step`` asks ``get_batch`` for (the loss's ``batch``)."""
    fn = _function(ast.parse(source), "train_one_step", "forward_step")
    call = next(
        n for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "get_batch"
    )
    keys = call.args[1]
    if isinstance(keys, ast.Call):  # _with_rollout_top_p_token_keys(args, [...])
        keys = keys.args[1]
    return _strings(keys)


def ignored_metric_keys(source: str) -> list[str]:
    """``log_rollout_data``'s ``ignored_keys`` (rollout fields the metric logger does not sum)."""
    fn = _function(ast.parse(source), "log_rollout_data")
    assign = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "ignored_keys" for t in n.targets)
    )
    return _strings(assign.value)


def test_key_lists_name_metadata_only_after_the_patch(trees):
    """The three key lists gain ``metadata``; the conversion already writes ``train_data["metadata"]``."""
    readers = {ROLLOUT: split_keys, MODEL: loss_batch_keys, METRICS: ignored_metric_keys}
    for rel, read in readers.items():
        before = read((trees["pristine"] / rel).read_text())
        after = read((trees["patched"] / rel).read_text())
        assert before and "metadata" not in before, f"{rel}: {before}"
        assert after == [*before, "metadata"], f"{rel}: {after}"
    convert = _function(ast.parse((trees["patched"] / ROLLOUT).read_text()), "_convert_samples_to_train_data")
    line = ast.unparse(ast.parse('train_data["metadata"] = [sample.train_metadata for sample in samples]'))
    assert line in ast.unparse(convert)


@pytest.fixture(scope="module")
def probes(trees) -> dict[str, dict[str, Any]]:
    """The probe's JSON report for each copy (see :func:`probe`)."""
    out = {}
    for name, tree in trees.items():
        run = subprocess.run(
            [sys.executable, __file__, str(tree), str(trees["pristine"])],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert run.returncode == 0, f"probe on the {name} copy failed:\n{run.stderr[-4000:]}"
        out[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def test_train_metadata_reaches_the_loss_batch_in_sample_order(probes):
    """Each micro-batch's ``metadata[j]`` belongs to the same sample as its tokens, lengths, advantages."""
    report = probes["patched"]
    rows = [row for rank in report["ranks"] for mb in rank for row in mb]
    assert sorted(r["sample"] for r in rows) == list(range(len(RESPONSE_LENGTHS)))
    for rank in report["ranks"]:
        order = [row["sample"] for mb in rank for row in mb]
        assert order != sorted(order) and max(map(len, rank)) > 1, f"schedule did not reorder: {rank}"
    for r in rows:
        i = r["sample"]
        assert r["metadata_sample"] == i and r["response_length"] == RESPONSE_LENGTHS[i]
        assert r["top_rows"] == RESPONSE_LENGTHS[i] and r["top_id0"] == i
        assert r["rollout_log_prob0"] == pytest.approx(-(i + 1) / 100)
        assert r["advantage"] == pytest.approx(report["rewards"][i])
    assert "loss_error" not in report and len(report["losses"]) == sum(map(len, report["ranks"]))


def test_unpatched_slime_drops_metadata_before_the_loss(probes):
    """The same run without the patch hands the loss no ``metadata`` (so the check above can fail)."""
    assert probes["pristine"]["ranks"] and probes["pristine"]["missing_metadata"]
    assert "no 'metadata'" in probes["pristine"]["loss_error"]


def test_metric_logger_skips_metadata(probes):
    """The patched ``log_rollout_data`` logs the other fields; the unpatched one cannot sum the dicts."""
    logged = probes["patched"]["logged_keys"]
    assert "metadata" not in logged and {"rewards", "response_lengths", "rollout_log_probs"} <= set(logged)
    assert "TypeError" in probes["patched"]["unpatched_logger_error"]


# --- The probe: run in a child interpreter, ``python test_slime_patches.py TREE PRISTINE`` -------------


def _stub_modules(dp_size: int) -> None:
    """Install Megatron (one rank of ``dp_size``) and wandb stand-ins in ``sys.modules``."""
    mpu = types.ModuleType("megatron.core.mpu")
    mpu.get_tensor_model_parallel_world_size = lambda: 1
    mpu.get_tensor_model_parallel_rank = lambda: 0
    mpu.get_context_parallel_world_size = lambda: 1
    mpu.get_context_parallel_rank = lambda: 0
    mpu.get_virtual_pipeline_model_parallel_world_size = lambda: None
    mpu.is_pipeline_last_stage = lambda ignore_virtual=False: True
    mpu.get_data_parallel_world_size = lambda with_context_parallel=False: dp_size
    core = types.ModuleType("megatron.core")
    core.mpu = mpu
    packed = types.ModuleType("megatron.core.packed_seq_params")
    packed.PackedSeqParams = type("PackedSeqParams", (types.SimpleNamespace,), {})
    megatron = types.ModuleType("megatron")
    megatron.core = core
    sys.modules.update(
        {
            "megatron": megatron,
            "megatron.core": core,
            "megatron.core.mpu": mpu,
            "megatron.core.packed_seq_params": packed,
            "wandb": types.ModuleType("wandb"),
        }
    )


def _rollout_manager(tree: Path, namespace: dict[str, Any]) -> type:
    """A class with ``RolloutManager``'s conversion and DP-split methods compiled from ``tree``'s source."""
    names = ("_post_process_rewards", "_convert_samples_to_train_data", "_split_train_data_by_dp")
    path = tree / ROLLOUT
    module = ast.parse(path.read_text())
    methods = [_function(module, "RolloutManager", n) for n in names]
    exec(compile(ast.Module(body=methods, type_ignores=[]), str(path), "exec"), namespace)
    return type("RolloutManagerPart", (), {n: namespace[n] for n in names})


def probe(tree: Path, pristine: Path) -> dict[str, Any]:
    """Samples → train data → DP split → per-rank batches → FireFlash loss and rollout metric logger."""
    import importlib.util
    import pickle

    sys.path[:0] = [str(tree), str(REPO)]
    dp_size = 2
    _stub_modules(dp_size)
    import slime.utils.data as slime_data
    import torch
    from slime.backends.megatron_utils import data as megatron_data
    from slime.observability import rollout_data_utils, train_metric_utils
    from slime.utils.dp_schedule import build_dp_schedule
    from slime.utils.misc import Box
    from slime.utils.types import Sample

    from infra.objectives.centering import SAMPLER_TOP_IDS, SAMPLER_TOP_LOGPROBS
    from infra.production import fireflash_loss

    fake_ray = types.SimpleNamespace(
        put=lambda obj, **kw: pickle.loads(pickle.dumps(obj)), get=lambda ref: ref
    )
    slime_data.ray = fake_ray
    megatron_data.accelerator = types.SimpleNamespace(
        device=lambda: torch.device("cpu"), current_device=lambda: "cpu"
    )
    checks = rollout_data_utils
    namespace = {
        "torch": torch,
        "Sample": Sample,
        "get_source": slime_data.get_source,
        "build_dp_schedule": build_dp_schedule,
        "tensorize_rollout_data_for_training": rollout_data_utils.tensorize_rollout_data_for_training,
        "validate_rollout_routed_experts_for_replay": checks.validate_rollout_routed_experts_for_replay,
        "Box": Box,
        "ray": fake_ray,
    }
    args = types.SimpleNamespace(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=2,
        rollout_batch_size=4,
        reward_key=None,
        rollout_top_p=1.0,
        use_rollout_routing_replay=False,
        global_batch_size=4,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=32,
        balance_by_flops=False,
        balance_data=False,
        micro_batch_size=1,
        rollout_data_transport="object-store",
        data_pad_size_multiplier=128,
        allgather_cp=False,
        save_debug_train_data=None,
        log_multi_turn=False,
        log_passrate=False,
        log_correct_samples=False,
        ci_test=False,
        eps_clip=0.2,
        eps_clip_high=0.28,
    )
    samples = []
    for i, n in enumerate(RESPONSE_LENGTHS):
        s = Sample(index=i, prompt=f"p{i // 2}", tokens=[100 + i] * PROMPT_LENGTH + [1000 + i] * n)
        s.response_length, s.loss_mask, s.reward = n, [1] * n, float(i % 3)
        s.rollout_log_probs = [-(i + 1) / 100] * n
        s.status = Sample.Status.COMPLETED
        s.train_metadata = {
            "sample": i,
            SAMPLER_TOP_IDS: [[i, i + 1]] * n,
            SAMPLER_TOP_LOGPROBS: [[-0.1, -2.5]] * n,
        }
        samples.append(s)

    manager = _rollout_manager(tree, namespace)()
    manager.args = args
    manager.custom_convert_samples_to_train_data_func = None
    manager.custom_reward_post_process_func = None
    manager.train_parallel_config = {
        "dp_size": dp_size,
        "cp_size": 1,
        "vpp_size": 1,
        "microbatch_group_size_per_vp_stage": 1,
    }
    train_data = manager._convert_samples_to_train_data(samples)
    rewards = list(train_data["rewards"])
    refs = manager._split_train_data_by_dp(train_data)

    unpatched_metrics = importlib.util.spec_from_file_location(
        "_unpatched_train_metric_utils", pristine / METRICS
    )
    unpatched = importlib.util.module_from_spec(unpatched_metrics)
    unpatched_metrics.loader.exec_module(unpatched)
    logged: dict[str, Any] = {}
    train_metric_utils.gather_log_data = lambda name, a, rid, log_dict: logged.update(log_dict)
    unpatched.gather_log_data = lambda *a: None

    keys = loss_batch_keys((tree / MODEL).read_text())
    report: dict[str, Any] = {"rewards": rewards, "ranks": [], "losses": [], "missing_metadata": False}
    for rank in range(dp_size):
        rollout_data = slime_data.process_rollout_data(args, refs, rank, dp_size)
        # Train-side fields the actor makes on the GPU: log-probs (forward) and GRPO advantages.
        rollout_data["log_probs"] = list(rollout_data["rollout_log_probs"])
        rollout_data["advantages"] = [
            torch.full((n,), float(r))
            for r, n in zip(rollout_data["rewards"], rollout_data["response_lengths"], strict=True)
        ]
        train_metric_utils.log_rollout_data(0, args, rollout_data)
        try:
            unpatched.log_rollout_data(0, args, rollout_data)
            report["unpatched_logger_error"] = ""
        except Exception as e:  # noqa: BLE001 - the error type is what is reported
            report["unpatched_logger_error"] = f"{type(e).__name__}: {e}"
        iterator = megatron_data.get_data_iterator(rollout_data)[0]
        mbs = []
        for _ in rollout_data["micro_batch_indices"]:
            batch = megatron_data.get_batch(iterator, keys, args.data_pad_size_multiplier, args.allgather_cp)
            metadata = batch.get("metadata") or [None] * len(batch["unconcat_tokens"])
            report["missing_metadata"] |= batch.get("metadata") is None
            mbs.append(
                [
                    {
                        "sample": int(tokens[-1]) - 1000,
                        "metadata_sample": meta and meta["sample"],
                        "top_rows": meta and len(meta[SAMPLER_TOP_IDS]),
                        "top_id0": meta and meta[SAMPLER_TOP_IDS][0][0],
                        "response_length": int(n),
                        "rollout_log_prob0": float(lp[0]),
                        "advantage": float(adv[0]),
                    }
                    for tokens, meta, n, lp, adv in zip(
                        batch["unconcat_tokens"],
                        metadata,
                        batch["response_lengths"],
                        batch["rollout_log_probs"],
                        batch["advantages"],
                        strict=True,
                    )
                ]
            )
            try:
                top_ids, top_lps = fireflash_loss.sampler_top_from_batch(batch)
                loss, _ = fireflash_loss.fireflash_loss_from_log_probs(
                    args, batch, batch["log_probs"], (top_lps, [t.clone() for t in top_lps])
                )
                report["losses"].append(float(loss))
            except Exception as e:  # noqa: BLE001 - reported, and asserted on by the tests
                report["loss_error"] = f"{type(e).__name__}: {e}"
        report["ranks"].append(mbs)
    report["logged_keys"] = sorted(logged)
    return report


if __name__ == "__main__":
    print(json.dumps(probe(Path(sys.argv[1]), Path(sys.argv[2]))))
