"""Contract tests against a slime checkout: ``RUFUS_SLIME_DIR=/path/to/slime pytest -m slime tests/contract``.

Only slime modules that import on CPU are used (``slime.utils.types``/``data``/``misc``,
``slime.rollout.filter_hub``, ``slime.rollout.data_source``) and ``slime.utils.arguments``'s own argument
groups (its SGLang/sglang_router/wandb imports given as empty stand-ins, never called; Megatron's and SGLang's
flags added from the flag table): see ``test_slime_argparse.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SLIME_DIR = os.environ.get("RUFUS_SLIME_DIR")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test here ``slime``; skip them with the reason when no slime checkout is given."""
    skip = pytest.mark.skip(reason="RUFUS_SLIME_DIR is unset: point it at a slime checkout (624b824a)")
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slime)
            if not SLIME_DIR:
                item.add_marker(skip)


if SLIME_DIR:
    if not (Path(SLIME_DIR) / "slime" / "utils" / "types.py").is_file():
        raise pytest.UsageError(
            f"RUFUS_SLIME_DIR={SLIME_DIR}: not a slime checkout (no slime/utils/types.py)"
        )
    sys.path.insert(0, SLIME_DIR)
