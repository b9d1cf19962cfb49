"""A stage folder brings its own tiny task family, held-out metric, reward and benchmark roles.

Nothing shared is edited: ``data_prep.tiny_tasks.register_family`` / ``register_metric`` (which also makes
the metric an ``eval.registry`` embedded metric), ``rewards.contract.register_reward`` and the stage's
``eval.benchmarks`` in its ``launch.yaml``. Registering a later stage's metric never changes what the SFT
stage screens by default.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

import data_prep.tiny_tasks as tt
import eval.registry as registry
import rewards.contract as contract
from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user
from infra.config import BenchmarkRoles
from infra.layering import ConfigError
from infra.production.plan import benchmark_eval_steps
from infra.recipe import resolve_stage

REPO = Path(__file__).resolve().parents[1]
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron")


def echo_generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    """A tiny family: repeat one word (deterministic per split and seed)."""
    check_split(split)
    rng = rng_for("echo", split, seed)
    words = [rng.choice(WORDS) for _ in range(n)]
    return [
        TinyTask(
            id=f"echo-{split}-{seed}-{i}",
            prompt=user(f"Repeat the word {w}."),
            label=w,
            metadata={"reward": "echo_exact", "family": "echo"},
            reasoning=f"The word is {w}.",
            answer=w,
        )
        for i, w in enumerate(words)
    ]


def other_generate(n: int, seed: int, split: str = "train") -> list[TinyTask]:
    return echo_generate(n, seed + 1, split)


@pytest.fixture
def registries():
    """Leave the process-wide registries (and imported stage modules) as they were."""
    saved = (
        dict(tt._GENERATORS),
        dict(tt._METRIC_FAMILIES),
        dict(registry.EMBEDDED_METRICS),
        dict(contract._REGISTRY),
    )
    modules = set(sys.modules)
    yield
    for live, before in zip(
        (tt._GENERATORS, tt._METRIC_FAMILIES, registry.EMBEDDED_METRICS, contract._REGISTRY),
        saved,
        strict=True,
    ):
        live.clear()
        live.update(before)
    for name in set(sys.modules) - modules:
        if name.startswith("rufus_stage_") or name.startswith("_test_sft_prep"):
            del sys.modules[name]


def _sft_params_default() -> list[str]:
    """The SFT stage's default ``screen_metrics``, from a fresh import of its data_prep.py."""
    name = f"_test_sft_prep_{len(sys.modules)}"
    spec = importlib.util.spec_from_file_location(name, REPO / "stages" / "00_sft" / "data_prep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.Params().screen_metrics


def test_register_family_and_metric_from_a_module(registries, tmp_path):
    sft_default = _sft_params_default()
    assert sft_default == list(tt.SHARED_METRICS)
    assert tt.register_family("echo", echo_generate) is echo_generate
    tt.register_family("echo", echo_generate)  # the same function again: a no-op
    tt.register_metric("echo_acc", ("echo",), "Exact repeats of one held-out word (a test stage).")
    tt.register_metric("echo_acc", ["echo"])  # same families, no description: a no-op

    assert "echo" in tt.GENERATORS and tt.METRIC_FAMILIES["echo_acc"] == ("echo",)
    tasks = tt.heldout_tasks("echo_acc", 7, 0)
    assert len(tasks) == 7 and all(t.metadata == {**t.metadata, "metric": "echo_acc"} for t in tasks)
    path = tt.write_heldout("echo_acc", 7, 0, tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 7 and {r["metadata"]["family"] for r in rows} == {"echo"}
    assert tt.write_heldout("echo_acc", 7, 0, tmp_path / "again").read_bytes() == path.read_bytes()

    assert registry.EMBEDDED_METRICS["echo_acc"].startswith("Exact repeats")
    assert registry.for_embedded_metric("echo_acc") == [] and registry.column_for("echo_acc") == "echo_acc"

    # Registering a later stage's metric changes neither the built-ins nor the SFT stage's default screen.
    assert "echo_acc" not in tt.SHARED_METRICS and "echo" not in tt.SHARED_FAMILIES
    assert _sft_params_default() == sft_default


def test_metric_without_description_gets_one(registries):
    tt.register_family("echo", echo_generate)
    tt.register_metric("echo_plain", "echo")
    assert "echo" in registry.EMBEDDED_METRICS["echo_plain"]
    tt.register_metric("math_acc", ("math",))  # a built-in again: a no-op, description kept
    assert registry.EMBEDDED_METRICS["math_acc"].startswith("Math-Verify")


def test_conflicting_registrations_fail(registries):
    tt.register_family("echo", echo_generate)
    with pytest.raises(ValueError, match="'echo' is already registered"):
        tt.register_family("echo", other_generate)
    with pytest.raises(ValueError, match="'math' is already registered"):
        tt.register_family("math", echo_generate)
    tt.register_metric("echo_acc", ("echo",), "Exact repeats.")
    with pytest.raises(ValueError, match="already registered with families"):
        tt.register_metric("echo_acc", ("echo", "math"))
    with pytest.raises(ValueError, match="already registered as"):
        tt.register_metric("echo_acc", ("echo",), "Something else.")
    with pytest.raises(ValueError, match="already registered as"):
        registry.register_embedded_metric("math_acc", "Something else.")
    with pytest.raises(KeyError, match="unknown tiny task families"):
        tt.register_metric("nope_acc", ("no_such_family",))
    assert "nope_acc" not in tt.METRIC_FAMILIES and "nope_acc" not in registry.EMBEDDED_METRICS
    with pytest.raises(TypeError):
        tt.GENERATORS["x"] = echo_generate  # read-only views: register_* is the only way in
    assert tt.GENERATORS["echo"] is echo_generate and tt.METRIC_FAMILIES["echo_acc"] == ("echo",)


STAGE_DATA_PREP = '''
"""A stage that brings its own tiny family and held-out metric."""

from data_prep.tiny_tasks import register_family, register_metric
from data_prep.tiny_tasks.common import TinyTask, check_split, rng_for, user


def echo_generate(n, seed, split="train"):
    check_split(split)
    rng = rng_for("echo90", split, seed)
    words = [rng.choice(("amber", "birch", "cedar", "delta")) for _ in range(n)]
    return [
        TinyTask(f"echo-{split}-{seed}-{i}", user(f"Repeat the word {w}."), w,
                 {"reward": "echo_exact", "family": "echo"}, f"The word is {w}.", w)
        for i, w in enumerate(words)
    ]


register_family("echo", echo_generate)
register_metric("echo_acc", ("echo",), description="Exact repeats of one held-out word (stage 90).")
'''

STAGE_REWARD = '''
"""The stage's own reward."""

from rewards.contract import RewardRequest, RewardResult, register_reward


@register_reward("echo_exact")
def echo_exact(request: RewardRequest) -> RewardResult:
    answer = request.response.split("</think>")[-1].strip()
    ok = answer == request.label
    return RewardResult(score=float(ok), parsed=answer, failure=None if ok else "wrong")
'''


def _stage_folder(root: Path) -> Path:
    folder = root / "90_echo_rl"
    folder.mkdir()
    launch = yaml.safe_load((REPO / "stages" / "01_reasoning_rl" / "launch.yaml").read_text(encoding="utf-8"))
    launch.update(name="90_echo_rl", title="Echo RL", reward="echo_exact", data={})
    launch["embedded"].pop("data", None)
    launch["eval"].update(
        targets=["echo_acc"],
        guardrails=["math_acc"],
        benchmarks={"targets": ["ifeval"], "guardrails": ["aime25"]},
    )
    (folder / "launch.yaml").write_text(yaml.safe_dump(launch, sort_keys=False), encoding="utf-8")
    (folder / "data_prep.py").write_text(textwrap.dedent(STAGE_DATA_PREP), encoding="utf-8")
    (folder / "reward.py").write_text(textwrap.dedent(STAGE_REWARD), encoding="utf-8")
    (folder / "README.md").write_text("# 90 · Echo RL\n", encoding="utf-8")
    return folder


def test_stage_folder_brings_family_metric_reward_and_benchmarks(registries, tmp_path):
    sft_default = _sft_params_default()
    stage = resolve_stage(_stage_folder(tmp_path), "production")
    # Loading the stage imported its data_prep.py and reward.py, which registered what it brings.
    assert tt.METRIC_FAMILIES["echo_acc"] == ("echo",)
    assert registry.EMBEDDED_METRICS["echo_acc"].endswith("(stage 90).")
    reward = contract.get_reward("echo_exact")
    for task in tt.heldout_tasks("echo_acc", 4, 0):
        request = contract.RewardRequest(prompt=task.prompt, response=task.response(), label=task.label)
        assert reward(request).score == 1.0
    assert _sft_params_default() == sft_default

    roles = stage.config.eval.benchmarks
    assert roles.targets == ["ifeval"] and roles.guardrails == ["aime25"]
    steps = [s.name for s in benchmark_eval_steps(roles, "/ckpt/in", "/ckpt/out")]
    assert any("ifeval" in n for n in steps) and any("aime25" in n for n in steps)
    assert not any("gpqa" in n or "aime26" in n for n in steps)
    assert benchmark_eval_steps(BenchmarkRoles(), "/ckpt/in", "/ckpt/out") == []


def test_shared_stages_carry_their_benchmark_roles():
    roles = {
        sid: BenchmarkRoles.model_validate(
            yaml.safe_load((REPO / "stages" / sid / "launch.yaml").read_text(encoding="utf-8"))["eval"][
                "benchmarks"
            ]
        )
        for sid in ("00_sft", "01_reasoning_rl", "02_coding_rl", "03_if_rl")
    }
    assert roles["01_reasoning_rl"].names() == ["gpqa_diamond", "aime25", "aime26"]
    assert roles["02_coding_rl"].names() == ["livecodebench_v6"]
    assert roles["03_if_rl"].guardrails == ["gpqa_diamond", "aime25"]


def test_unknown_benchmark_is_a_config_error():
    with pytest.raises(ValidationError, match="unknown benchmark"):
        BenchmarkRoles(targets=["ifeval", "no_such_bench"])
    with pytest.raises(ValidationError, match="both targets and guardrails"):
        BenchmarkRoles(targets=["ifeval"], guardrails=["ifeval"])
    with pytest.raises(ConfigError) as err:
        resolve_stage(
            REPO / "stages" / "03_if_rl", "production", sets={"eval.benchmarks.guardrails": ["no_such_bench"]}
        )
    assert "eval.benchmarks.guardrails" in str(err.value) and "no_such_bench" in str(err.value)
