"""Every rendered ``train.py`` argv parses with slime's own argument groups.

``slime.utils.arguments`` imports SGLang, sglang_router and wandb at module level, but
``get_slime_extra_args_provider()`` (every slime ``add_*_arguments`` group) touches none of them when it
builds its argparse groups. So those three packages are given as empty stand-in modules for the import
only; what is checked is slime's own code: its groups (with their types, choices and ``reset_arg``s) on a
plain ``argparse.ArgumentParser``. Megatron's and SGLang's own flags, which slime adds from their parsers
at run time, come from our flag table (``infra/production/data/slime-cli-flags.tsv``, built from those
parsers); values of those flags are checked by ``flags.check_argv`` (``rufus plan --check``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from pathlib import Path

from infra.production.flags import NO_VALUE_KINDS, load_flags
from infra.production.plan import render_plan
from infra.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
STANDIN = ("sglang", "sglang_router", "wandb")


class _Empty(types.ModuleType):
    """A module whose every attribute is a fresh empty class (only imported, never called)."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, name: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if any(name == p or name.startswith(p + ".") for p in STANDIN):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Empty(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def slime_parser() -> argparse.ArgumentParser:
    """slime's own argument groups, then the table's Megatron/SGLang flags slime adds from their parsers."""
    finder = _StandIns()
    real = [m for m in STANDIN if m in sys.modules]
    sys.meta_path.insert(0, finder)
    try:
        arguments = importlib.import_module("slime.utils.arguments")
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] in STANDIN and n.split(".")[0] not in real]:
            del sys.modules[name]
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    arguments.get_slime_extra_args_provider()(parser)
    assert len(parser._actions) > 200  # slime's own groups were built
    known = set(parser._option_string_actions)
    for spec in load_flags().values():
        if spec.flag in known:
            continue
        if spec.action in NO_VALUE_KINDS or not spec.takes_value:
            parser.add_argument(spec.flag, dest=spec.dest, action="store_true")
        else:
            nargs = int(spec.nargs) if spec.nargs and spec.nargs.isdigit() else spec.nargs
            parser.add_argument(spec.flag, dest=spec.dest, nargs=nargs)
    return parser


def test_every_rendered_train_argv_parses_with_slimes_own_groups():
    parser = slime_parser()
    plans = render_plan(load_recipe(REPO / "recipes" / "rufus-air.yaml", profile="production"))
    checked = 0
    for plan in plans:
        for train in plan.trains:
            argv = train.argv[train.argv.index("train.py") + 1 :] if "train.py" in train.argv else train.argv
            flags = [a for a in argv if a.startswith("--")]
            ns = parser.parse_args(argv)  # unknown flags, slime's types and choices raise
            assert ns is not None and flags
            checked += 1
    assert checked >= 4
    for bad in (
        ["--rollout-batchsize", "4"],
        ["--advantage-estimator", "gspoo"],
        ["--rollout-batch-size", "x"],
    ):
        try:
            parser.parse_args(bad)
        except (argparse.ArgumentError, SystemExit):
            continue
        raise AssertionError(f"slime's parser accepted {bad}")
