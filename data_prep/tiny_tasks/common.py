"""The task record every tiny generator returns, deterministic seeding, and the SFT rendering of a task.

A :class:`TinyTask` is one prompt with its ground truth *and* a reference solution (a short ``<think>``
rationale plus the final answer in the family's convention), so one record serves three uses: an RL
prompt row (:meth:`TinyTask.prompt_row`), an SFT conversation (:meth:`TinyTask.sft_sample`) and the
"reference solution passes" self-check (:meth:`TinyTask.response` scored by the row's own reward).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from data_prep.schema import Message, PromptRow, SFTSample

SPLITS = ("train", "heldout")


def rng_for(*parts: object) -> random.Random:
    """Return a ``random.Random`` seeded from ``parts`` (stable across runs and Python versions)."""
    return random.Random(int(hashlib.sha256(repr(parts).encode()).hexdigest()[:16], 16))


def int_seed(*parts: object) -> int:
    """Return a 31-bit integer seed derived from ``parts``."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def check_split(split: str) -> None:
    """Raise ValueError unless ``split`` is 'train' or 'heldout'."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


@dataclass
class TinyTask:
    """One generated task: prompt messages, label, metadata and the reference solution."""

    id: str
    prompt: list[dict[str, Any]]
    label: Any
    metadata: dict[str, Any]
    reasoning: str
    answer: str
    tools: list[dict[str, Any]] | None = field(default=None)

    def response(self) -> str:
        """Return the reference response exactly as the policy would generate it."""
        return f"<think>{self.reasoning}</think>\n{self.answer}"

    def prompt_row(self, **metadata: Any) -> PromptRow:
        """Return the RL prompt row (``metadata`` entries are added to the task's)."""
        return PromptRow(
            id=self.id, prompt=self.prompt, label=self.label, metadata={**self.metadata, **metadata}
        )

    def sft_sample(self) -> SFTSample:
        """Return the task with its reference solution as a supervised conversation.

        Earlier turns are context (loss 0); the final assistant turn carries the short rationale as
        ``reasoning`` and the answer as ``content`` (loss 1).
        """
        messages = [Message(role=m["role"], content=m.get("content", ""), loss=0) for m in self.prompt]
        messages.append(Message(role="assistant", content=self.answer, reasoning=self.reasoning, loss=1))
        return SFTSample(
            id=f"sft-{self.id}",
            messages=messages,
            tools=self.tools,
            source="tiny_tasks",
            category=str(self.metadata.get("category", self.metadata.get("family", ""))),
        )


def user(content: str) -> list[dict[str, Any]]:
    """Return a one-turn prompt."""
    return [{"role": "user", "content": content}]
