"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from letter_stage import write_letter_stage


@pytest.fixture(scope="session")
def letter_stage(tmp_path_factory) -> Path:
    """The letter-game stage folder (``tests/letter_stage.py``), written once per test session."""
    return write_letter_stage(tmp_path_factory.mktemp("stage-folder"))
