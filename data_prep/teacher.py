"""A small OpenAI-compatible chat client for teacher solvability screens and LLM judges.

The client lives in :mod:`infra.endpoints` (rewards use it for the IF judge too, and rewards do not import
``data_prep``); this module re-exports it under its historical name for the data-prep modules and tests.
"""

from __future__ import annotations

from infra.endpoints import ChatClient, TeacherError

__all__ = ["ChatClient", "TeacherError"]
