"""Feather's ``todo`` tool: a work plan the model replaces wholesale, kept across context compaction.

The list lives in the harness (one :class:`TodoList` per episode), not in the conversation, so compaction
cannot drop it; :meth:`TodoList.compaction_note` is the text a compactor appends to the compressed context
so the model sees the list in its current state again (the paper: "reattached in its current state").
"""

from __future__ import annotations

from typing import Any

from infra.agents.feather.files import PolicyError

STATUSES = ("pending", "in_progress", "completed")
MAX_ITEMS = 100
MAX_CONTENT_CHARS = 1000


class TodoList:
    """The episode's todo items, each ``{"content": str, "status": pending|in_progress|completed}``."""

    def __init__(self) -> None:
        self.items: list[dict[str, str]] = []
        self.updates = 0

    def replace(self, todos: Any) -> str:
        """Replace the whole list with ``todos`` (validated first: a bad list changes nothing)."""
        if not isinstance(todos, list):
            raise PolicyError("todos must be a list of {content, status} items")
        if len(todos) > MAX_ITEMS:
            raise PolicyError(f"todos has {len(todos)} items; at most {MAX_ITEMS} are kept")
        items = []
        for i, item in enumerate(todos):
            if not isinstance(item, dict):
                raise PolicyError(f"todos[{i}] must be an object with content and status")
            extra = sorted(set(item) - {"content", "status"})
            if extra:
                raise PolicyError(f"todos[{i}] has unknown keys {extra}; items hold content and status")
            content, status = item.get("content"), item.get("status")
            if not isinstance(content, str) or not content.strip():
                raise PolicyError(f"todos[{i}].content must be a non-empty string")
            if len(content) > MAX_CONTENT_CHARS:
                raise PolicyError(f"todos[{i}].content is longer than {MAX_CONTENT_CHARS} characters")
            if status not in STATUSES:
                raise PolicyError(f"todos[{i}].status must be one of {', '.join(STATUSES)}, got {status!r}")
            items.append({"content": content.strip(), "status": status})
        self.items = items
        self.updates += 1
        return self.render()

    def render(self) -> str:
        """The list as the model sees it."""
        if not self.items:
            return "The todo list is empty."
        done = sum(item["status"] == "completed" for item in self.items)
        lines = [f"Todo list ({done}/{len(self.items)} completed):"]
        lines += [f"{i}. [{item['status']}] {item['content']}" for i, item in enumerate(self.items, 1)]
        return "\n".join(lines)

    def compaction_note(self) -> str | None:
        """Text to reattach after compaction (None while the list is empty)."""
        if not self.items:
            return None
        return "Your todo list, as it stands (kept across the compression):\n" + self.render()

    def snapshot(self) -> list[dict[str, str]]:
        """A copy of the items (for transcripts and checkpoints)."""
        return [dict(item) for item in self.items]
