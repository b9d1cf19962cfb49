"""Run one agent episode on Strands Agents, token-in/token-out against an SGLang-style ``/generate``.

The pieces are library ones: a Strands ``Agent`` (``NullConversationManager`` so no history is dropped,
``SequentialToolExecutor`` so tools run in model order), strands-sglang's ``SGLangModel`` (sends prompt
token ids, records sampled ids + logprobs and a loss mask; later turns tokenize only the new messages)
and its ``ToolLimiter`` (tool-call and iteration budgets, raised at a message boundary). Added here:

* :class:`TrajectoryModel` extends ``SGLangModel`` for templates without an end-of-turn token (GLM): the
  model ends a turn by sampling the next role marker (``<|observation|>``, ``<|user|>``); the template
  renders that marker again at the start of the next segment, so the duplicate is dropped and the
  sampled token stays the only copy. It also clamps each call to the trajectory's token budget.
* :class:`BudgetedClient` records each call (``metrics["calls"]``) with the index of the context it
  sampled in (``context``; ``metrics["last_context"]`` is the one the trajectory holds) and, with
  ``ModelEndpoint.top_logprobs_num: k`` (FireFlash score centering), asks SGLang for the top-k log-probs
  of every sampled token and keeps ``meta_info.output_top_logprobs`` in the record.
* :class:`ContinuationHook` resumes the invocation with a simulated-user reply (``AfterInvocationEvent
  .resume``), so a multi-turn dialogue is one episode and one token trajectory.
* :mod:`infra.agents.compression` summarises and restarts the context at a fraction of the window when
  the environment asks for it (``env.compression``; off otherwise); :mod:`infra.agents.context_scratchpad`
  instead keeps a scratchpad and only the current step (``env.scratchpad``, App. E's evaluation strategy;
  off otherwise).
* :func:`run_episode` maps how the loop ended to a typed :class:`Termination`, scores the episode with
  the environment's verifier (never when infrastructure failed) and returns a :class:`RolloutResult`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.hooks import HookProvider, HookRegistry
from strands.hooks.events import AfterInvocationEvent
from strands.tools.executors import SequentialToolExecutor
from strands_sglang import SGLangClient, SGLangModel, ToolLimiter
from transformers import PreTrainedTokenizerBase

from infra.agents.compression import compressor_for
from infra.agents.context_scratchpad import scratchpad_for
from infra.agents.contract import (
    AgentTask,
    ContextBudgetExceeded,
    RolloutResult,
    Termination,
    termination_from_error,
)
from infra.agents.envs.base import AgentEnvironment, SimulatedUser
from infra.agents.tool_parsing import StrictGLMToolParser
from infra.agents.tools import ToolLayer
from rewards.contract import RewardRequest, RewardResult

STOP_MARKERS = ("<|endoftext|>", "<|user|>", "<|observation|>")


@dataclass
class ModelEndpoint:
    """Where and how to sample: a ``/generate`` server, its tokenizer and sampling settings."""

    base_url: str
    tokenizer: PreTrainedTokenizerBase
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_retries: int = 2
    retry_delay: float = 0.5
    timeout: float | None = 600.0
    extra_sampling: dict[str, Any] = field(default_factory=dict)
    top_logprobs_num: int | None = None  # ask for each sampled token's top-k log-probs (score centering)
    _stop_ids: list[int] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        k = self.top_logprobs_num
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"ModelEndpoint top_logprobs_num={k!r}: expected an int >= 1 or None")

    def stop_token_ids(self) -> list[int]:
        """Return the ids of the GLM turn-ending tokens the tokenizer has (looked up once per endpoint)."""
        if self._stop_ids is None:  # get_vocab copies the whole vocabulary: not once per model call
            vocab = self.tokenizer.get_vocab()
            self._stop_ids = [vocab[t] for t in STOP_MARKERS if t in vocab]
        return list(self._stop_ids)


class BudgetedClient:
    """Per-episode view of an ``SGLangClient`` that enforces the trajectory's total token budget.

    Each call's ``max_new_tokens`` is cut to what is left of ``max_context_tokens``; a prompt that
    leaves no room raises :class:`ContextBudgetExceeded` before anything is sent. It also records
    what each call sent and received (lengths, finish reason, the index of the model's context: a new
    one each time compression gives ``model`` a fresh ``rollout``) for the episode's metrics. With
    ``top_logprobs_num`` every request carries ``return_logprob`` and ``top_logprobs_num`` (top-level
    fields of SGLang's ``/generate``, which ``SGLangModel`` cannot pass) and the record keeps
    ``output_top_logprobs`` (per output token, ``[logprob, token_id, text]`` entries; None when the
    server sent none).
    """

    def __init__(
        self,
        client: SGLangClient,
        max_context_tokens: int,
        seed: int | None,
        top_logprobs_num: int | None = None,
    ) -> None:
        self.client = client
        self.max_context_tokens = max_context_tokens
        self.seed = seed
        self.top_logprobs_num = top_logprobs_num
        self.model: SGLangModel | None = None  # set once the model exists (it is built on this client)
        self.calls: list[dict[str, Any]] = []
        self.last_clamped = False
        self._contexts = 0
        self._rollout: Any = None

    def context(self) -> int:
        """Return the index of the model's current context (its ``rollout`` object), counting from 0."""
        rollout = None if self.model is None else self.model.rollout
        if self._contexts == 0 or rollout is not self._rollout:
            self._contexts += 1
            self._rollout = rollout
        return self._contexts - 1

    async def is_multimodal(self) -> bool:
        """Text-only: the embedded and GLM text backends take no images."""
        return False

    async def generate(self, input_ids: list[int], **kwargs: Any) -> dict[str, Any]:
        """Send one ``/generate`` request within the remaining token budget."""
        room = self.max_context_tokens - len(input_ids)
        if room <= 0:
            raise ContextBudgetExceeded(
                f"prompt of {len(input_ids)} tokens leaves no room in {self.max_context_tokens}"
            )
        params = dict(kwargs.get("sampling_params") or {})
        wanted = int(params.get("max_new_tokens", room))
        params["max_new_tokens"] = min(wanted, room)
        self.last_clamped = room < wanted
        if self.seed is not None:
            params["sampling_seed"] = self.seed * 1009 + len(self.calls)
        kwargs["sampling_params"] = params
        if self.top_logprobs_num is not None:
            kwargs["return_logprob"] = True
            kwargs["top_logprobs_num"] = self.top_logprobs_num
        context = self.context()
        response = await self.client.generate(input_ids=input_ids, **kwargs)
        meta = response.get("meta_info", {})
        record = {
            "input_tokens": len(input_ids),
            "output_tokens": len(response.get("output_ids", [])),
            "finish_reason": (meta.get("finish_reason") or {}).get("type"),
            "context": context,
        }
        if self.top_logprobs_num is not None:
            record["output_top_logprobs"] = meta.get("output_top_logprobs")
        self.calls.append(record)
        return response


class TrajectoryModel(SGLangModel):
    """``SGLangModel`` that never duplicates a sampled turn-ending role marker in the next prompt segment."""

    def __init__(self, *, stop_token_ids: list[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stop_token_ids = set(stop_token_ids)
        self.dropped_markers = 0

    def tokenize_prompt_messages(
        self, messages: Any, system_prompt: Any, tool_specs: Any = None, **kw: Any
    ) -> list[int]:
        """Tokenize the new messages; drop a leading marker the model already sampled as its last token."""
        new_ids = super().tokenize_prompt_messages(messages, system_prompt, tool_specs, **kw)
        rollout = self.rollout
        if (
            self.processed_messages > 0
            and rollout.segment_info
            and rollout.segment_info[-1][0]
            and new_ids
            and new_ids[0] == rollout.token_ids[-1]
            and new_ids[0] in self.stop_token_ids
        ):
            self.dropped_markers += 1
            return new_ids[1:]
        return new_ids


class ContinuationHook(HookProvider):
    """Resume the agent with the simulated user's reply each time the model ends its turn."""

    def __init__(self, user: SimulatedUser | None) -> None:
        self.user = user
        self.continuations = 0

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register on ``AfterInvocationEvent``."""
        registry.add_callback(AfterInvocationEvent, self._after)

    def _after(self, event: AfterInvocationEvent) -> None:
        if self.user is None or event.result is None or event.result.stop_reason != "end_turn":
            return
        reply = self.user.reply(transcript_of(event.agent.messages))
        if reply is not None:
            self.continuations += 1
            event.resume = reply


def _text_of(content: list[dict[str, Any]]) -> str:
    return "".join(str(block["text"]) for block in content if "text" in block)


def transcript_of(messages: list[dict[str, Any]], system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Return a readable transcript (role/content/tool_calls) of Strands messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for msg in messages:
        content = msg["content"]
        results = [c["toolResult"] for c in content if "toolResult" in c]
        if results:
            for r in results:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": r["toolUseId"],
                        "status": r.get("status"),
                        "content": _text_of(r["content"]),
                    }
                )
            continue
        entry: dict[str, Any] = {"role": msg["role"], "content": _text_of(content)}
        calls = [c["toolUse"] for c in content if "toolUse" in c]
        if calls:
            entry["tool_calls"] = [
                {"id": c["toolUseId"], "name": c["name"], "input": c["input"]} for c in calls
            ]
        out.append(entry)
    return out


def final_answer_text(transcript: list[dict[str, Any]]) -> str:
    """Return the last assistant turn's visible text (reasoning removed), or '' when there is none."""
    for entry in reversed(transcript):
        if entry["role"] == "assistant":
            text = entry["content"]
            return text.rsplit("</think>", 1)[-1].strip()
    return ""


def _split_messages(task: AgentTask) -> tuple[str | None, list[dict[str, Any]], str]:
    system = "\n\n".join(m["content"] for m in task.messages if m["role"] == "system") or None
    turns = [m for m in task.messages if m["role"] != "system"]
    history = [{"role": m["role"], "content": [{"text": m["content"]}]} for m in turns[:-1]]
    return system, history, turns[-1]["content"]


def _score(
    env: AgentEnvironment, task: AgentTask, transcript: list[dict[str, Any]], termination: Termination
) -> RewardResult:
    """Score the episode; the reward sees how it ended (``metadata["termination"]``, e.g. a budget stop)."""
    from rewards.contract import safe_score

    request = RewardRequest(
        prompt=[dict(m) for m in task.messages],
        response=final_answer_text(transcript),
        label=task.ground_truth,
        metadata={**task.metadata, "termination": termination.value},
        transcript=transcript,
    )
    return safe_score(lambda req: env.score(task, req), request)


async def run_episode(env: AgentEnvironment, task: AgentTask, endpoint: ModelEndpoint) -> RolloutResult:
    """Run ``task`` in ``env`` against ``endpoint`` and return the scored, token-faithful result."""
    limits = task.limits
    started = time.perf_counter()
    client = SGLangClient(
        endpoint.base_url,
        timeout=endpoint.timeout,
        max_retries=endpoint.max_retries,
        retry_delay=endpoint.retry_delay,
    )
    budget = BudgetedClient(client, limits.max_context_tokens, endpoint.seed, endpoint.top_logprobs_num)
    parser = StrictGLMToolParser()
    sampling = {
        "max_new_tokens": limits.max_new_tokens,
        "temperature": endpoint.temperature,
        "top_p": endpoint.top_p,
        "stop_token_ids": endpoint.stop_token_ids(),
        "no_stop_trim": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        **endpoint.extra_sampling,
    }
    model = TrajectoryModel(
        client=budget,  # type: ignore[arg-type]  # duck-typed: generate() and is_multimodal()
        tokenizer=endpoint.tokenizer,
        tool_parser=parser,
        sampling_params=sampling,
        stop_token_ids=endpoint.stop_token_ids(),
    )
    budget.model = model
    tool_layer = ToolLayer(endpoint.tokenizer, limits, parser.malformed)
    limiter = ToolLimiter(max_tool_iters=limits.max_iterations, max_tool_calls=limits.max_tool_calls)
    continuation = ContinuationHook(env.simulated_user(task))
    system, history, prompt = _split_messages(task)
    compressor = compressor_for(env, model, len(history) + 1, limits.max_context_tokens)
    scratchpad = scratchpad_for(env, model, len(history) + 1, limits.max_context_tokens)
    manager = compressor or scratchpad  # the context manager (scratchpad_for refuses both at once)
    error: BaseException | None = None
    try:
        await env.reset(task)
        tools = env.tools()
        if task.tools is not None:
            tools = [t for t in tools if t.tool_name in set(task.tools)]
        agent = Agent(
            model=model,
            messages=list(history),  # Strands mutates the list it is given
            tools=tools,
            system_prompt=system or env.system_prompt,
            hooks=[tool_layer, limiter, continuation, *env.hooks(), *([manager] if manager else [])],
            conversation_manager=NullConversationManager(),
            tool_executor=SequentialToolExecutor(),
            callback_handler=None,
            retry_strategy=None,
        )
        try:
            await agent.invoke_async(prompt)
        except Exception as exc:  # noqa: BLE001 - every way the loop ends becomes a typed termination
            error = exc
        messages = (manager.conversation(agent.messages) if manager else list(agent.messages))[len(history) :]
        termination = termination_from_error(error, context_clamped=budget.last_clamped)
        transcript = transcript_of(messages, system or env.system_prompt)
        if termination.is_infrastructure_failure:
            reward_result = None
        else:
            # verifiers block (a sandboxed process per call): off the event loop, so the others go on
            reward_result = await asyncio.to_thread(_score, env, task, transcript, termination)
            if reward_result.aborted:
                termination = Termination.ABORTED
    except Exception as exc:  # noqa: BLE001 - env reset/tools failing is an infrastructure abort
        error, termination, reward_result, transcript = exc, Termination.ABORTED, None, []
    finally:
        await env.cleanup()
        await client.close()
    result = _build_result(
        task,
        model,
        budget,
        termination,
        error,
        reward_result,
        transcript,
        tool_layer,
        limiter,
        continuation,
        started,
    )
    if compressor is not None:
        result.metrics["compressions"] = compressor.compressions
    if scratchpad is not None:
        result.metrics["scratchpad"] = scratchpad.metrics()
    return result


def _build_result(
    task: AgentTask,
    model: TrajectoryModel,
    budget: BudgetedClient,
    termination: Termination,
    error: BaseException | None,
    reward_result: RewardResult | None,
    transcript: list[dict[str, Any]],
    tool_layer: ToolLayer,
    limiter: ToolLimiter,
    continuation: ContinuationHook,
    started: float,
) -> RolloutResult:
    rollout = model.rollout
    n_prompt = rollout.initial_prompt_length
    logprobs = [
        0.0 if lp is None or not mask else float(lp)
        for lp, mask in zip(rollout.logprobs, rollout.loss_mask, strict=True)
    ]
    metrics = {
        "model_calls": len(budget.calls),
        "calls": budget.calls,
        "last_context": budget.context(),  # the calls whose ``context`` is this sampled the trajectory
        "tool_calls": limiter.tool_call_count,
        "tool_iterations": limiter.tool_iter_count,
        "continuations": continuation.continuations,
        "dropped_duplicate_markers": model.dropped_markers,
        "seconds": round(time.perf_counter() - started, 3),
        **tool_layer.metrics(),
    }
    return RolloutResult(
        task_id=task.id,
        prompt_ids=list(rollout.token_ids[:n_prompt]),
        response_ids=list(rollout.token_ids[n_prompt:]),
        rollout_logprobs=logprobs[n_prompt:],
        loss_mask=list(rollout.loss_mask[n_prompt:]),
        reward=None if reward_result is None else reward_result.score,
        reward_details={} if reward_result is None else reward_result.model_dump(exclude={"details"}),
        termination=termination,
        error=None if error is None else f"{type(error).__name__}: {error}",
        transcript=transcript,
        segments=list(rollout.segment_info[1:]),
        metrics=metrics,
    )
