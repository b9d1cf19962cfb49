"""Package-side commands load only when invoked or listed: `rufus run` does not import the agent stack."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import infra.cli as cli
heavy = lambda: sorted({m.split(".")[0] for m in sys.modules} & {"strands", "strands_sglang", "transformers"})
assert heavy() == [], heavy()
cli._mount_subcommands(["run", "recipes/tiny.yaml", "--seed", "1"])
assert cli._mounted == set(), cli._mounted
cli._mount_subcommands(["decontam", "--corpus", "c.jsonl"])
cli._mount_subcommands(["reward", "code", "in.jsonl"])
assert cli._mounted == {"decontam", "code"}, cli._mounted
assert heavy() == [], heavy()
cli._mount_subcommands(["--help"])
assert cli._mounted == {"decontam", "code", "rollout", "validate-tasks"}, cli._mounted
print("ok")
"""


def test_only_the_invoked_command_is_imported():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_importing_app_mounts_every_command():
    from infra.cli import app

    names = {c.name for c in app.registered_commands}
    assert {"decontam", "rollout", "validate-tasks"} <= names
    reward = next(g.typer_instance for g in app.registered_groups if g.name == "reward")
    assert {c.name for c in reward.registered_commands} == {"code"}
