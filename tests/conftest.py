"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from letter_stage import write_letter_stage

import infra  # noqa: F401 - sets MKL_CBWR before the first GEMM of the session (infra/__init__.py)


@pytest.fixture(scope="session")
def letter_stage(tmp_path_factory) -> Path:
    """The letter-game stage folder (``tests/letter_stage.py``), written once per test session."""
    return write_letter_stage(tmp_path_factory.mktemp("stage-folder"))


@pytest.fixture(scope="session")
def sandbox_ok() -> None:
    """Skip without root (the sandbox cannot set itself up); fail when root cannot isolate either."""
    from infra.sandbox import check_isolation

    report = check_isolation()
    if not report.ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root: " + "; ".join(report.problems))
        pytest.fail("sandbox isolation unavailable: " + "; ".join(report.problems))
