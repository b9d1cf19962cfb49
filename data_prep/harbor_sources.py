"""The task sources of Coding Agent RL (RA §3.6) and the one folder of runnable Harbor tasks made from them.

The paper trains on three public sources, all read here in the Harbor task layout
(:mod:`infra.agents.harbor.task`): Endless-Terminal [30], SETA-Env [90] (4,500+ Harbor tasks) and Scale-SWE
[117] (pre-built Docker images with fail-to-pass tests). :data:`SOURCES` is the registry; a stage lists
the ones it uses under ``data.sources`` (``{name: ..., revision: ...}`` merged over the registry entry).

* :func:`task_roots` fetches one source (a local folder, or the hub at a revision: the production profile
  refuses one that is not a 40-hex commit, :func:`check_pinned`) and returns the folders holding its task
  directories. Scale-SWE publishes rows, not directories: :func:`scale_swe_task` writes each row as a
  Harbor task (``FROM <image_url>`` Dockerfile, the problem statement as the instruction, a ``test.sh``
  running its ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` tests with pytest, the gold patch as the oracle).
* :func:`collect` loads every task, applies the structural filter (what :func:`structural_problems` finds:
  missing instruction or tests, no environment, multi-container, multi-step, separate verifier image;
  plus symlinks, which could reach outside the task) and copies the runnable ones into one folder, named
  ``<source>__<task>``; each step is counted in the manifest, per source and per reason.
* :func:`template_specs` gives each kept task its sandbox template (fixed CPUs, memory, disk: the task's
  own ``[environment]`` values, else the stage defaults); ``python -m data_prep.harbor_sources
  build-templates --spec templates.json`` bakes them with the E2B CLI (``e2b template create``), the
  production plan's template step; the ``harbor`` environment's ``runtime=e2b`` boots one sandbox per
  trajectory from them (:mod:`infra.agents.harbor.backends`).

Facts behind the registry (no hub access here, so no revision could be pinned; set ``revision`` before a
production run): SETA-Env's card (``camel-ai/SETA-Env``) lists 4,567 Harbor-style task folders under
``SETA_Synth/`` (3,255) and ``SETA_Evolve/`` (1,312); Scale-SWE (``AweAI-Team/Scale-SWE``) released 20,000
rows with ``instance_id``, ``image_url``, ``workdir``, ``problem_statement``, ``patch``, ``f2p_patch``,
``f2p_script``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``pre_commands``; Endless-Terminal's generator writes
Harbor folders (``kanishkg/endless-terminals``, ``generate_harbor_tasks.py``) and its README links an HF
collection, not one data set, so its ``hub_id`` must be given.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_prep.awm_source import is_pinned
from data_prep.io import read_jsonl
from data_prep.manifest import Manifest
from infra.agents.harbor.task import (
    HARBOR_SCHEMA_VERSION,
    HarborTask,
    load_task,
    load_tasks,
    structural_problems,
)
from infra.layering import ConfigError

#: Registry defaults per source name (paper §3.6; licenses as the paper states them).
SOURCES: dict[str, dict[str, Any]] = {
    "endless_terminal": {
        "layout": "harbor", "hub_id": None, "license": "mit (paper; the repository README says apache-2.0)",
        "note": "arXiv 2601.16443; procedurally generated terminal tasks with completion tests",
    },
    "seta_env": {
        "layout": "harbor", "hub_id": "camel-ai/SETA-Env", "subdirs": ["SETA_Synth", "SETA_Evolve"],
        "license": "cc-by-4.0 (paper)", "note": "arXiv 2607.10891; 4,567 tasks (3,255 synth, 1,312 evolved)",
    },
    "scale_swe": {
        "layout": "scale_swe", "hub_id": "AweAI-Team/Scale-SWE", "license": "cc-by-4.0 (paper)",
        "note": "arXiv 2602.09892; executable PR tasks, pre-built images, fail-to-pass tests",
    },
}  # fmt: skip
_TEMPLATE_NAME = re.compile(r"[^a-z0-9_-]+")


class SourceError(ValueError):
    """A source that cannot be read; the message is one line naming the source, file or key."""


class HarborSource(BaseModel):
    """One entry of ``data.sources``: a registry name plus where to read it (overrides the registry)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registry name: " + ", ".join(SOURCES) + ".")
    layout: Literal["harbor", "scale_swe"] = Field(description="Task folders, or Scale-SWE rows to convert.")
    hub_id: str | None = Field(None, description="Hub data set; None: the source must be read locally.")
    revision: str | None = Field(None, description="Hub commit (40 hex); the production profile needs one.")
    subdirs: list[str] = Field(default_factory=list, description="Folders holding task dirs ([]: the root).")
    split: str = Field("train", description="Scale-SWE: the hub split to read.")
    local_dir: str | None = Field(None, description="A folder of task dirs (harbor layout), used in place.")
    local_files: list[str] = Field(default_factory=list, description="Scale-SWE: local JSONL/Parquet rows.")
    license: str = Field(description="License recorded in the manifest.")
    note: str = ""

    @model_validator(mode="before")
    @classmethod
    def _registry_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("name") not in SOURCES:
                raise ValueError(f"unknown source {data.get('name')!r}; known: {', '.join(SOURCES)}")
            return {**SOURCES[data["name"]], **data}
        return data

    @model_validator(mode="after")
    def _local_form_fits_layout(self) -> HarborSource:
        if self.layout == "scale_swe" and self.local_dir:
            raise ValueError(f"source {self.name!r} is read from rows: give local_files, not local_dir")
        if self.layout == "harbor" and self.local_files:
            raise ValueError(f"source {self.name!r} is task folders: give local_dir, not local_files")
        return self

    @property
    def is_local(self) -> bool:
        """True when the source is read from disk rather than downloaded."""
        return bool(self.local_dir or self.local_files)


def check_pinned(source: HarborSource, profile: str, key: str) -> None:
    """Raise :class:`ConfigError` when production would download ``source`` unpinned (or from no hub id)."""
    if profile != "production" or source.is_local:
        return
    if source.hub_id is None:
        raise ConfigError(
            f"{key}.hub_id: source {source.name!r} names no hub data set; set it or {key}.local_dir"
        )
    if not is_pinned(source.revision):
        got = "none" if source.revision is None else repr(source.revision)
        raise ConfigError(
            f"{key}.revision: the production profile needs a 40-hex commit of {source.hub_id}, got {got}; "
            f"set {key}.revision: <commit> (or {key}.local_dir)"
        )


def _download(source: HarborSource, dest: Path) -> Path:
    from huggingface_hub import snapshot_download

    patterns = [f"{d}/**" for d in source.subdirs] or None
    snapshot_download(
        source.hub_id, repo_type="dataset", revision=source.revision, allow_patterns=patterns, local_dir=dest
    )
    return dest


def _scale_swe_rows(source: HarborSource) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` of Scale-SWE's local files, else of the hub split at the revision."""
    if not source.local_files:
        import datasets

        rows = datasets.load_dataset(source.hub_id, split=source.split, revision=source.revision)
        yield from ((f"{source.hub_id}#{i}", dict(r)) for i, r in enumerate(rows))
        return
    for name in source.local_files:
        path = Path(name)
        if not path.is_file():
            raise SourceError(f"{path}: no such file (data.sources[{source.name}].local_files)")
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            yield from ((f"{path} row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist(), 1))
        else:
            yield from read_jsonl(path)


def task_roots(
    source: HarborSource, dest: Path, key: str = "data.sources", profile: str = "production"
) -> tuple[list[Path], list[str]]:
    """Return the folders holding ``source``'s task dirs (fetched, or converted into ``dest``) and one line
    per Scale-SWE row that could not be converted."""
    check_pinned(source, profile, key)
    if source.layout == "scale_swe":
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        errors = []
        for where, row in _scale_swe_rows(source):
            try:
                scale_swe_task(row, dest, where)
            except SourceError as exc:
                errors.append(str(exc))
        return [dest], errors
    if source.local_dir:
        root = Path(source.local_dir)
        if not root.is_dir():
            raise SourceError(f"{key}.local_dir {root}: not a directory")
    else:
        root = _download(source, dest)
    roots = [root / d for d in source.subdirs] or [root]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        raise SourceError(f"source {source.name!r}: no task folder {', '.join(missing)} ({key}.subdirs)")
    return roots, []


# ---- Scale-SWE rows as Harbor tasks ---------------------------------------------------------------------
def _str_list(row: dict[str, Any], key: str, where: str) -> list[str]:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip().startswith("[") else [value]
        except json.JSONDecodeError as exc:
            raise SourceError(f"{where}: {key} is not a JSON list ({exc.msg})") from None
    if value is not None and not isinstance(value, list):
        raise SourceError(f"{where}: {key} is not a list")
    return [str(v) for v in value or []]


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def scale_swe_task(row: dict[str, Any], dest: Path, where: str = "") -> Path:
    """Write one Scale-SWE row as a Harbor task dir under ``dest`` and return it.

    A field the task needs but the row lacks is left out rather than invented, so the structural filter
    names it (no ``image_url``: no environment; no ``FAIL_TO_PASS``: no ``tests/test.sh``).
    """
    iid = str(row.get("instance_id") or "").strip()
    if not iid or "/" in iid or iid.startswith("."):
        raise SourceError(f"{where}: Scale-SWE row has no usable instance_id ({iid!r})")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS", "pre_commands"):  # checked before anything is written
        _str_list(row, key, where)
    task = dest / iid
    if task.exists():
        raise SourceError(f"{where}: instance_id {iid!r} appears twice")
    workdir = str(row.get("workdir") or "/testbed")
    meta = {
        k: str(row[k]) for k in ("repo", "user", "pr_commit", "parent_commit", "github_url") if row.get(k)
    }
    lines = [
        f"schema_version = {_toml(HARBOR_SCHEMA_VERSION)}",
        "",
        "[task]",
        f"name = {_toml('scale-swe/' + iid)}",
    ]
    lines += ["", "[metadata]", 'source = "scale_swe"', *(f"{k} = {_toml(v)}" for k, v in meta.items())]
    lines += ["", "[environment]", f"workdir = {_toml(workdir)}"]
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text("\n".join(lines) + "\n")
    if str(row.get("problem_statement") or "").strip():
        (task / "instruction.md").write_text(str(row["problem_statement"]).strip() + "\n")
    if row.get("image_url"):
        pre = _str_list(row, "pre_commands", where)
        run = [f"RUN {' && '.join(pre)}"] if pre else []
        dockerfile = "\n".join([f"FROM {row['image_url']}", f"WORKDIR {workdir}", *run])
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile + "\n")
    f2p = _str_list(row, "FAIL_TO_PASS", where)
    tests = list(dict.fromkeys(f2p + _str_list(row, "PASS_TO_PASS", where)))
    if f2p:
        (task / "tests" / "test_ids.txt").write_text("\n".join(tests) + "\n")
        (task / "tests" / "test.sh").write_text(_scale_swe_test_sh(row, task / "tests", workdir))
    if row.get("patch"):
        (task / "solution").mkdir()
        (task / "solution" / "gold.patch").write_text(str(row["patch"]))
        apply = f"cd {shlex.quote(workdir)} && git apply /solution/gold.patch\n"
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\nset -e\n" + apply)
    return task


def _scale_swe_test_sh(row: dict[str, Any], tests: Path, workdir: str) -> str:
    """Apply the row's test patch / reproduction script, run its tests, write 1 iff all pass."""
    steps = [f"cd {shlex.quote(workdir)} || exit 1"]
    if row.get("f2p_patch"):
        (tests / "f2p.patch").write_text(str(row["f2p_patch"]))
        steps.append("git apply /tests/f2p.patch || { echo 0 > /logs/verifier/reward.txt; exit 0; }")
    if row.get("f2p_script"):  # Scale-SWE: applied as test_fail_to_pass.py under the repository root
        (tests / "test_fail_to_pass.py").write_text(str(row["f2p_script"]))
        steps.append("cp /tests/test_fail_to_pass.py ./test_fail_to_pass.py")
    return "\n".join([
        "#!/bin/bash",
        f"# Scale-SWE {row['instance_id']}: FAIL_TO_PASS + PASS_TO_PASS (data_prep.harbor_sources).",
        "mkdir -p /logs/verifier", *steps, "mapfile -t TESTS < /tests/test_ids.txt",
        'if python -m pytest -rA -p no:cacheprovider "${TESTS[@]}"; then echo 1 > /logs/verifier/reward.txt',
        "else echo 0 > /logs/verifier/reward.txt; fi",
    ]) + "\n"  # fmt: skip


# ---- collecting, structural filter ----------------------------------------------------------------------
def _reason(problem: str) -> str:
    return problem.split(" (")[0]


def _symlinks(task: HarborTask) -> list[str]:
    links = [p for p in task.task_dir.rglob("*") if p.is_symlink()]
    return [f"symlink in task ({links[0].relative_to(task.task_dir)})"] if links else []


def _with_dockerfile(task: HarborTask) -> HarborTask:
    """A task given only as a prebuilt image gets ``environment/Dockerfile`` = ``FROM <image>`` (a template
    is built from a Dockerfile); the copy is reloaded."""
    env = task.environment
    if env.dockerfile is not None or env.docker_image is None or task.layout != "harbor":
        return task
    (task.task_dir / "environment").mkdir(exist_ok=True)
    (task.task_dir / "environment" / "Dockerfile").write_text(f"FROM {env.docker_image}\n")
    return load_task(task.task_dir)


def collect(
    sources: list[HarborSource], work: Path, dest: Path, manifest: Manifest, *, profile: str = "production"
) -> list[HarborTask]:
    """Fetch each source, drop the structurally unrunnable tasks, copy the rest into ``dest``; return them.

    ``dest`` is emptied first. Steps ``loaded`` (with task dirs that do not parse) and ``structural`` go
    into ``manifest`` with counts per source and per reason.
    """
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    kept: list[HarborTask] = []
    loaded, unparsable, structural = Counter(), Counter(), Counter()
    reasons: Counter[str] = Counter()
    examples: list[str] = []
    for i, source in enumerate(sources):
        key = f"data.sources[{i}]"
        roots, row_errors = task_roots(source, work / source.name, key, profile)
        unparsable[source.name] += len(row_errors)
        examples += row_errors[: max(0, 5 - len(examples))]
        entry = {k: v for k, v in source.model_dump().items() if v not in (None, [], "")}
        if source.is_local:
            entry["revision"] = "local"
        else:
            entry.update(revision=source.revision or "unpinned", pinned=is_pinned(source.revision))
        manifest.add_source(entry)
        for root in roots:
            tasks, errors = load_tasks(root, require_files=False)
            loaded[source.name] += len(tasks)
            unparsable[source.name] += len(errors)
            examples += errors[: max(0, 5 - len(examples))]
            for task in tasks:
                problems = structural_problems(task) + _symlinks(task)
                if problems:
                    reasons.update(_reason(p) for p in problems)
                    continue
                copy = dest / f"{source.name}__{task.name}"
                shutil.copytree(task.task_dir, copy, symlinks=True)
                kept.append(_with_dockerfile(load_task(copy)))
                structural[source.name] += 1
    manifest.step("loaded", sum(loaded.values()), by_source=dict(loaded), unparsable=dict(unparsable),
                  unparsable_examples=examples)  # fmt: skip
    manifest.step(
        "structural", len(kept), by_source=dict(structural), dropped_by_reason=dict(sorted(reasons.items()))
    )
    return kept


# ---- sandbox templates ----------------------------------------------------------------------------------
class TemplateResources(BaseModel):
    """Fixed resources of a task's sandbox template when its ``task.toml`` sets none (not stated in RA)."""

    model_config = ConfigDict(extra="forbid")
    cpus: int = Field(2, ge=1)
    memory_mb: int = Field(4096, ge=512)
    storage_mb: int = Field(10240, ge=1024)


def template_specs(
    tasks: list[HarborTask], defaults: TemplateResources, prefix: str = "rufus-05"
) -> list[dict[str, Any]]:
    """Return one template per task: alias, build context, Dockerfile and its fixed CPUs, memory and disk."""
    specs = []
    for task in tasks:
        env = task.environment
        memory = int(env.memory_mb or defaults.memory_mb)
        specs.append({
            "task": task.name,
            "alias": _TEMPLATE_NAME.sub("-", f"{prefix}-{task.name}".lower()),
            "context": str(env.context_dir), "dockerfile": str(env.dockerfile),
            "cpus": max(1, int(-(-float(env.cpus or defaults.cpus) // 1))),  # whole CPUs, rounded up
            "memory_mb": memory + memory % 2,  # E2B wants an even number
            "storage_mb": int(env.storage_mb or defaults.storage_mb),
        })  # fmt: skip
    return specs


def e2b_create_argv(spec: dict[str, Any]) -> list[str]:
    """The E2B CLI command that bakes one template (``e2b template create``, CLI 2.x)."""
    return [
        "e2b", "template", "create", spec["alias"], "--path", spec["context"], "--dockerfile",
        spec["dockerfile"], "--cpu-count", str(spec["cpus"]), "--memory-mb", str(spec["memory_mb"]),
    ]  # fmt: skip


def build_templates(spec_file: Path, *, dry_run: bool = False) -> int:
    """Run (or, dry, print) the E2B build of every template in ``spec_file``; return how many."""
    specs = json.loads(Path(spec_file).read_text())
    if not dry_run and shutil.which("e2b") is None:
        raise SourceError(
            "e2b: the E2B CLI is not on PATH (npm i -g @e2b/cli; E2B_DOMAIN for a self-hosted cluster)"
        )
    for spec in specs:
        argv = e2b_create_argv(spec)
        print(shlex.join(argv), flush=True)
        if not dry_run:
            subprocess.run(argv, check=True)  # the build runs in E2B's builder, not on this host
    return len(specs)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``build-templates --spec templates.json [--dry-run]``."""
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.harbor_sources", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build-templates", help="Bake one E2B sandbox template per kept task.")
    build.add_argument(
        "--spec", type=Path, required=True, help="templates.json written by the stage's data prep."
    )
    build.add_argument("--dry-run", action="store_true", help="Print the commands only.")
    args = parser.parse_args(argv)
    try:
        n = build_templates(args.spec, dry_run=args.dry_run)
    except (SourceError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{n} template(s) {'listed' if args.dry_run else 'built'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
