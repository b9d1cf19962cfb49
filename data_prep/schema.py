"""The one role-aware multi-turn schema every SFT source is converted to, and the RL prompt row.

SFT rows (``SFTSample``) carry a per-message loss mask (``loss``: 1 = supervised assistant turn) and tool
calls/results as structured messages, so the chat template (GLM-4.5 markup in production, the same markup
on the embedded micro model) decides the tokens and the mask follows the messages.

RL rows (``PromptRow``) are what every RL stage's data prep writes and what slime reads with
``--input-key prompt --label-key label --metadata-key metadata --tool-key tools``. ``tools`` is always a
list (``[]`` without tools): slime's ``Dataset`` asserts that a present tool key holds a list, and both chat
templates render ``[]`` exactly as no tools.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """One tool call issued by an assistant turn."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class Message(BaseModel):
    """One turn; ``reasoning`` holds an assistant turn's ``<think>`` content, apart from ``content``."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    loss: Literal[0, 1] = Field(default=0, description="1: this assistant turn is supervised.")


class SFTSample(BaseModel):
    """One SFT example after conversion, repair and the interleaved-thinking split."""

    model_config = ConfigDict(extra="forbid")

    id: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="JSON tool schemas shown in the system turn."
    )
    source: str = ""
    category: str = ""
    num_tokens: int | None = Field(default=None, description="Length under the production chat template.")
    long_bucket: bool = Field(
        default=False, description="32K–120K tokens: bucket-sampled with fewer neighbours."
    )


class PromptRow(BaseModel):
    """One RL prompt: chat messages, ground truth and metadata (``metadata.reward`` names the reward)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    prompt: list[dict[str, Any]]
    label: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list, description="JSON tool schemas; [] for none.")

    @field_validator("tools", mode="before")
    @classmethod
    def _none_is_no_tools(cls, v: Any) -> Any:
        return [] if v is None else v
