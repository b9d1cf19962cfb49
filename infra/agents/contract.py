"""The agent rollout contract: a task goes in, a token-faithful :class:`RolloutResult` comes out.

Every agent environment (calculator, code execution, MCP servers, web tools, document workspaces) speaks
this contract, so the production slime adapter, the embedded trainer and the debugging CLI consume one
shape: prompt ids, response ids, per-token rollout logprobs, a loss mask (1 on sampled model tokens, 0 on
tool/environment/user tokens), the reward, a typed :class:`Termination` and a readable transcript.

The exception classes below are how tools, hooks and the model provider signal *why* an episode stops;
:func:`termination_from_error` maps any exception raised out of the Strands loop to a termination reason.
Its walk over Strands' ``EventLoopException`` wrappers and the strands-sglang limit errors reuses
``strands_env.TerminationReason.from_error``; the extra categories (infrastructure abort, tool error,
model error) are ours because strands-env folds them into one "unclassified" bucket.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Termination(str, enum.Enum):
    """Why an episode ended."""

    FINAL_ANSWER = "final_answer"  # the model stopped on its own and no simulated user continued
    TOOL_BUDGET = "tool_budget"  # max tool calls reached
    ITERATION_BUDGET = "iteration_budget"  # max tool iterations (model turns that called tools) reached
    MAX_TOKENS = "max_tokens"  # one generation hit its max_new_tokens
    CONTEXT_OVERFLOW = "context_overflow"  # the trajectory hit its total token budget / model context
    MODEL_ERROR = "model_error"  # the backend answered unusably, or the loop failed unclassified
    TOOL_ERROR = "tool_error"  # too many failed or malformed tool calls (the policy's fault)
    ABORTED = "aborted"  # infrastructure failure: drop the sample, never score it 0

    @property
    def is_infrastructure_failure(self) -> bool:
        """True when the episode says nothing about the policy and must not be scored."""
        return self in (Termination.ABORTED, Termination.MODEL_ERROR)

    @property
    def is_truncation(self) -> bool:
        """True when a budget cut the episode short."""
        return self in (
            Termination.TOOL_BUDGET,
            Termination.ITERATION_BUDGET,
            Termination.MAX_TOKENS,
            Termination.CONTEXT_OVERFLOW,
        )


class ToolNotStartedError(RuntimeError):
    """Raised by a tool when it provably never began executing (e.g. its sandbox refused the connection).

    Only this error is retried: a call that may have had side effects is never run twice.
    """


class EnvironmentFailure(RuntimeError):
    """Raised by a tool when the environment itself broke (sandbox died, server 5xx): the episode aborts."""


class EpisodeAborted(RuntimeError):
    """Raised inside the loop to stop an episode whose environment failed."""


class ToolErrorBudgetExceeded(RuntimeError):
    """Raised inside the loop when the policy produced more failed/malformed tool calls than allowed."""


class ContextBudgetExceeded(RuntimeError):
    """Raised when the next model call would exceed the trajectory's total token budget."""


class EpisodeLimits(BaseModel):
    """Budgets of one episode; ``None`` means unlimited."""

    model_config = ConfigDict(extra="forbid")

    max_tool_calls: int | None = Field(default=16, ge=1, description="Tool calls before tool_budget.")
    max_iterations: int | None = Field(
        default=8, ge=1, description="Model turns that call tools before iteration_budget."
    )
    max_new_tokens: int = Field(default=256, ge=1, description="Generation cap of each model call.")
    max_context_tokens: int = Field(
        default=4096, ge=16, description="Total trajectory tokens (prompt+response)."
    )
    tool_result_max_tokens: int = Field(default=256, ge=8, description="Tool results are truncated to this.")
    max_tool_errors: int | None = Field(
        default=4, ge=0, description="Failed or malformed tool calls tolerated before tool_error."
    )
    max_tool_retries: int = Field(
        default=2, ge=0, description="Retries of a call that provably never started."
    )


class AgentTask(BaseModel):
    """One episode's input: initial messages, the tools to expose, ground truth, limits, user follow-ups."""

    model_config = ConfigDict(extra="forbid")

    id: str
    messages: list[dict[str, Any]] = Field(
        description="Chat messages; the last one is the user turn to answer."
    )
    tools: list[str] | None = Field(default=None, description="Names of env tools to expose (None = all).")
    ground_truth: Any = None
    limits: EpisodeLimits = Field(default_factory=EpisodeLimits)
    user_turns: list[str] = Field(
        default_factory=list, description="Simulated-user replies sent, in order, each time the model stops."
    )
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _last_is_user(self) -> AgentTask:
        if not self.messages or self.messages[-1].get("role") != "user":
            raise ValueError(f"task {self.id!r}: 'messages' must end with a user message")
        for i, m in enumerate(self.messages):
            if m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str):
                raise ValueError(
                    f"task {self.id!r}: messages[{i}] needs role system/user/assistant and str content"
                )
        return self


class RolloutResult(BaseModel):
    """A finished episode: token trajectory with mask and logprobs, reward, termination, transcript."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float] = Field(description="One per response token; 0.0 on non-model tokens.")
    loss_mask: list[int] = Field(description="One per response token: 1 sampled by the model, 0 otherwise.")
    reward: float | None = Field(description="None when the episode was not scored (infrastructure failure).")
    reward_details: dict[str, Any] = Field(default_factory=dict)
    termination: Termination
    error: str | None = None
    transcript: list[dict[str, Any]] = Field(default_factory=list)
    segments: list[tuple[bool, int]] = Field(
        default_factory=list, description="(is_model_output, length) of each response segment, in order."
    )
    metrics: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> RolloutResult:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.rollout_logprobs) != n:
            raise ValueError(
                f"task {self.task_id!r}: response_ids ({n}), loss_mask ({len(self.loss_mask)}) and "
                f"rollout_logprobs ({len(self.rollout_logprobs)}) must have equal length"
            )
        if sum(length for _, length in self.segments) != n and self.segments:
            raise ValueError(f"task {self.task_id!r}: segments do not cover the response")
        return self

    @property
    def tokens(self) -> list[int]:
        """Prompt followed by response ids: exactly the token sequence the model saw and produced."""
        return self.prompt_ids + self.response_ids

    @property
    def response_length(self) -> int:
        """Number of response tokens (model and environment tokens after the initial prompt)."""
        return len(self.response_ids)

    def to_record(self) -> dict[str, Any]:
        """Return the JSON-lines record the ``rufus rollout`` CLI writes for this episode."""
        return {
            "task_id": self.task_id,
            "tokens": self.tokens,
            "prompt_length": len(self.prompt_ids),
            "response_length": self.response_length,
            "loss_mask": self.loss_mask,
            "rollout_logprobs": self.rollout_logprobs,
            "reward": self.reward,
            "reward_details": self.reward_details,
            "termination": self.termination.value,
            "error": self.error,
            "transcript": self.transcript,
            "metrics": self.metrics,
        }


def _cause_chain(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    exc: BaseException | None = error
    while exc is not None and id(exc) not in seen:
        chain.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return chain


def termination_from_error(error: BaseException | None, *, context_clamped: bool = False) -> Termination:
    """Map an exception raised out of the agent loop (or None) to a :class:`Termination`.

    ``context_clamped`` says that the last generation was cut to fit the trajectory budget, so a
    max-tokens stop there is a context overflow rather than a per-call limit.
    """
    if error is None:
        return Termination.FINAL_ANSWER
    from strands_env.core.types import TerminationReason
    from strands_sglang import SGLangConnectionError, SGLangDecodingError, SGLangHTTPError

    chain = _cause_chain(error)
    for exc in chain:
        if isinstance(exc, (EpisodeAborted, EnvironmentFailure, SGLangConnectionError)):
            return Termination.ABORTED
        if isinstance(exc, ToolErrorBudgetExceeded):
            return Termination.TOOL_ERROR
        if isinstance(exc, ContextBudgetExceeded):
            return Termination.CONTEXT_OVERFLOW
        if isinstance(exc, (SGLangDecodingError, SGLangHTTPError)) and not isinstance(
            exc, SGLangConnectionError
        ):
            if getattr(exc, "status", None) in (502, 503, 504):
                return Termination.ABORTED
            if "context length" not in str(exc).lower():
                return Termination.MODEL_ERROR
    reason = TerminationReason.from_error(error if isinstance(error, Exception) else Exception(str(error)))
    mapped = {
        TerminationReason.MAX_TOKENS_REACHED: Termination.MAX_TOKENS,
        TerminationReason.CONTEXT_WINDOW_OVERFLOW: Termination.CONTEXT_OVERFLOW,
        TerminationReason.MAX_TOOL_ITERATIONS_REACHED: Termination.ITERATION_BUDGET,
        TerminationReason.MAX_TOOL_CALLS_REACHED: Termination.TOOL_BUDGET,
        TerminationReason.TIMEOUT: Termination.ABORTED,
        TerminationReason.CONNECTION_ERROR: Termination.ABORTED,
    }.get(reason, Termination.MODEL_ERROR)
    if mapped is Termination.MAX_TOKENS and context_clamped:
        return Termination.CONTEXT_OVERFLOW
    return mapped
