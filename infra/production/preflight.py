"""Preflight of one stage: what can fail on CPU, checked on the head node before a GPU job is submitted.

``rufus preflight STAGE_FOLDER_OR_ID --init-from HF_DIR --data DATA_DIR`` (the first step ``rufus plan``
renders for every stage) prints one verdict line per check and exits 2 when any fails:

* ``stage files`` — the stage's ``reward.py``/``env.py`` import (they register rewards, environments);
* ``config`` — the stage's ``launch.yaml`` resolves in the production profile;
* ``hooks`` — every dotted path the stage's ``train.py`` command names imports and is callable;
* ``environment`` — an RL stage's environment builds from its hook settings, as the slime hooks build it,
  and its runtime can run here (an agent environment's ``preflight()``: e.g. harbor's E2B key);
* ``reward`` — the known-good and known-bad samples of the stage's ``preflight.json`` score 1 and 0
  (through the slime reward hook for RL stages), neither aborted;
* ``sandbox`` / ``judge`` — one bubblewrap isolation probe, one judge call, when ``preflight.json``'s
  ``needs`` lists them (the judge only with ``RUFUS_JUDGE_BASE_URL`` set, else a "skipped" line);
  a stage that ``needs`` the ``reward_model`` (an unbounded score) passes its reward check when the good
  sample outscores the bad one through the configured reward model (``RUFUS_RM_URL``/``RUFUS_RM_PATH``;
  "skipped" without one);
* ``data`` — the stage's data files load through slime's ``Dataset`` when slime is importable
  (``RUFUS_SLIME_DIR`` or installed), else every row passes our schema (``data_prep.schema``);
* ``handoff`` — the input checkpoint's ``handoff.json`` verifies (``infra.handoff``); ``--base`` accepts
  a base checkpoint that has no record.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

from infra.production.preflight_io import Check, _error, check_data, check_handoff, slime_importable

PREFLIGHT_FILE = "preflight.json"
NEEDS = ("sandbox", "judge", "reward_model")
#: Where a stage that ``needs`` the reward model finds it (``rewards.reward_model.reward_model_from_env``).
RM_ENV = ("RUFUS_RM_URL", "RUFUS_RM_PATH")


def preflight_command(
    stage_id: str, init_hf: str, cluster: Any, stage_files: tuple[str, ...] = (), first: bool | None = None
) -> list[str]:
    """The runbook's first step: ``rufus preflight`` of the stage folder on the cluster.

    The folder is the one holding the stage's files (``stages/<id>`` of the repository without them);
    ``--base`` when the input is the recipe's base checkpoint (``first``; by default, when it lies under
    the cluster's ``model_dir``), which no handoff record signs.
    """
    own = f"{cluster.repo_dir}/stages/{stage_id}"
    folder = str(PurePosixPath(stage_files[0]).parent) if stage_files else own
    base = init_hf.startswith(cluster.model_dir.rstrip("/") + "/") if first is None else first
    data_dir = str(cluster.stage_data(stage_id))
    return [
        "rufus",
        "preflight",
        folder,
        "--init-from",
        init_hf,
        "--data",
        data_dir,
        *(["--base"] * base),
    ]


def check_stage_files(folder: Path) -> Check:
    """Import the stage's ``reward.py`` and ``env.py`` (registering what they bring)."""
    from infra.recipe import import_stage_file

    names = []
    for name in ("reward.py", "env.py"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            import_stage_file(path)
        except Exception as exc:  # noqa: BLE001 - any import failure is the verdict, named with its file
            return Check("stage files", "fail", f"{path}: {_error(exc)}")
        names.append(name)
    return Check("stage files", "ok", f"{folder}: {', '.join(names)} import")


def hook_paths(argv: list[str]) -> list[str]:
    """Dotted function paths a ``train.py`` argv names (``--*-path`` flags but the hook YAML)."""
    return [
        argv[i + 1]
        for i, tok in enumerate(argv[:-1])
        if tok.endswith("-path") and tok != "--custom-config-path"
    ]


def check_hooks(trains: list[Any]) -> Check:
    """Import every hook the stage's commands name; slime's own need slime (else they are left unchecked)."""
    paths = sorted({p for t in trains for p in hook_paths(t.argv)})
    unchecked = [p for p in paths if p.startswith("slime.") and not slime_importable()]
    for path in (p for p in paths if p not in unchecked):
        module, _, attr = path.rpartition(".")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except Exception as exc:  # noqa: BLE001 - reported as the verdict, naming the path
            return Check("hooks", "fail", f"{path}: {_error(exc)}")
        if not callable(fn):
            return Check("hooks", "fail", f"{path}: not callable")
    note = f" ({', '.join(unchecked)} unchecked: slime not importable)" if unchecked else ""
    return Check("hooks", "ok", f"{len(paths) - len(unchecked)} hook(s) import{note}")


def hook_args(stage: Any) -> SimpleNamespace:
    """The ``args`` slime would hand the hooks: the stage's hook YAML settings, local stage files."""
    from infra.production.render import hook_settings

    files = tuple(str(p.resolve()) for p in stage.code_files())
    return SimpleNamespace(**hook_settings(stage.id, stage.config, 0, files), n_samples_per_prompt=1)


def check_environment(stage: Any) -> Check:
    """Build the RL stage's environment the way the slime hooks do in the Ray actors."""
    if stage.config.kind != "rl":
        return Check("environment", "skip", "skipped: an SFT stage has no environment")
    from infra.production.slime_hooks import environment_from_args

    try:
        env = environment_from_args(hook_args(stage))
    except Exception as exc:  # noqa: BLE001 - the verdict names the environment spec that failed
        return Check(
            "environment", "fail", f"rl.environment {stage.config.rl.environment.name!r}: {_error(exc)}"
        )
    agent_env = getattr(env, "agent_env", None)
    problem = agent_env().preflight() if callable(agent_env) else None
    if problem:
        return Check("environment", "fail", f"rl.environment {env.options.env!r}: {problem}")
    turns = "multi-turn" if env.multi_turn else "single-turn"
    return Check("environment", "ok", f"{env.name!r} builds ({turns})")


def load_samples(folder: Path) -> dict[str, Any]:
    """The stage's ``preflight.json``: ``good`` and ``bad`` samples and the services it ``needs``."""
    path = folder / PREFLIGHT_FILE
    if not path.is_file():
        raise ValueError(f"{path}: missing (a known-good and a known-bad sample of the stage's reward)")
    data = json.loads(path.read_text())
    for key in ("good", "bad"):
        sample = data.get(key)
        if not isinstance(sample, dict) or "response" not in sample:
            raise ValueError(f"{path}: {key!r} must be an object with at least 'response'")
    unknown = set(data.get("needs", [])) - set(NEEDS)
    if unknown:
        raise ValueError(f"{path}: needs: unknown {sorted(unknown)}; known: {list(NEEDS)}")
    return data


def score(stage: Any, sample: dict[str, Any]) -> tuple[float, bool, str | None]:
    """``(score, aborted, failure)`` of a sample: the slime reward hook for RL, the reward for SFT."""
    from rewards.contract import RewardRequest, get_reward, safe_score

    prompt = sample.get("prompt") or [{"role": "user", "content": ""}]
    metadata = {k: _stage_path(stage.folder, v) for k, v in (sample.get("metadata") or {}).items()}
    if stage.config.kind == "rl":
        from infra.production.slime_hooks import ABORTED_KEY, score_sample

        s = SimpleNamespace(
            prompt=prompt, response=sample["response"], label=sample.get("label"), metadata=metadata
        )
        value = score_sample(hook_args(stage), s)
        return value, bool(s.metadata[ABORTED_KEY]), s.metadata["reward_failure"]
    name = metadata.get("reward") or stage.config.reward
    req = RewardRequest(
        prompt=prompt, response=sample["response"], label=sample.get("label"), metadata=metadata
    )
    result = safe_score(get_reward(name), req)
    return float(result.score), bool(result.aborted), result.failure


def _stage_path(folder: Path, value: Any) -> Any:
    """A metadata string starting with ``./`` names a file in the stage folder (e.g. a fixture release)."""
    return str(Path(folder) / value[2:]) if isinstance(value, str) and value.startswith("./") else value


def check_reward(stage: Any, samples: dict[str, Any]) -> Check:
    """The known-good sample scores 1 and the known-bad one 0, neither aborted (a reward-model stage: the
    good one scores above the bad one)."""
    path = stage.folder / PREFLIGHT_FILE
    if "reward_model" in samples.get("needs", []):
        return _check_reward_model(stage, samples, path)
    got = []
    for key, want in (("good", 1.0), ("bad", 0.0)):
        try:
            value, aborted, failure = score(stage, samples[key])
        except Exception as exc:  # noqa: BLE001 - an unscorable sample (unknown reward name) is the verdict
            return Check("reward", "fail", f"{path}: {key} sample: {_error(exc)}")
        if aborted:
            return Check("reward", "fail", f"{path}: {key} sample aborted ({failure})")
        if value != want:
            return Check(
                "reward", "fail", f"{path}: {key} sample scored {value:g}, expected {want:g} ({failure})"
            )
        got.append(f"{key} {value:g}")
    return Check("reward", "ok", f"{stage.config.reward}: {', '.join(got)}")


def _check_reward_model(stage: Any, samples: dict[str, Any], path: Path) -> Check:
    if not any(os.environ.get(k) for k in RM_ENV):
        return Check("reward", "skip", f"skipped: no reward model configured ({' or '.join(RM_ENV)} unset)")
    got = {}
    for key in ("good", "bad"):
        try:
            value, aborted, failure = score(stage, samples[key])
        except Exception as exc:  # noqa: BLE001 - an unscorable sample is the verdict
            return Check("reward", "fail", f"{path}: {key} sample: {_error(exc)}")
        if aborted:
            return Check("reward", "fail", f"{path}: {key} sample aborted ({failure})")
        got[key] = value
    if not got["good"] > got["bad"]:
        return Check("reward", "fail", f"{path}: good sample scored {got['good']:g} <= bad {got['bad']:g}")
    return Check("reward", "ok", f"{stage.config.reward}: good {got['good']:g} > bad {got['bad']:g}")


def check_sandbox(needs: list[str]) -> Check:
    """Probe bubblewrap isolation once (a real sandboxed process), when the stage needs the sandbox."""
    if "sandbox" not in needs:
        return Check("sandbox", "skip", "skipped: the stage runs no untrusted code")
    from infra.sandbox import check_isolation

    report = check_isolation()
    if not report.ok:
        return Check("sandbox", "fail", "; ".join(report.problems))
    return Check("sandbox", "ok", f"{report.bwrap} ({report.bwrap_version}): isolated job ran")


def check_judge(needs: list[str]) -> Check:
    """One LLM-judge call when the stage needs a judge and ``RUFUS_JUDGE_BASE_URL`` is set."""
    if "judge" not in needs:
        return Check("judge", "skip", "skipped: the stage asks no judge")
    if not os.environ.get("RUFUS_JUDGE_BASE_URL"):
        return Check("judge", "skip", "skipped: no judge configured (RUFUS_JUDGE_BASE_URL unset)")
    from rewards.instruction_following import judge_endpoint, judge_requirements

    try:
        verdict = judge_requirements(
            ["The response greets the user."], "Hello there!", [{"role": "user", "content": "Greet me."}]
        )
    except Exception as exc:  # noqa: BLE001 - the endpoint's failure is the verdict
        return Check(
            "judge", "fail", f"RUFUS_JUDGE_BASE_URL={os.environ['RUFUS_JUDGE_BASE_URL']}: {_error(exc)}"
        )
    endpoint = judge_endpoint()
    return Check("judge", "ok", f"{endpoint[0] if endpoint else '?'} answered (verdict {verdict})")


def _resolve(ref: str, recipe: Path | None) -> tuple[Path, Any]:
    """The stage folder ``ref`` (a folder, or a stage id of ``recipe``) and its production config."""
    from infra.recipe import find_stage_folder, load_recipe, resolve_stage

    if recipe is not None and not Path(ref).is_dir():
        stage = load_recipe(recipe, profile="production").stage(ref)
        return stage.folder, stage
    folder = find_stage_folder(ref)
    return folder, resolve_stage(folder, "production")


def run_preflight(
    ref: str,
    *,
    init_hf: Path | None,
    data_dir: Path | None,
    recipe: Path | None = None,
    base: bool = False,
    echo: Callable[[str], None] = print,
) -> list[Check]:
    """Run every check of one stage, printing each verdict as it comes; return them all."""
    from infra.production.cluster import ClusterProfile
    from infra.production.render import num_phases, render_train_args

    checks: list[Check] = []

    def add(check: Check) -> Check:
        checks.append(check)
        echo(check.line())
        return check

    from infra.production.plan import DEFAULT_RECIPE
    from infra.recipe import find_stage_folder

    if recipe is None and "/" not in ref and not Path(ref).is_dir():
        recipe = DEFAULT_RECIPE  # a bare stage id names a stage of the production recipe
    try:
        first = find_stage_folder(ref) if recipe is None or Path(ref).is_dir() else None
    except Exception as exc:  # noqa: BLE001 - a bad stage reference is the first verdict
        add(Check("config", "fail", _error(exc)))
        return checks
    if first is not None and add(check_stage_files(first)).status == "fail":
        return checks
    try:
        folder, stage = _resolve(ref, recipe)
    except Exception as exc:  # noqa: BLE001 - config and import errors both stop here, named
        add(Check("config", "fail", _error(exc)))
        return checks
    add(Check("config", "ok", f"{stage.id} ({stage.config.kind}) resolves in the production profile"))
    if first is None:
        add(check_stage_files(stage.folder))  # a stage id: its files were imported while resolving
    cluster, init = ClusterProfile(), str(init_hf or "/init")
    trains = [
        render_train_args(stage.id, stage.config, cluster, init, phase=p)
        for p in range(num_phases(stage.config))
    ]
    add(check_hooks(trains))
    add(check_environment(stage))
    try:
        samples = load_samples(folder)
    except ValueError as exc:
        add(Check("reward", "fail", str(exc)))
        samples = {"needs": []}
    else:
        add(check_reward(stage, samples))
    needs = list(samples.get("needs", []))
    add(check_sandbox(needs))
    add(check_judge(needs))
    add(check_data(stage, data_dir or Path(cluster.stage_data(stage.id)), init_hf))
    add(check_handoff(init_hf, base))
    return checks


def failed(checks: list[Check]) -> list[Check]:
    """The checks that failed (a "skipped" line is not a failure, and not a pass either)."""
    return [c for c in checks if c.status == "fail"]
