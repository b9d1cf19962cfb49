"""Every stage README shows its current production command, how to run the stage, and its paper section.

The command is rendered from the real ``recipes/rufus-air.yaml``, so a config change that alters it fails
here until ``python -m infra.production.readme_sync`` refreshes the READMEs.
"""

from __future__ import annotations

import pytest
import yaml

from infra.production.plan import render_stage_command_text
from infra.production.readme_sync import HEADING, production_section, replace_section, stage_folders

FOLDERS = stage_folders()
SYNC = "python -m infra.production.readme_sync"


def test_stage_folders_exist():
    assert [f.name for f in FOLDERS][:4] == ["00_sft", "01_reasoning_rl", "02_coding_rl", "03_if_rl"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_readme_shows_rendered_command(folder):
    readme = (folder / "README.md").read_text(encoding="utf-8")
    command = render_stage_command_text(folder.name)
    assert HEADING in readme and command in readme, (
        f"{folder / 'README.md'}: the '{HEADING}' section is not the current rendered command; run `{SYNC}`"
    )
    assert f"rufus stage stages/{folder.name}" in readme, f"{folder / 'README.md'}: no `rufus stage` command"
    section = yaml.safe_load((folder / "launch.yaml").read_text(encoding="utf-8"))["paper"]["section"]
    assert f"§{section}" in readme, f"{folder / 'README.md'}: paper section §{section} not cited"


def test_replace_section_keeps_the_rest_and_is_idempotent():
    head = "# 09 · Example\n\nIntro.\n\n## Run it alone\n\n```bash\n## not a heading\n```\n"
    first = replace_section(head, production_section("echo one\n"))
    assert first.startswith(head) and first.endswith("```bash\necho one\n```\n")
    assert replace_section(first, production_section("echo one\n")) == first
    later = first + "\n## Notes\n\nKept.\n"
    second = replace_section(later, production_section("# step\necho two\n## inside\n"))
    assert second.startswith(head) and second.endswith("\n## Notes\n\nKept.\n")
    assert "echo one" not in second and "echo two\n## inside\n```" in second
    assert second.count(HEADING) == 1
    fenced = production_section("cat <<EOF\n```\nEOF\n")
    assert "````bash\n" in fenced and replace_section(replace_section(head, fenced), fenced).count("EOF") == 2
