"""FireFlash variant of stage 05: the swapped recipe, its rendered slime job, the band filter, partial credit.

No GPU and no cluster: the production job is checked as rendered command lines against the pinned slime's
flag table (``rufus plan --check``); the band filter runs on a table of episode results (the policy
endpoint is the boundary); the partial-credit verifiers are this repository's own generated scripts, run
as plain subprocesses in a temporary copy, like ``tests/test_harbor_task.py``'s generator self-check.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from data_prep.agent_filters import PassCount, filter_band, record
from data_prep.harbor_generate import Spec, TinyTask, write_task
from data_prep.harbor_stage import Learnability, learnability
from data_prep.harbor_verifier import initial_passes
from data_prep.manifest import Manifest
from data_prep.schema import PromptRow
from data_prep.tiny_tasks.harbor_specs import make_task
from infra.agents.contract import AgentTask
from infra.layering import ConfigError
from infra.production.config import ProductionConfig
from infra.production.plan import check_plan, render_plan
from infra.recipe import REPO_ROOT, load_recipe
from rewards.contract import RewardResult

PASS, FAIL = RewardResult(score=1.0), RewardResult(score=0.0, failure="tests_failed")
ABORT = RewardResult(score=0.0, aborted=True, failure="environment")


def _recipe(name: str):  # noqa: ANN202
    return load_recipe(REPO_ROOT / "recipes" / name, profile="production")


def test_recipe_swaps_only_the_coding_agent_folder() -> None:
    base, ff = _recipe("rufus-air.yaml"), _recipe("rufus-air-fireflash.yaml")
    folders = [[s.folder.name for s in r.stages] for r in (base, ff)]
    differ = [(a, b) for a, b in zip(*folders, strict=True) if a != b]
    assert differ == [("05_coding_agent", "05_coding_agent_fireflash")]
    same = [i for i, (a, b) in enumerate(zip(*folders, strict=True)) if a == b]
    assert [base.stages[i].config_hash for i in same] == [ff.stages[i].config_hash for i in same]


def test_rendered_job_is_async_and_carries_the_fireflash_objective() -> None:
    recipe = _recipe("rufus-air-fireflash.yaml")
    plans = render_plan(recipe)
    assert not check_plan(plans)  # every flag exists in the pinned slime and fits its kind
    (plan,) = [p for p in plans if p.stage == "05_coding_agent_fireflash"]
    train = next(s for s in plan.steps if s.name == "train_phase0")
    argv = " ".join(train.argv)
    assert "/root/slime/train_async.py" in argv and "--colocate" not in argv
    for flag in (
        "--update-weights-interval 6",
        "--n-samples-per-prompt 12",
        "--rollout-num-gpus 64",
        "--context-parallel-size 1",
        "--loss-type custom_loss",
        "--custom-loss-function-path infra.production.slime_hooks.fireflash_loss",
        "--kl-loss-coef 0",
        "--entropy-coef 0",
    ):
        assert flag in argv, flag
    assert "--use-tis" not in argv  # the custom loss applies TIS [0.5, 2.0] itself (slime's clip-low is 0)
    hooks = next(v for k, v in plan.files.items() if k.endswith("hooks_phase0.yaml"))
    assert "rufus_advantage: fireflash" in hooks and "rufus_min_attempt_tokens: 2048" in hooks
    assert "rufus_tis_clip_low: 0.5" in hooks and "partial_credit=1" in hooks
    assert "rufus_score_centering_top_k: 32" in hooks


def test_staleness_needs_async_and_is_omitted_when_unset() -> None:
    # unset, it stays out of the dump, so older configs keep their hash
    assert "max_policy_staleness" not in ProductionConfig(nodes=2).model_dump()
    ok = ProductionConfig(nodes=2, colocate=False, async_training=True, max_policy_staleness=6)
    assert ok.model_dump()["max_policy_staleness"] == 6
    with pytest.raises(ValueError, match="max_policy_staleness needs async_training"):
        ProductionConfig(nodes=2, max_policy_staleness=6)
    with pytest.raises(ValueError, match="needs colocate: false"):
        ProductionConfig(nodes=2, async_training=True, max_policy_staleness=6)


def _task(i: int) -> AgentTask:
    return AgentTask(id=f"t{i}", messages=[{"role": "user", "content": f"task {i}"}])


def test_band_filter_keeps_pass_rates_in_15_to_85_percent() -> None:
    table = {
        "t0": [PASS] * 2 + [FAIL] * 6,  # 25%: kept
        "t1": [PASS] + [FAIL] * 7,  # 12.5%: below the band
        "t2": [PASS] * 7 + [FAIL],  # 87.5%: above the band
        "t3": [PASS] * 8,  # always: above
        "t4": [FAIL] * 8,  # never: below
        "t5": [PASS, FAIL, ABORT, ABORT, ABORT, ABORT, ABORT, PASS],  # 3 scored < 4
        "t6": [ABORT] * 8,
        "t7": [PASS, FAIL, ABORT, PASS, FAIL, ABORT, ABORT, ABORT],  # 2/4 = 50% from exactly 4 scored
    }
    report = filter_band(
        [_task(i) for i in range(8)], lambda ts, n: [table[t.id][:n] for t in ts], 8, (0.15, 0.85), 4
    )
    assert [t.id for t in report.kept] == ["t0", "t7"]
    assert report.dropped == {
        "below_band": ["t1", "t4"],
        "above_band": ["t2", "t3"],
        "too_few_scored": ["t5"],
        "aborted": ["t6"],
    }
    assert report.policy["t7"] == PassCount(2, 4, 4)
    counts = report.counts()
    assert (counts["dropped_below_band"], counts["dropped_above_band"], counts["dropped_too_few_scored"]) == (
        2,
        2,
        1,
    )
    manifest = Manifest("t")
    record(report, manifest, "learnability", samples=8, band=[0.15, 0.85])
    (step,) = manifest.data["steps"]
    assert step["count"] == 2 and step["band"] == [0.15, 0.85] and step["policy_pass_histogram"]["2/8"] == 1
    with pytest.raises(ValueError, match="band must satisfy"):
        filter_band([], lambda ts, n: [], 8, (0.9, 0.1), 4)


def test_stage_learnability_uses_the_band_rule_and_refuses_too_few_samples() -> None:
    tasks = [_task(i) for i in range(2)]
    rows = [PromptRow(id=t.id, prompt=t.messages) for t in tasks]
    table = {"t0": [PASS, FAIL, FAIL, FAIL], "t1": [PASS] * 4}
    runner = lambda ts, n: [table[t.id][:n] for t in ts]  # noqa: E731
    kept = learnability(rows, tasks, runner, 4, Manifest("t"), Learnability(rule="band"))
    assert [r.id for r in kept] == ["t0"]  # 25% in band; 100% above
    ra_rule = learnability(rows, tasks, runner, 4, Manifest("t"))
    assert [r.id for r in ra_rule] == ["t0"]  # RA's rule agrees here
    with pytest.raises(ConfigError, match="data.filter_samples=2 is below data.learnability.min_scored=4"):
        learnability(rows, tasks, runner, 2, Manifest("t"), Learnability(rule="band"))


def _verify(task_dir: Path, work: Path, commands: list[str]) -> str:
    """Run ``commands`` then the task's test.sh in a copy of its files (our own generated scripts)."""
    app, logs = work / "app", work / "logs" / "verifier"
    shutil.copytree(task_dir / "environment" / "files", app)
    logs.mkdir(parents=True)
    for c in commands:
        subprocess.run(["bash", "-c", c], cwd=app, timeout=30, capture_output=True)
    test_sh = work / "test.sh"
    test_sh.write_text((task_dir / "tests" / "test.sh").read_text().replace("/logs/verifier", str(logs)))
    subprocess.run(["bash", str(test_sh)], cwd=app, timeout=30, capture_output=True)
    return (logs / "reward.txt").read_text().strip()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_partial_credit_guards_and_graded_checks(tmp_path: Path) -> None:
    spec = Spec(
        "Fix calc.py and keep data.txt.",
        {"calc.py": "print(1 // 0)\n", "data.txt": "keep\n"},
        ["echo 'print(6 // 3)' > calc.py"],
        ["python3 calc.py >/dev/null 2>&1", '[ "$(python3 calc.py)" = 2 ]', "grep -qx keep data.txt"],
    )
    assert initial_passes(spec.files, spec.checks) == [False, False, True]  # the data check is a guard
    write_task(tmp_path / "t", TinyTask("python", "x", spec), 0, 0)
    assert _verify(tmp_path / "t", tmp_path / "w0", []) == "0"  # doing nothing
    assert _verify(tmp_path / "t", tmp_path / "w1", spec.solution) == "1"
    assert _verify(tmp_path / "t", tmp_path / "w2", ["echo 'print(5)' > calc.py"]) == "0.5000"  # runs, wrong
    broken_guard = [*spec.solution, "rm data.txt"]
    assert _verify(tmp_path / "t", tmp_path / "w3", broken_guard) == "0"  # a solve that breaks a guard
    with pytest.raises(ValueError, match="every check passes on the starting workspace"):
        write_task(tmp_path / "u", TinyTask("python", "x", Spec("x", {"a": "1\n"}, [], ["true"])), 0, 0)


def test_tiny_python_and_config_tasks_have_two_graded_checks() -> None:
    by_kind: dict[str, set[int]] = {}
    for i in range(40):
        task = make_task(0, i)
        graded = initial_passes(task.spec.files, task.spec.checks).count(False)
        by_kind.setdefault(task.kind, set()).add(graded)
    assert by_kind["python"] == {2} and 2 in by_kind["config"] and by_kind["text"] >= {1}
