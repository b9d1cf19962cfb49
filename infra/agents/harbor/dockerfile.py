"""Read a task's Dockerfile without building it: its steps, local COPY/ADD file copies, ENV and WORKDIR.

A runtime without Docker reproduces a "files plus host tools" environment (one FROM, then only COPY/ADD of
local files and metadata) by copying :attr:`DockerfileInfo.copies` onto its base filesystem. Hand-written: no
Docker engine runs here, and the dockerfile-parse style libraries neither resolve COPY sources nor track the
WORKDIR in effect. Variable substitution (``$VAR``, ``ARG``) is not performed; values holding ``$`` are left
out of :attr:`DockerfileInfo.env`.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# Instructions that change no files beyond what COPY/ADD bring in.
FILES_ONLY_INSTRUCTIONS = frozenset(
    {"FROM", "WORKDIR", "COPY", "ADD", "ENV", "ARG", "LABEL", "USER", "CMD", "ENTRYPOINT", "EXPOSE", "SHELL"}
    | {"STOPSIGNAL", "VOLUME", "HEALTHCHECK", "MAINTAINER"}
)


class DockerfileError(ValueError):
    """A Dockerfile instruction we cannot read; ``line`` is its first line number."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        super().__init__(message)


class DockerfileStep(BaseModel):
    """One instruction (continuations joined), with the WORKDIR in effect when it runs."""

    model_config = ConfigDict(frozen=True)
    line: int
    instruction: str  # upper-cased keyword, e.g. "RUN"
    args: str
    workdir: str


class FileCopy(BaseModel):
    """A local COPY/ADD with Docker semantics: a directory source copies its contents; several sources or a
    ``dest`` ending in ``/`` mean ``dest`` is a directory."""

    model_config = ConfigDict(frozen=True)
    line: int
    sources: tuple[Path, ...]  # absolute host paths, each inside the build context
    dest: str  # absolute path in the task filesystem (a relative dest joined to the WORKDIR in effect)


class DockerfileInfo(BaseModel):
    """What :func:`parse_dockerfile` read."""

    model_config = ConfigDict(frozen=True)
    steps: tuple[DockerfileStep, ...]
    copies: tuple[FileCopy, ...]
    base_image: str | None  # the last FROM
    workdir: str | None  # the last WORKDIR (None when the file sets none)
    env: dict[str, str]

    @property
    def files_only(self) -> bool:
        """See :func:`is_files_only`."""
        return is_files_only(self.steps, self.copies)


def is_files_only(steps: tuple[DockerfileStep, ...], copies: tuple[FileCopy, ...]) -> bool:
    """True for one FROM followed only by local file copies and metadata (no RUN, second stage or URL)."""
    copied = {c.line for c in copies}
    return sum(s.instruction == "FROM" for s in steps) == 1 and all(
        s.instruction in FILES_ONLY_INSTRUCTIONS
        and (s.instruction not in ("COPY", "ADD") or s.line in copied)
        for s in steps
    )


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Return (first line number, instruction) pairs: continuations joined, comments and blanks dropped,
    heredoc bodies (``RUN <<EOF``) kept with their instruction."""
    out: list[tuple[int, str]] = []
    buf, start, heredoc = "", 0, None
    for n, raw in enumerate(text.splitlines(), 1):
        if heredoc is not None:
            buf += "\n" + raw
            if raw.strip() == heredoc:
                out.append((start, buf))
                buf, heredoc = "", None
            continue
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        m = re.search(r"<<-?(['\"]?)(\w+)\1", buf)
        if m and buf.split(None, 1)[0].upper() in ("RUN", "COPY"):
            heredoc = m.group(2)
            continue
        out.append((start, buf))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _env_pairs(args: str, line: int) -> dict[str, str]:
    try:
        parts = shlex.split(args)
    except ValueError as exc:
        raise DockerfileError(line, f"ENV: {exc}") from None
    if parts and "=" in parts[0]:
        return {k: v for k, v in (p.split("=", 1) for p in parts) if "$" not in v}
    return {parts[0]: " ".join(parts[1:])} if parts and "$" not in args else {}


def _file_copy(kw: str, args: str, line: int, workdir: str, root: Path) -> FileCopy | None:
    try:
        words = json.loads(args) if args.startswith("[") else shlex.split(args)
    except ValueError as exc:
        raise DockerfileError(line, f"{kw}: {exc}") from None
    flags = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    if len(words) < 2:
        raise DockerfileError(line, f"{kw} needs a source and a destination")
    if any(f.startswith("--from") for f in flags) or any(re.match(r"\w+://|git@", w) for w in words[:-1]):
        return None  # from another stage or a remote source: not a local file copy
    if kw == "ADD" and any(re.search(r"\.(tar|tgz|tbz2?|txz)(\.\w+)?$", w) for w in words[:-1]):
        return None  # ADD unpacks local archives: not a plain copy
    sources: list[Path] = []
    for src in words[:-1]:
        found = sorted(root.glob(src.lstrip("/"))) if re.search(r"[*?\[]", src) else [root / src.lstrip("/")]
        if not found:
            raise DockerfileError(line, f"{kw} pattern {src!r} matches nothing in the build context")
        for path in (p.resolve() for p in found):
            if path != root and root not in path.parents:
                raise DockerfileError(line, f"{kw} source {src!r} escapes the build context")
            if not path.exists():
                raise DockerfileError(line, f"{kw} source {src!r} not found in the build context")
            sources.append(path)
    dest = words[-1]
    joined = posixpath.normpath(posixpath.join(workdir, dest))
    if dest.endswith("/") and joined != "/":
        joined += "/"
    return FileCopy(line=line, sources=tuple(sources), dest=joined)


def parse_dockerfile(text: str, context: Path) -> DockerfileInfo:
    """Parse Dockerfile ``text`` whose build context is ``context``; raise :class:`DockerfileError`."""
    steps: list[DockerfileStep] = []
    copies: list[FileCopy] = []
    env: dict[str, str] = {}
    workdir, base, set_workdir = "/", None, False
    root = context.resolve()
    for line, text_line in logical_lines(text):
        word, *rest = text_line.split(None, 1)
        kw, args = word.upper(), (rest[0].strip() if rest else "")
        if kw == "FROM":
            base, workdir = next((a for a in args.split() if not a.startswith("--")), None), "/"
        elif kw == "WORKDIR":
            workdir, set_workdir = posixpath.normpath(posixpath.join(workdir, args.strip("\"'"))), True
        elif kw == "ENV":
            env.update(_env_pairs(args, line))
        steps.append(DockerfileStep(line=line, instruction=kw, args=args, workdir=workdir))
        if kw in ("COPY", "ADD") and "<<" not in args:
            copy = _file_copy(kw, args, line, workdir, root)
            if copy is not None:
                copies.append(copy)
    return DockerfileInfo(
        steps=tuple(steps),
        copies=tuple(copies),
        base_image=base,
        workdir=workdir if set_workdir else None,
        env=env,
    )
