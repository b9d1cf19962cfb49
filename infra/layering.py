"""Layered configuration: deep merge with provenance, ``--set`` parsing and errors that name their source.

Each layer is a plain dict tagged with where it came from (a file, a recipe entry, the command line). The
merge remembers, for every dotted key, the last layer that set it, so a validation error points at the file
and key the user has to fix rather than at the merged result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A configuration problem, with the file and dotted key it comes from."""


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; errors name the file (and line for syntax errors)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


class Layered:
    """A dict built from ordered layers, remembering which layer set each dotted key."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.origin: dict[str, str] = {}

    def apply(self, layer: dict[str, Any], source: str, prefix: str = "") -> None:
        """Deep-merge ``layer`` (from ``source``) under the dotted ``prefix``."""
        target = self.data
        if prefix:
            for part in prefix.split("."):
                target = target.setdefault(part, {})
        self._merge(target, layer, source, prefix)

    def _merge(self, target: dict[str, Any], layer: dict[str, Any], source: str, prefix: str) -> None:
        for key, value in layer.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                self._merge(target[key], value, source, dotted)
            else:
                target[key] = _copy(value)
                self.origin[dotted] = source
                for sub in _dotted_keys(value, dotted):
                    self.origin[sub] = source

    def source_of(self, dotted: str) -> str:
        """The layer that set ``dotted`` or its nearest ancestor."""
        parts = dotted.split(".")
        while parts:
            key = ".".join(parts)
            if key in self.origin:
                return self.origin[key]
            parts.pop()
        return "defaults"

    def validate(self, model: type[BaseModel], default_source: str) -> BaseModel:
        """Validate the merged dict; on error raise ConfigError naming each failing key's source."""
        try:
            return model.model_validate(self.data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, self, default_source)) from None


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _dotted_keys(value: Any, prefix: str) -> list[str]:
    if not isinstance(value, dict):
        return []
    out = []
    for k, v in value.items():
        out.append(f"{prefix}.{k}")
        out.extend(_dotted_keys(v, f"{prefix}.{k}"))
    return out


def format_validation_error(exc: ValidationError, layered: Layered | None, default_source: str) -> str:
    """One line per pydantic error: ``source: key.path: message (got value)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        source = layered.source_of(loc) if layered and loc else default_source
        if source == "defaults":
            source = default_source
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not a field of this section; check the spelling)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        got = err.get("input")
        got_s = (
            ""
            if err["type"] in ("missing", "extra_forbidden") or isinstance(got, dict)
            else f" (got {got!r})"
        )
        lines.append(f"{source}: {loc or '<root>'}: {msg}{got_s}")
    return "\n".join(lines)


def parse_set(expr: str) -> tuple[str, Any]:
    """Parse ``key.path=value`` (value read as YAML, so numbers, bools and lists work)."""
    if "=" not in expr:
        raise ConfigError(f"--set {expr!r}: expected key.path=value")
    key, raw = expr.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {expr!r}: empty key component")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {expr!r}: value is not valid YAML: {exc}") from exc
    return key, value


def nest(dotted: str, value: Any) -> dict[str, Any]:
    """Turn ``a.b.c`` and a value into ``{'a': {'b': {'c': value}}}``."""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out
