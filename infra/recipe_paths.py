"""Where the paths a recipe names point: one rule for stage folders, the base checkpoint and data files.

The rule: an absolute path is used as it is; a relative one is looked up, in order, in the recipe file's
own folder, in that folder's parent (the repository layout: ``recipes/`` beside ``stages/``) and in the
repository root. The first place where it exists wins; none gives a one-line :class:`ConfigError` that
lists every place looked. The recipe file itself, a command-line argument, is looked up in the current
directory, then the repository root. Paths from the command line without a recipe (``rufus stage
DIR``) resolve against the current directory, then the repository root.

It covers every path a recipe names: its stage folders, ``base.model`` when it is a local folder (a name
such as ``micro`` or a hub id is kept as it is unless a folder of that name exists by the rule; a value
starting with ``./`` or ``../`` must exist), and the data files of :data:`RECIPE_PATH_KEYS` in its
``overrides`` (rewritten to absolute paths before the stages' configs are merged).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.layering import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Config keys whose values are files a recipe's overrides may name; ``*`` is any key or list position.
#: The same keys under ``embedded.`` (the embedded profile's sizes) are paths too.
RECIPE_PATH_KEYS: tuple[str, ...] = (
    "data.benchmarks.*",
    "data.local_files.*.*",
    "data.lcb_files.*",
    "data.specs.*.local_files.*",
    "data.sources.*.local_files.*",
    "data.synthesis.queries.*",
)


def search_places(ref: str | Path, recipe_path: Path | None) -> list[Path]:
    """The places a relative ``ref`` is looked up, in order (just ``ref`` when it is absolute)."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        return [p]
    if recipe_path is None:
        bases = [Path.cwd(), REPO_ROOT]
    else:
        here = Path(recipe_path).resolve().parent
        bases = [here, here.parent, REPO_ROOT]
    return list(dict.fromkeys(base / p for base in bases))


def resolve_named(
    ref: str | Path,
    recipe_path: Path | None,
    what: str,
    exists: Callable[[Path], bool] = Path.exists,
) -> Path:
    """Resolve ``ref`` by the recipe rule; raise a one-line ConfigError listing the places looked."""
    places = search_places(ref, recipe_path)
    for place in places:
        if exists(place):
            return place.resolve()
    where = ", ".join(str(p) for p in places)
    origin = f"{recipe_path}: " if recipe_path is not None else ""
    raise ConfigError(f"{origin}{what} {str(ref)!r} not found (looked in: {where})")


def find_recipe(path: str | Path) -> Path:
    """The recipe file: ``path`` from the current directory, else from the repository root."""
    return resolve_named(path, None, "recipe", Path.is_file)


def resolve_base_model(model: str, recipe_path: Path) -> str:
    """``base.model`` as an absolute folder when it names a local one by the rule, else unchanged."""
    explicit = model.startswith(("./", "../", "/", "~"))
    for place in search_places(model, recipe_path):
        if place.is_dir():
            return str(place.resolve())
    if explicit:
        resolve_named(model, recipe_path, "base.model: folder", Path.is_dir)
    return model


def resolve_override_paths(layer: dict[str, Any], recipe_path: Path, where: str) -> dict[str, Any]:
    """A copy of the override ``layer`` whose :data:`RECIPE_PATH_KEYS` values are absolute paths."""
    patterns = [tuple(k.split(".")) for k in RECIPE_PATH_KEYS]
    patterns += [("embedded", *p) for p in patterns]

    def walk(node: Any, trail: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, (*trail, str(k))) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, (*trail, str(i))) for i, v in enumerate(node)]
        if isinstance(node, str) and node and any(_matches(p, trail) for p in patterns):
            return str(resolve_named(node, recipe_path, f"{where}: {'.'.join(trail)}: file"))
        return node

    return walk(layer, ())


def _matches(pattern: tuple[str, ...], trail: tuple[str, ...]) -> bool:
    return len(pattern) == len(trail) and all(p in ("*", t) for p, t in zip(pattern, trail, strict=True))
