"""Keep the "## Production command" section of every stage README equal to its rendered runbook.

``python -m infra.production.readme_sync`` rewrites that one section of ``stages/*/README.md`` with the
text of :func:`infra.production.plan.render_stage_command_text` (``--check`` only reports stale READMEs).
The rest of each README is left byte for byte as it is. Hand-written because a Markdown library would
re-emit the whole document; here only the lines of one section are replaced.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.production.plan import DEFAULT_RECIPE, REPO_ROOT, recipe_with_stage, render_stage_command_text

HEADING = "## Production command"
STAGES_ROOT = REPO_ROOT / "stages"


def stage_folders(stages_root: Path = STAGES_ROOT) -> list[Path]:
    """Stage folders (those holding a ``launch.yaml``), sorted by name."""
    return sorted(p.parent for p in stages_root.glob("*/launch.yaml"))


def production_section(command_text: str, recipe: Path = DEFAULT_RECIPE) -> str:
    """The README section: heading, one sentence, and the runbook in a bash block."""
    fence = "```"
    while fence in command_text:
        fence += "`"
    try:
        shown = recipe.resolve().relative_to(REPO_ROOT)
    except ValueError:
        shown = recipe
    return (
        f"{HEADING}\n\n"
        f"What `rufus plan {shown}` renders for this stage on 8×H200 nodes (default cluster paths); "
        "refresh it with `python -m infra.production.readme_sync` after changing the config.\n\n"
        f"{fence}bash\n{command_text.rstrip(chr(10))}\n{fence}\n"
    )


def _section_span(lines: list[str]) -> tuple[int, int] | None:
    """Line range [start, end) of the production section, or None; fenced code does not end it."""
    start = next((i for i, line in enumerate(lines) if line.rstrip() == HEADING), None)
    if start is None:
        return None
    fence = ""
    for i in range(start + 1, len(lines)):
        stripped = lines[i].lstrip()
        if fence:
            if stripped.startswith(fence) and not stripped[len(fence) :].strip("`").strip():
                fence = ""
        elif stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif lines[i].startswith("## ") or lines[i].startswith("# "):
            return start, i
    return start, len(lines)


def replace_section(readme: str, section: str) -> str:
    """``readme`` with its production section replaced by ``section`` (appended at the end if absent)."""
    lines = readme.splitlines(keepends=True)
    span = _section_span(lines)
    if span is None:
        body = readme.rstrip("\n")
        return f"{body}\n\n{section}" if body else section
    start, end = span
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")


def sync_readmes(
    recipe: Path | None = None, stages_root: Path = STAGES_ROOT, *, write: bool = True
) -> list[Path]:
    """READMEs whose production section was stale (rewritten when ``write``); raises on a missing README.

    Each stage is rendered from ``recipe``, or by default from the production recipe that names it
    (:func:`~infra.production.plan.recipe_with_stage`: a variant stage from its variant recipe).
    """
    stale = []
    for folder in stage_folders(stages_root):
        readme = folder / "README.md"
        if not readme.is_file():
            raise FileNotFoundError(f"{readme}: stage README missing")
        text = readme.read_text(encoding="utf-8")
        source = recipe or recipe_with_stage(folder.name)
        section = production_section(render_stage_command_text(folder.name, source), source)
        new = replace_section(text, section)
        if new != text:
            stale.append(readme)
            if write:
                readme.write_text(new, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    """CLI: rewrite stale sections (or, with ``--check``, list them and exit 1)."""
    ap = argparse.ArgumentParser(prog="python -m infra.production.readme_sync", description=__doc__)
    ap.add_argument("--recipe", type=Path, default=None, help="default: the recipe that names each stage")
    ap.add_argument("--check", action="store_true", help="report stale READMEs, write nothing")
    args = ap.parse_args(argv)
    stale = sync_readmes(args.recipe, write=not args.check)
    for path in stale:
        print(f"{'stale' if args.check else 'updated'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
