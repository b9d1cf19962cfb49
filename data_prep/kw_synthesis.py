"""Production task synthesis of stage 08 (UM §Environments, §Instructions and Graders): spec → instance →
teacher-proposed tasks and weighted rubrics → filters → Harbor task folders, each step in the manifest.

* **Instance**: an environment type's generator (:func:`builders`; 3 of the taxonomy's types have one, the
  others are open) turns a sampled spec into workspace files, a
  :class:`~data_prep.kw_taxonomy.SystemOfRecord` (SQLite tables served over MCP as a stage-04 AWM app) and
  the private ground truth; it may author one task itself (proposer ``generator``). The rubric is the
  reward's (:mod:`rewards.knowledge_work`).
* **Proposals**: the teacher sees the spec, the workspace listing, the system's tables and the private
  ground truth and replies one JSON :class:`Proposal`; a reply that does not parse, validate or stay
  grounded (each code check's value comes from the ground truth) is asked once more, then dropped and
  counted. Without a teacher the step is recorded as skipped, as is the curriculum band without a scorer.

Task folder (:func:`write_task`): ``instruction.md``; ``task.toml`` (schema 1.4, an
``[[environment.mcp_servers]]`` entry for the system of record); ``environment/Dockerfile`` and
``environment/files/`` (the workspace, ``/app``); ``environment/services/<system>/`` (``server.py``,
``pristine.db``, ``tools.json``; never copied into the agent's container); ``tests/rubric.json`` and
``tests/ground_truth.json`` (supplied to the grader after the rollout); ``tests/test.sh`` (refuses,
exit 1: these tasks are graded by the ``kw_rubric`` reward outside the container; a grader Harbor's
verifier could run inside it is open work); ``solution/`` (the generator's reference deliverables).
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep import kw_filters as kf
from data_prep.if_synthesis_common import (
    Drop,
    ReplyError,
    StrictReply,
    SynthesisStep,
    Text,
    client_for,
    parse_reply,
)
from data_prep.if_synthesis_common import response_format as json_format
from data_prep.io import write_jsonl
from data_prep.kw_filters import FileContent, Grade, materialize
from data_prep.kw_taxonomy import (
    EnvSpec,
    GroundTruth,
    SystemOfRecord,
    combinations,
    environment_type,
    sample_spec,
)
from data_prep.manifest import Manifest
from data_prep.rl_stage import Endpoint
from data_prep.teacher import TeacherError
from infra.agents.harbor.task import HARBOR_SCHEMA_VERSION, HarborTask, load_task
from rewards.knowledge_work import Criterion, KWLabel, grade_code_criteria

_HERE = Path(__file__).resolve().parent
CODE_FILES = tuple(_HERE / f for f in ("kw_synthesis.py", "kw_filters.py", "kw_taxonomy.py",
                                       "tiny_tasks/knowledge_work.py"))  # fmt: skip
SERVICES = "/services"  # where a task's services live in the services container


class Proposal(StrictReply):
    """A proposed task: what the teacher replies (and what a generator authors). Its rubric and deliverables
    must make a valid ``kw_rubric`` label (:class:`rewards.knowledge_work.KWLabel`: paths inside the
    workspace, unique criterion ids, a positive weight)."""

    instruction: Text
    deliverables: list[Text] = Field(min_length=1)
    rubric: list[Criterion] = Field(min_length=1)

    @model_validator(mode="after")
    def _a_label(self) -> Proposal:
        self.deliverables = KWLabel(rubric=self.rubric, deliverables=self.deliverables).deliverables
        return self


@dataclass
class Instance:
    """One concrete environment: workspace, system of record, private ground truth."""

    id: str
    spec: EnvSpec
    files: dict[str, FileContent]
    system: SystemOfRecord
    ground_truth: GroundTruth
    proposal: Proposal | None = None  # a task the generator authored itself
    reference: dict[str, FileContent] = field(default_factory=dict)  # its reference deliverables
    split: str = "train"


@dataclass
class KwTask:
    """One task: an instance, an instruction, the deliverables and the weighted rubric."""

    name: str
    instance: Instance
    instruction: str
    deliverables: tuple[str, ...]
    rubric: list[Criterion]
    proposer: Literal["generator", "teacher"]

    @property
    def reference(self) -> dict[str, FileContent]:
        """The reference deliverables (a generator-authored task only)."""
        return self.instance.reference if self.proposer == "generator" else {}

    @property
    def files(self) -> dict[str, FileContent]:
        return self.instance.files

    @property
    def ground_truth(self) -> GroundTruth:
        return self.instance.ground_truth

    @property
    def database(self) -> bytes:
        return self.instance.system.database


Builder = Callable[[EnvSpec, random.Random, str], Instance]


def builders() -> dict[str, Builder]:
    """Environment type -> instance generator (imported lazily: the generators import this module)."""
    from data_prep.tiny_tasks.knowledge_work import BUILDERS

    return dict(BUILDERS)


def task_of(instance: Instance, proposal: Proposal, proposer: str, k: int = 0) -> KwTask:
    """The task of ``proposal`` on ``instance`` (named ``<instance>-<proposer><k>``)."""
    name, deliverables = f"{instance.id}-{proposer}{k}", tuple(proposal.deliverables)
    return KwTask(name, instance, proposal.instruction, deliverables, list(proposal.rubric), proposer)  # type: ignore[arg-type]


# ---- the teacher ------------------------------------------------------------------------------------------
SYSTEM = (
    "You write one realistic professional assignment and its grading rubric for an agent that works in a "
    "mounted workspace with a live system of record. You also see a private ground-truth record the agent "
    "never sees: take every graded value from it, and never state an answer or a looked-up value in the "
    'instruction. Reply with one JSON object: {"instruction": str, "deliverables": [relative paths the '
    'agent writes], "rubric": [criteria]}. A criterion is {"id", "requirement": one proposition naming '
    'the entities, dates and thresholds it checks, "weight": its professional importance (negative for a '
    'must-not), "kind": "judge" or "code", "file" (judge only, optional: the deliverable it is about), '
    '"check" (code only, on a deliverable): cell_value {file (an .xlsx workbook), sheet, cell, equals | '
    "approx, tolerance}, contains {file, text}, date_in {file, date (YYYY-MM-DD)}, regex {file, pattern, "
    'ignore_case} or file_exists {file}, with "type" naming it}. Give no credit for text the agent could '
    "copy from the workspace without doing the work."
)


def proposal_prompt(instance: Instance, max_words: int) -> str:
    """The teacher's user message: the spec, what the agent sees, and the private ground truth."""
    spec, env = instance.spec, environment_type(instance.spec.env_type)
    files = [f"- {rel}: " + (c.splitlines()[0][:100] if isinstance(c, str) and c else "(binary)")
             for rel, c in sorted(instance.files.items())]  # fmt: skip
    system = instance.system
    tables = [f"{t.name}({', '.join(c.name for c in t.all_columns)}): {len(system.rows.get(t.name, []))} rows"
              for t in system.tables]  # fmt: skip
    axes = [f"{k.replace('_', ' ').capitalize()}: " + (json.dumps(v) if isinstance(v, dict) else
             ", ".join(v) if isinstance(v, list | tuple) else str(v))
             for k, v in spec.model_dump().items() if k != "env_type"]  # fmt: skip
    lines = [f"Environment type: {spec.env_type} ({env.description})", *axes, "Workspace files:", *files,
             f"System of record {system.name!r} ({system.kind}, over MCP): " + "; ".join(tables),
             f"Private ground truth: {instance.ground_truth.model_dump_json()}",
             f"Instruction length: at most {max_words} words."]  # fmt: skip
    return "\n".join(lines)


def _grounded(value: Any, truth: list[Any]) -> bool:
    want = kf.number(value)
    if want is not None and any(kf.number(v) is not None and abs(kf.number(v) - want) <= 0.01 for v in truth):
        return True
    text = " ".join(str(value).split()).casefold()
    known = [" ".join(str(v).split()).casefold() for v in truth]
    return any(text == v or (len(text) >= 4 and text in v) for v in known)


def proposal_problem(proposal: Proposal, instance: Instance, max_words: int) -> tuple[str, str] | None:
    """Return ``(reason, detail)`` for the first thing wrong with a schema-valid proposal, else None."""
    truth = instance.ground_truth.values()
    if len(proposal.instruction.split()) > max_words:
        return "instruction_too_long", f"{len(proposal.instruction.split())} words > {max_words}"
    for c in proposal.rubric:
        if c.check is None:
            continue
        if c.check.file not in proposal.deliverables:
            return "check_outside_deliverables", f"{c.id}: {c.check.file}"
        value = next((v for a in ("approx", "equals", "text", "date") if (v := getattr(c.check, a, None))
                      is not None), None)  # fmt: skip
        if value is not None and not _grounded(value, truth):
            return "ungrounded_check", f"{c.id}: {value!r} is not in the ground truth"
    return None


def propose(
    client: Any, instances: list[Instance], per_instance: int, params: KwSynthesisParams
) -> tuple[SynthesisStep, int]:
    """Ask the teacher for ``per_instance`` tasks per instance (a bad reply is asked once more, then dropped);
    return the step (kept tasks as ``rows``, drops by reason) and how many replies were asked again."""
    fmt = {"response_format": json_format(Proposal)} if params.json_schema else {}

    def attempt(job: tuple[Instance, int]) -> tuple[KwTask | Drop, int]:
        instance, k = job
        prompt = proposal_prompt(instance, params.max_instruction_words)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        drop = Drop("reply_not_json")
        for tries in range(2):
            try:
                text = client.chat(messages, temperature=params.temperature, max_tokens=params.max_tokens,
                                   include_reasoning=False, **fmt)[0]  # fmt: skip
                proposal = parse_reply(text, Proposal)
            except TeacherError as exc:
                return Drop("teacher_error", str(exc)[:160]), tries
            except ReplyError as exc:
                drop = Drop(exc.reason, exc.detail)
                continue
            problem = proposal_problem(proposal, instance, params.max_instruction_words)
            if problem is None:
                return task_of(instance, proposal, "teacher", k), tries
            drop = Drop(*problem)
        return drop, 1

    jobs = [(inst, k) for inst in instances for k in range(per_instance)]
    step = SynthesisStep("kw_propose", attempted=len(jobs))
    with ThreadPoolExecutor(max_workers=max(1, min(params.workers, len(jobs) or 1))) as pool:
        outcomes = list(pool.map(attempt, jobs))
    for (instance, k), (outcome, _) in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, Drop):
            step.drops.add(outcome.reason, f"{instance.id}#{k}", outcome.detail)
        else:
            step.rows.append(outcome)
    return step, sum(tries for _, tries in outcomes)


# ---- the pipeline -----------------------------------------------------------------------------------------
class KwSynthesisParams(BaseModel):
    """The ``data.synthesis`` section of stage 08: what to instantiate, who proposes, the filters."""

    model_config = ConfigDict(extra="forbid")
    teacher: Endpoint | None = Field(None, description="Proposes tasks and rubrics (absent: step skipped).")
    env_types: list[str] = Field(default_factory=lambda: sorted(builders()), description="Types to build.")
    instances_per_type: int = Field(1, ge=1)
    teacher_tasks_per_instance: int = Field(1, ge=0)
    generator_tasks: bool = Field(True, description="Keep each generator-authored task too.")
    split: Literal["train", "heldout"] = "train"
    max_instruction_words: int = Field(400, ge=10)
    temperature: float = Field(1.0, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    workers: int = Field(4, ge=1)
    json_schema: bool = Field(True, description="Send the reply's JSON schema as response_format.")
    leakage: kf.LeakageParams = Field(default_factory=kf.LeakageParams)
    hacking: kf.HackingParams = Field(default_factory=kf.HackingParams)
    curriculum: kf.CurriculumParams = Field(default_factory=kf.CurriculumParams)

    @model_validator(mode="after")
    def _known(self) -> KwSynthesisParams:
        missing = sorted(set(self.env_types) - set(builders()))
        if missing:
            raise ValueError(f"env_types: no instance generator for {missing}; have {sorted(builders())}")
        return self


def build_instances(params: KwSynthesisParams, seed: int) -> list[Instance]:
    """Sample a spec and build an instance ``instances_per_type`` times per environment type."""
    build = builders()
    out = []
    for env_type in params.env_types:
        for i in range(params.instances_per_type):
            rng = random.Random(f"kw:{seed}:{params.split}:{env_type}:{i}")
            inst = build[env_type](sample_spec(env_type, rng), rng, params.split)
            inst.id = f"{env_type}-{params.split}-s{seed}-{i:03d}"
            out.append(inst)
    return out


def synthesise(
    params: KwSynthesisParams,
    seed: int,
    out_dir: Path,
    manifest: Manifest,
    *,
    grade: Grade = grade_code_criteria,
    base_scorer: Callable[[Any, int], Any] | None = None,
    client: Any = None,
) -> list[KwTask]:
    """Run the pipeline, write the task folders under ``out_dir`` and record every step in ``manifest``.

    ``grade`` scores the hacking filter's degenerate deliverables (default: the reward's code criteria);
    ``base_scorer(task, k)`` gives the base policy's scores for the curriculum band (absent: skipped);
    ``client`` replaces the teacher's chat client (default: one for ``params.teacher``).
    """
    manifest.add_source({"name": "kw_synthesis", "license": "generated", "env_types": params.env_types,
                         "teacher": params.teacher.model if params.teacher else None,
                         "combinations": {t: combinations(t) for t in params.env_types}})  # fmt: skip
    instances = build_instances(params, seed)
    manifest.step("kw_instances", len(instances), split=params.split)
    tasks = [task_of(i, i.proposal, "generator") for i in instances if params.generator_tasks and i.proposal]
    manifest.step("kw_generator_tasks", len(tasks), enabled=params.generator_tasks)
    if params.teacher is None and client is None:
        manifest.step("kw_propose", len(tasks), skipped=True,
                      reason="no teacher endpoint configured (data.synthesis.teacher)")  # fmt: skip
    else:
        chat = client or client_for(params.teacher)
        step, retried = propose(chat, instances, params.teacher_tasks_per_instance, params)
        tasks += step.rows
        manifest.step("kw_propose", len(tasks), retried=retried, **step.manifest_fields())
    leak = kf.leakage_filter(tasks, params.leakage)
    manifest.step("kw_leakage", len(leak.kept), **leak.manifest_fields())
    hack = kf.hacking_filter(leak.kept, grade, params.hacking)
    manifest.step("kw_hacking", len(hack.kept), **hack.manifest_fields())
    tasks = hack.kept
    if base_scorer is None:
        manifest.step("kw_curriculum", len(tasks), skipped=True,
                      reason="no base-policy scorer (data.synthesis.base_policy)")  # fmt: skip
    else:
        band = kf.curriculum_filter(tasks, base_scorer, params.curriculum)
        manifest.step("kw_curriculum", len(band.kept), **band.manifest_fields())
        tasks = band.kept
    write_tasks(out_dir, tasks)
    index = out_dir / "index.jsonl"
    manifest.add_output(index, write_jsonl(index, (index_row(t) for t in tasks)))
    manifest.step("kw_write", len(tasks), out_dir=str(out_dir))
    return tasks


# ---- Harbor task folders ----------------------------------------------------------------------------------
def index_row(task: KwTask) -> dict[str, Any]:
    """One line of ``index.jsonl``."""
    spec = task.instance.spec
    return {"name": task.name, "env_type": spec.env_type, "domain": spec.domain, "proposer": task.proposer,
            "split": task.instance.split, "spec_id": spec.spec_id, "deliverables": list(task.deliverables),
            "criteria": len(task.rubric)}  # fmt: skip


def _task_toml(task: KwTask) -> str:
    spec, system = task.instance.spec, task.instance.system
    meta = {"generator": "data_prep.kw_synthesis", "env_type": spec.env_type, "domain": spec.domain,
            "practice_area": spec.practice_area, "system": system.kind, "proposer": task.proposer,
            "split": task.instance.split, "spec_id": spec.spec_id, "spec": spec.model_dump_json(),
            "deliverables": list(task.deliverables), "rubric": "tests/rubric.json",
            "ground_truth": "tests/ground_truth.json"}  # fmt: skip
    args = ["-m", "infra.agents.awm.mcp_server", "--scenario-dir", f"{SERVICES}/{system.name}"]
    return "\n".join([
        f'schema_version = "{HARBOR_SCHEMA_VERSION}"', "", "[task]", f'name = "rufus-kw/{task.name}"',
        f"description = {json.dumps(environment_type(spec.env_type).description)}",
        f'keywords = ["knowledge-work", "{spec.domain}", "{spec.env_type}"]', "", "[metadata]",
        *(f"{k} = {json.dumps(v)}" for k, v in meta.items()), "", "[verifier]", "timeout_sec = 300.0", "",
        "[agent]", "timeout_sec = 1800.0", "", "[environment]", "build_timeout_sec = 600.0", "cpus = 1",
        "memory_mb = 2048", "storage_mb = 1024", 'network_mode = "no-network"', 'workdir = "/app"', "",
        "[[environment.mcp_servers]]", f'name = "{system.name}"', 'transport = "stdio"',
        'command = "python3"', f"args = {json.dumps(args)}", "",
    ])  # fmt: skip


_DOCKERFILE = "# Documentary: the system of record runs in the services container.\n" \
    "FROM python:3.11-slim\nWORKDIR /app\nCOPY files/ /app/\n"  # fmt: skip
_TEST_SH = "#!/bin/bash\n# Graded outside the container by the stage's rubric reward (tests/rubric.json).\n" \
    'echo "graded by the rubric reward outside the container" >&2\nexit 1\n'  # fmt: skip
_SOLVE_SH = "#!/bin/bash\n# The generator's reference deliverables.\ncp -r /solution/files/. /app/\n"


def write_task(task_dir: Path, task: KwTask) -> None:
    """Write ``task`` as a Harbor task folder (replacing ``task_dir``); the ground truth goes to tests/."""
    if task_dir.exists():
        shutil.rmtree(task_dir)
    text = {
        "instruction.md": task.instruction.strip() + "\n",
        "task.toml": _task_toml(task),
        "environment/Dockerfile": _DOCKERFILE,
        "tests/test.sh": _TEST_SH,
        "tests/rubric.json": json.dumps(
            [c.model_dump(mode="json", exclude_none=True) for c in task.rubric], indent=1
        ),
        "tests/ground_truth.json": task.ground_truth.model_dump_json(indent=1),
    }
    if task.reference:
        text["solution/solve.sh"] = _SOLVE_SH
        materialize(task_dir / "solution" / "files", task.reference)
    materialize(task_dir, text)
    materialize(task_dir / "environment" / "files", task.files)
    task.instance.system.write(task_dir / "environment" / "services" / task.instance.system.name)
    for script in task_dir.glob("*/*.sh"):
        script.chmod(0o755)


def write_tasks(out: Path, tasks: list[KwTask]) -> list[Path]:
    """Write each task under ``out`` (which must hold no other task folders) and reload it."""
    names = {t.name for t in tasks}
    stale = (
        sorted(p.name for p in out.iterdir() if p.is_dir() and p.name not in names) if out.is_dir() else []
    )
    if stale:
        raise FileExistsError(f"{out}: holds task folders this run would not write ({', '.join(stale[:3])})")
    paths = []
    for task in tasks:
        write_task(out / task.name, task)
        read_task(out / task.name)
        paths.append(out / task.name)
    return paths


def read_task(task_dir: Path) -> tuple[HarborTask, list[Criterion], GroundTruth]:
    """Load a written task: the Harbor task, its rubric and its ground truth (errors name the file)."""
    harbor = load_task(task_dir)
    tests = Path(task_dir) / "tests"
    try:
        rubric = [Criterion.model_validate(c) for c in json.loads((tests / "rubric.json").read_text())]
        truth = GroundTruth.model_validate_json((tests / "ground_truth.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{task_dir}: tests/rubric.json or tests/ground_truth.json: {exc}") from None
    return harbor, rubric, truth
