"""Recipes and stage resolution: which stages run, in what order, from which base, with which overrides.

A recipe (``recipes/*.yaml``) is a base checkpoint, a scale profile, an ordered list of stage folders and
overrides. Reordering, omitting or swapping a stage for another folder is a one-line change. Resolution
merges, in this order: model defaults → the stage's ``launch.yaml`` (plus, on the embedded profile, its
``embedded`` sizes) → recipe-wide overrides → the recipe entry's overrides → ``--set`` on the command
line. The result is validated by :class:`infra.config.StageConfig`.

Paths a recipe names (stage folders, a local ``base.model``, data files in its overrides) resolve relative
to the recipe file's folder, then that folder's parent (``recipes/`` beside ``stages/``), then the
repository root; see :mod:`infra.recipe_paths`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from infra.config import Profile, StageConfig, StrictModel
from infra.hashing import sha256_file, sha256_json
from infra.layering import ConfigError, Layered, format_validation_error, load_yaml, nest, parse_set
from infra.recipe_paths import REPO_ROOT as REPO_ROOT  # re-exported for callers and tests
from infra.recipe_paths import find_recipe, resolve_base_model, resolve_named, resolve_override_paths

STAGE_FILES = ("data_prep.py", "reward.py", "launch.yaml", "README.md")
#: Optional stage files: ``env.py`` registers the stage's own environments (``infra.environments``).
OPTIONAL_STAGE_FILES = ("env.py",)
# Where each `embedded` sub-section lands in the stage config.
_EMBEDDED_TARGETS = {
    "optimizer": "optimizer",
    "sft": "sft",
    "rollout": "rl.rollout",
    "policy": "rl.policy",
    "environment": "rl.environment",
    "data": "data",
    "eval": "eval",
}


class BaseModelSpec(StrictModel):
    """The checkpoint the first stage starts from."""

    model: str = Field(description="'micro', 'smollm2-135m', a local HF folder or a hub id.")
    revision: str | None = Field(default=None, description="Hub revision (commit) to pin.")


class RecipeStage(StrictModel):
    """One entry of a recipe's stage list."""

    stage: str = Field(
        description="Stage folder: relative to the recipe's folder, its parent, then the repository root."
    )
    id: str | None = Field(
        default=None, description="Name in the run directory; defaults to the folder name."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Partial stage config for this entry."
    )


class Recipe(StrictModel):
    """A recipe file."""

    name: str = Field(description="Run name; the run directory defaults to runs/<name>.")
    description: str = Field(default="", description="What the recipe reproduces.")
    base: BaseModelSpec
    profile: Profile = Field(description="'production' (8×H200, slime) or 'embedded' (CPU, local backend).")
    seed: int = Field(default=0, description="Seed for data prep, sampling and initialisation.")
    stages: list[RecipeStage] = Field(min_length=1, description="Stages in pipeline order.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Partial config applied to every stage."
    )

    @field_validator("stages", mode="before")
    @classmethod
    def _strings_are_folders(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"stage": s} if isinstance(s, str) else s for s in v]
        return v


@dataclass
class ResolvedStage:
    """A stage ready to run: its validated config, folder, modules and hashes."""

    id: str
    folder: Path
    config: StageConfig
    profile: str
    resolved: dict[str, Any]
    data_params: BaseModel | dict[str, Any]
    config_hash: str
    code_hash: str
    _modules: dict[str, ModuleType] = field(default_factory=dict, repr=False)

    def module(self, name: str) -> ModuleType:
        """Import ``data_prep``, ``reward`` or ``env`` from the stage folder (names start with digits)."""
        if name not in self._modules:
            self._modules[name] = import_stage_file(self.folder / f"{name}.py")
        return self._modules[name]

    def code_files(self) -> list[Path]:
        """The stage's Python files that register rewards and environments (imported before use)."""
        return [self.folder / f for f in ("reward.py", *OPTIONAL_STAGE_FILES) if (self.folder / f).is_file()]

    def load_plugins(self) -> None:
        """Import the stage's ``reward.py`` and ``env.py`` (they register rewards and environments)."""
        for path in self.code_files():
            self.module(path.stem)

    def environment(self) -> Any:
        """Build the stage's RL environment (``rl.environment``) with the stage's reward as its default."""
        from infra.environments import stage_environment

        self.load_plugins()
        return stage_environment(self.config)


@dataclass
class LoadedRecipe:
    """A validated recipe and its stages, resolved for its profile."""

    path: Path
    recipe: Recipe
    stages: list[ResolvedStage]

    def stage(self, stage_id: str) -> ResolvedStage:
        """The stage with this id; a clear error lists the ids that exist."""
        for s in self.stages:
            if s.id == stage_id:
                return s
        raise ConfigError(f"{self.path}: no stage {stage_id!r}; stages are {[s.id for s in self.stages]}")


def _import_stage_file(path: Path, tag: str) -> ModuleType:
    mod_name = "rufus_stage_" + "".join(c if c.isalnum() else "_" for c in tag)
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


def import_stage_file(path: Path) -> ModuleType:
    """Import one stage file (``data_prep.py``, ``reward.py``, ``env.py``) by path, once per process.

    The module name comes from the folder, the file and its resolved path, so a file is imported once
    whichever stage id a recipe gives it, and two folders of the same name never share a module.
    """
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    return _import_stage_file(path, f"{path.parent.name}_{path.stem}_{digest}")


def find_stage_folder(ref: str, recipe_path: Path | None = None) -> Path:
    """The stage folder ``ref`` by the recipe rule (see :mod:`infra.recipe_paths`); errors list the places."""
    return resolve_named(ref, recipe_path, "stage folder", lambda c: (c / "launch.yaml").is_file())


def split_sets(sets: list[str], stage_ids: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Split ``--set`` expressions into recipe-wide ones and per-stage ones (``STAGE.key=value``)."""
    common: dict[str, Any] = {}
    per_stage: dict[str, dict[str, Any]] = {}
    for expr in sets:
        key, value = parse_set(expr)
        head, _, rest = key.partition(".")
        if head in stage_ids and rest:
            per_stage.setdefault(head, {})[rest] = value
        else:
            common[key] = value
    return common, per_stage


def sid_or(stage_id: str | None, folder: Path) -> str:
    """The stage id: the recipe's id if given, else the folder name."""
    return stage_id or folder.name


def _layer(base_layer: dict[str, Any], launch: str, later: list, *, embedded: bool) -> Layered:
    """Merge launch.yaml, (for the embedded profile) its ``embedded`` sizes, then the later layers."""
    layered = Layered()
    layered.apply(base_layer, launch)
    if embedded:
        # Embedded sizes sit right above launch.yaml, so recipe overrides and --set still win over them.
        probe = Layered()
        probe.apply(base_layer, launch)
        for layer, source in later:
            probe.apply(layer, source)
        emb = probe.data.get("embedded") or {}
        if not isinstance(emb, dict):
            raise ConfigError(f"{probe.source_of('embedded')}: embedded: expected a mapping")
        for section, target in _EMBEDDED_TARGETS.items():
            part = emb.get(section)
            if isinstance(part, dict) and part:
                src = probe.source_of(f"embedded.{section}")
                layered.apply(part, f"{src} (embedded.{section})", prefix=target)
        if isinstance(emb.get("phases"), list):
            src = probe.source_of("embedded.phases")
            layered.apply({"phases": emb["phases"]}, f"{src} (embedded.phases)", prefix="rl")
    for layer, source in later:
        layered.apply(layer, source)
    return layered


def resolve_stage(
    folder: Path,
    profile: str,
    *,
    stage_id: str | None = None,
    layers: list[tuple[dict[str, Any], str]] | None = None,
    sets: dict[str, Any] | None = None,
    common_sets: dict[str, Any] | None = None,
    used_sets: set[str] | None = None,
) -> ResolvedStage:
    """Merge the layers for one stage folder and validate them.

    ``sets`` always apply; ``common_sets`` (recipe-wide ``--set``) apply only where the stage has the
    top-level section (``rl.*`` skips an SFT stage); the keys used are added to ``used_sets``.
    """
    launch = folder / "launch.yaml"
    missing = [f for f in STAGE_FILES if not (folder / f).is_file()]
    if missing:
        raise ConfigError(f"{folder}: stage folder lacks {', '.join(missing)}")
    base_layer = load_yaml(launch)
    later: list[tuple[dict[str, Any], str]] = list(layers or [])
    for key, value in (common_sets or {}).items():
        if key.split(".")[0] in base_layer:
            later.append((nest(key, value), f"--set {key}"))
            if used_sets is not None:
                used_sets.add(key)
    for key, value in (sets or {}).items():
        later.append((nest(key, value), f"--set {sid_or(stage_id, folder)}.{key}"))
    layered = _layer(base_layer, str(launch), later, embedded=profile == "embedded")
    config = layered.validate(StageConfig, str(launch))
    other = "production" if profile == "embedded" else "embedded"
    try:  # a stage's config must be valid at both scales, whichever one runs now
        _layer(base_layer, str(launch), later, embedded=other == "embedded").validate(
            StageConfig, str(launch)
        )
    except ConfigError as exc:
        raise ConfigError(f"{exc}\n(in the {other} profile: a stage must be valid in both)") from None
    sid = stage_id or folder.name
    if config.name != folder.name:  # a recipe's `id` renames the entry, never the folder's stage
        raise ConfigError(f"{launch}: name: {config.name!r} differs from the folder name {folder.name!r}")
    resolved = config.model_dump(mode="json")
    stage = ResolvedStage(
        id=sid,
        folder=folder,
        config=config,
        profile=profile,
        resolved=resolved,
        data_params=config.data,
        config_hash=sha256_json({"config": resolved, "profile": profile}),
        code_hash=sha256_json(
            {
                f: sha256_file(folder / f)
                for f in ("data_prep.py", "reward.py", *OPTIONAL_STAGE_FILES)
                if (folder / f).is_file()
            }
        ),
    )
    from rewards import registered_rewards

    if config.reward not in registered_rewards():
        stage.module("reward")  # a stage may register its own reward in reward.py
        if config.reward not in registered_rewards():
            raise ConfigError(
                f"{layered.source_of('reward')}: reward: unknown reward {config.reward!r}; "
                f"registered: {', '.join(registered_rewards())}"
            )
    if config.rl is not None:
        _check_environment(stage, layered)
    params_model = getattr(stage.module("data_prep"), "Params", None)
    if params_model is not None:
        try:
            stage.data_params = params_model.model_validate(config.data)
        except ValidationError as exc:
            msg = format_validation_error(exc, None, str(launch))
            raise ConfigError(
                "\n".join(line.replace(": ", ": data.", 1) for line in msg.splitlines())
            ) from None
    return stage


def _check_environment(stage: ResolvedStage, layered: Layered) -> None:
    """Validate ``rl.environment`` (name and options) once the stage's ``env.py`` has registered its own."""
    from infra.environments import environment_options, registered_environments

    env = stage.config.rl.environment
    stage.load_plugins()
    if env.name not in registered_environments():
        raise ConfigError(
            f"{layered.source_of('rl.environment.name')}: rl.environment.name: unknown environment "
            f"{env.name!r}; registered: {', '.join(registered_environments())}"
        )
    try:
        environment_options(env.name, env.options)
    except ValueError as exc:
        raise ConfigError(f"{layered.source_of('rl.environment.options')}: rl.environment.{exc}") from None


def load_recipe(path: Path, sets: list[str] | None = None, profile: str | None = None) -> LoadedRecipe:
    """Load and validate a recipe and every stage it lists.

    ``path`` is looked up in the current directory, then the repository root; every path the recipe names
    resolves relative to the recipe file's folder, its parent, then the repository root.
    """
    path = find_recipe(path) if not Path(path).is_file() else Path(path)
    raw = load_yaml(path)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, None, str(path))) from None
    if profile is not None:
        recipe.profile = profile  # type: ignore[assignment]
    recipe.base.model = resolve_base_model(recipe.base.model, path)
    recipe.overrides = resolve_override_paths(recipe.overrides, path, "overrides")
    for entry in recipe.stages:
        entry.overrides = resolve_override_paths(entry.overrides, path, f"stages[{entry.stage}].overrides")
    folders = [find_stage_folder(e.stage, path) for e in recipe.stages]
    ids = [e.id or f.name for e, f in zip(recipe.stages, folders, strict=True)]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: stages: duplicate stage ids {ids}; give entries distinct `id`s")
    common, per_stage = split_sets(sets or [], ids)
    stages = []
    used: set[str] = set()
    for entry, folder, sid in zip(recipe.stages, folders, ids, strict=True):
        layers = []
        if recipe.overrides:
            layers.append((recipe.overrides, f"{path} (overrides)"))
        if entry.overrides:
            layers.append((entry.overrides, f"{path} (stages[{sid}].overrides)"))
        stages.append(
            resolve_stage(
                folder,
                recipe.profile,
                stage_id=sid,
                layers=layers,
                sets=per_stage.get(sid, {}),
                common_sets=common,
                used_sets=used,
            )
        )
    unused = sorted(set(common) - used)
    if unused:
        raise ConfigError(f"--set {', '.join(unused)}: no stage of {path} has this section")
    return LoadedRecipe(path=path, recipe=recipe, stages=stages)


def dump_resolved(stage: ResolvedStage) -> str:
    """The resolved stage config as YAML (written into the run directory)."""
    return yaml.safe_dump(
        {"stage": stage.id, "folder": str(stage.folder), "profile": stage.profile, "config": stage.resolved},
        sort_keys=False,
    )
