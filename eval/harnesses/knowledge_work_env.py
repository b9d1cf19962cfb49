"""Stage 08's ``kw`` environment and rubric grader set up for the knowledge-work harness.

* :func:`load_suite`: a folder of knowledge-work task folders, loaded by the environment's own catalog
  (:class:`infra.agents.kw.tasks.KwCatalog`: Harbor ``task.toml`` and ``instruction.md``, the workspace in
  ``environment/files/``, each system of record in ``environment/services/<name>/``, the weighted rubric in
  ``tests/rubric.json`` and ``tests/ground_truth.json``); a folder that does not load is dropped with its
  one-line error (folder, file, key).
* :func:`env_options`: the episode settings, from stage 08's ``launch.yaml`` (``production``: its ``kw``
  env spec without ``tasks=``) or the embedded scale's (``embedded``: ``kw_tiny``'s options: budgets,
  sandbox sizes, the tools offered), then ``--env-option KEY=VALUE`` overrides.
* :class:`EvalKwEnv`: :class:`~infra.agents.kw.env.KwEnv` unchanged except that it keeps the grader's
  details (per-criterion notes, files not copied) for the per-task record.
* The judge: the stage's grader (:func:`rewards.knowledge_work.grade`) reads its judge from
  ``RUFUS_JUDGE_BASE_URL`` / ``RUFUS_JUDGE_MODEL`` / ``RUFUS_JUDGE_API_KEY``; :func:`stage_judge` sets
  exactly the harness's judge there for the run (and clears a judge the shell may carry when the harness
  has none), so nothing but ``--judge-url``/``--judge-model`` grades a cell. :func:`judge_prompt_sha256`
  hashes the ``rubric`` package's one-shot prompt as the grader sends it; :func:`judge_problem` checks the
  judge on a criterion with a known verdict.
* :func:`export_tiny`: stage 08's held-out tiny tasks (the ``kw_tiny`` generator) as such task folders.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.agents.kw.env import KwEnv
from infra.agents.kw.tasks import KwTaskSpec, catalog
from rewards.contract import RewardRequest, RewardResult

JUDGE_VARS = ("RUFUS_JUDGE_BASE_URL", "RUFUS_JUDGE_MODEL", "RUFUS_JUDGE_API_KEY")
SCALES = ("production", "embedded")


@dataclass(frozen=True)
class LoadedSuite:
    """The runnable task folders (sorted by name) and one line per folder dropped."""

    tasks: list[KwTaskSpec]
    dropped: list[str]


def load_suite(data: Path) -> LoadedSuite:
    """Load every task folder under ``data`` with the ``kw`` environment's own catalog."""
    root = str(Path(data).resolve())
    cat = catalog(root)
    dropped = []
    for name, why in sorted(cat.dropped.items()):
        line = " ".join(why.split())  # pydantic's messages span lines: one line per folder
        dropped.append(line if line.startswith(str(Path(root) / name)) else f"{Path(root) / name}: {line}")
    return LoadedSuite([cat.tasks[n] for n in sorted(cat.tasks)], dropped)


def judged_criteria(spec: KwTaskSpec) -> int:
    """How many of the task's criteria only a judge can decide."""
    return sum(c.kind == "judge" for c in spec.label.rubric)


def _stage_spec(stage_config: Path) -> dict[str, Any]:
    """The options of the stage's ``kw`` env spec (``rl.environment.options.env``), without ``tasks=``."""
    from infra.agents.envs.base import parse_env_spec
    from infra.layering import ConfigError, load_yaml

    where = f"{stage_config}: rl.environment.options.env"
    node: Any = load_yaml(stage_config)
    for key in ("rl", "environment", "options", "env"):
        node = node.get(key) if isinstance(node, dict) else None
    name, options = parse_env_spec(node) if isinstance(node, str) else ("", {})
    if name != "kw":
        raise ConfigError(f"{where}: {node!r} is not a kw env spec (kw:tasks=...,<options>)")
    return {k: v for k, v in options.items() if k != "tasks"}


def env_options(stage_config: Path, scale: str, overrides: list[str]) -> tuple[str, dict[str, Any]]:
    """Return ``(resolved env spec, KwEnv options)`` of ``scale`` with ``overrides`` (``KEY=VALUE``)."""
    from infra.agents.envs.base import parse_env_spec

    if scale not in SCALES:
        raise ValueError(f"--scale {scale!r}: expected one of {', '.join(SCALES)}")
    if scale == "embedded":
        from infra.agents.kw.family import OPTIONS

        options: dict[str, Any] = dict(OPTIONS)
    else:
        options = _stage_spec(stage_config)
    try:
        extra = parse_env_spec("kw:" + ",".join(overrides))[1]
    except ValueError as exc:
        raise ValueError(f"--env-option: {exc} (expected KEY=VALUE)") from None
    if "tasks" in extra:
        raise ValueError("--env-option tasks=...: not an option here (--data gives the tasks)")
    options.update(extra)
    return "kw:" + ",".join(f"{k}={v}" for k, v in options.items()), options


class EvalKwEnv(KwEnv):
    """The stage's ``kw`` environment; keeps the grader's details of the last score as ``graded``."""

    def score(self, task: Any, request: RewardRequest) -> RewardResult:
        result = super().score(task, request)
        self.graded = dict(result.details)  # the loop keeps no details: notes, unreadable, not copied
        return result


# ---- the judge ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judge:
    """An OpenAI-compatible judge endpoint (``api_key`` from the environment variable the CLI names)."""

    url: str
    model: str
    api_key: str | None = None


@contextlib.contextmanager
def stage_judge(judge: Judge | None) -> Iterator[None]:
    """Within the block, the stage's grader sees exactly ``judge`` (none at all when None)."""
    saved = {k: os.environ.get(k) for k in JUDGE_VARS}
    values = dict(zip(JUDGE_VARS, (judge.url, judge.model, judge.api_key), strict=True)) if judge else {}
    try:
        for key in JUDGE_VARS:
            if values.get(key):
                os.environ[key] = str(values[key])
            else:
                os.environ.pop(key, None)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def judge_prompt_sha256() -> str:
    """The sha256 of the judge's messages as :func:`rewards.instruction_following.judge_requirements`
    sends them: the ``rubric`` package's one-shot grader rendered for placeholder text."""
    from rubric import Criterion
    from rubric.autograders import OneShotOutput, PerCriterionOneShotGrader

    from eval.harnesses.protocol import prompt_sha256

    seen: list[list[str]] = []

    async def capture(system_prompt: str, user_prompt: str) -> OneShotOutput:
        seen.append([system_prompt, user_prompt])
        verdict = {"criterion_number": 1, "criterion_status": "UNMET", "explanation": "-"}
        return OneShotOutput.model_validate({"criteria_evaluations": [verdict]})

    grader = PerCriterionOneShotGrader(generate_fn=capture, normalize=False)
    asyncio.run(
        grader.judge("{deliverables}", [Criterion(weight=1.0, requirement="{requirement}")], "{task}")
    )
    return prompt_sha256(seen[0])


def judge_problem(judge: Judge) -> str | None:
    """Why the judge cannot grade (it fails, or misjudges a criterion that is plainly met), or None."""
    from rewards.instruction_following import InfraError, judge_requirements

    prompt = [{"role": "user", "content": "Write the reconciliation total in recon.md."}]
    with stage_judge(judge):
        try:
            [met] = judge_requirements(
                ["States the reconciled total '4,210.50'."],
                "## Deliverable: recon.md\nTotal: 4,210.50",
                prompt,
            )
        except InfraError as exc:
            return f"judge {judge.model}: {exc}"
    return None if met else f"judge {judge.model}: graded a plainly met criterion unmet"


# ---- versions and the tiny tasks ----------------------------------------------------------------------
def package_versions() -> dict[str, str]:
    """Versions of the grader's packages (the rubric judge, the deliverable renderers)."""
    out = {}
    for name in ("rubric", "markitdown", "formulas", "openpyxl"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def export_tiny(out: Path, n: int) -> list[Path]:
    """Write the first ``n`` of stage 08's held-out tiny tasks (``kw_tiny``'s generator, seed and split:
    the tasks ``kw_rubric_score`` is measured on) under ``out`` as task folders; return their paths."""
    from data_prep.tiny_tasks.knowledge_work import write_tasks
    from infra.agents.kw.family import HELDOUT, ROOT_SEED

    if not 1 <= n <= HELDOUT:
        raise ValueError(f"--export-tiny {n}: stage 08 has {HELDOUT} held-out tiny tasks (1..{HELDOUT})")
    return write_tasks(Path(out), n, ROOT_SEED, "heldout")


__all__ = [
    "EvalKwEnv",
    "Judge",
    "LoadedSuite",
    "env_options",
    "export_tiny",
    "judge_problem",
    "judge_prompt_sha256",
    "judged_criteria",
    "load_suite",
    "package_versions",
    "stage_judge",
]
