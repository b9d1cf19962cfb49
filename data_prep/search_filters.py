"""The two filter passes of Search Agent RL's data (paper §3.7), run on the initial policy.

* **tool-free pass** (:func:`tool_free_pass`): ``n`` answers per question with tools disabled (the question
  alone under :data:`TOOL_FREE_SYSTEM`), each graded by :func:`rewards.search_agent.grade_answer` with the
  training judge (the final ``<answer>`` only: there are no tools to gate on). A question solved in any of
  them is dropped (``filters.search_agent_prepass``): it is answerable from parametric knowledge, and
  training on it would reward tool-free shortcuts. RA: roughly a quarter of 36,614 candidates.
* **tool pass** (:func:`tool_pass`): ``n`` episodes per question in the search environment, played by an
  :data:`data_prep.agent_filters.EpisodeRunner` (``EndpointRunner`` on an SGLang server in production) and
  scored by the environment's reward (``search_judge`` with the training judge); keep 0 < correct < 4
  (``filters.search_agent_band``). RA: 15.5% never and 31.4% always solved; ~2.2K questions kept.

"Correct" is a full-credit verdict (``RewardResult.passed``): partial credit does not count. Aborted samples
(judge unavailable, a dropped connection) leave the count; a question with none scored is dropped as
``aborted``. Each pass is one manifest step with its counts and a ``passes/scored`` histogram.

What ``data_prep.filters`` and ``data_prep.agent_filters`` lack for the tool-free pass is here: the tool-free
prompt and a chat endpoint sampled with many questions in flight (``ChatClient.as_generate`` asks one prompt
at a time; 36K questions × 8 samples need concurrency), where a question whose requests fail after the
client's retries gets no samples (so it is dropped as ``aborted``) instead of ending the run.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep import filters
from data_prep.agent_filters import EpisodeRunner, PassCount
from data_prep.manifest import Manifest
from data_prep.schema import PromptRow
from rewards.contract import RewardFn

TOOL_FREE_SYSTEM = (
    "Answer the question from your own knowledge: you have no tools and cannot search. Think it through, "
    "then give your final answer as <answer>...</answer>."
)


class ChatPolicy(BaseModel):
    """The initial policy behind an OpenAI-compatible chat endpoint (SGLang's ``/v1``): the tool-free pass."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://policy:30000/v1.")
    model: str = Field(description="Served model name.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    temperature: float = Field(1.0, ge=0.0)
    max_tokens: int = Field(32768, ge=1, description="Tokens per answer (the stage's per-turn budget).")
    concurrency: int = Field(32, ge=1, description="Questions in flight at once.")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout.")


def tool_free_prompt(question: str) -> list[dict[str, str]]:
    """The messages of one tool-free rollout: :data:`TOOL_FREE_SYSTEM`, then the question."""
    return [{"role": "system", "content": TOOL_FREE_SYSTEM}, {"role": "user", "content": question}]


def question_of(row: PromptRow) -> str:
    """The row's question: ``metadata["question"]``, else its last user message."""
    question = row.metadata.get("question")
    if isinstance(question, str) and question.strip():
        return question
    users = [
        m["content"] for m in row.prompt if m.get("role") == "user" and isinstance(m.get("content"), str)
    ]
    if not users:
        raise ValueError(f"row {row.id!r}: no question (metadata.question or a user message)")
    return users[-1]


class ChatSampler:
    """``generate(prompts, n) -> list[list[str]]`` on a :class:`ChatPolicy`, ``concurrency`` prompts at once.

    A prompt whose request still fails after the client's retries gets ``[]`` and its error is kept in
    :attr:`errors` (``(prompt index, message)``); ``client`` replaces the HTTP client (tests).
    """

    def __init__(self, policy: ChatPolicy, client: Any = None) -> None:
        from infra.endpoints import ChatClient

        key = os.environ.get(policy.api_key_env) if policy.api_key_env else None
        self.policy = policy
        self.client = client or ChatClient(
            policy.base_url, policy.model, api_key=key, timeout=policy.timeout_s
        )
        self.errors: list[tuple[int, str]] = []

    def _one(self, index: int, prompt: list[dict], n: int) -> list[str]:
        try:
            return list(
                self.client.chat(
                    prompt, n=n, temperature=self.policy.temperature, max_tokens=self.policy.max_tokens
                )
            )
        except Exception as exc:  # noqa: BLE001 - one unreachable question must not end a 36K-question pass
            self.errors.append((index, f"{type(exc).__name__}: {str(exc)[:200]}"))
            return []

    def __call__(self, prompts: list[list[dict]], n: int) -> list[list[str]]:
        """Return ``n`` completions per prompt, in order."""
        with ThreadPoolExecutor(max_workers=self.policy.concurrency) as pool:
            futures = [pool.submit(self._one, i, p, n) for i, p in enumerate(prompts)]
            return [f.result() for f in futures]


def _histogram(counts: dict[str, tuple[int, int]]) -> dict[str, int]:
    hist = Counter(f"{p}/{s}" for p, s in counts.values())
    return dict(sorted(hist.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("/"))))


def _share(counts: list[PassCount], pred: Callable[[PassCount], bool]) -> float:
    return round(sum(pred(c) for c in counts) / len(counts), 4) if counts else 0.0


def tool_free_pass(
    rows: Sequence[PromptRow],
    generate: filters.Generate,
    n: int,
    manifest: Manifest,
    reward: RewardFn | None = None,
) -> list[PromptRow]:
    """Drop rows whose question any of ``n`` tool-free answers gets right; record step ``tool_free``.

    ``reward`` grades one tool-free answer (default :func:`rewards.search_agent.grade_answer`, the judge
    chosen by ``metadata.judge`` / ``RUFUS_SEARCH_JUDGE``, else the training judge).
    """
    if reward is None:
        from rewards.search_agent import grade_answer as reward
    free = [
        PromptRow(id=r.id, prompt=tool_free_prompt(question_of(r)), label=r.label, metadata=r.metadata)
        for r in rows
    ]
    report = filters.filter_prompts(free, filters.search_agent_prepass(n), generate, reward)
    keep = {r.id for r in report.kept}
    kept = [r for r in rows if r.id in keep]
    failed = len(getattr(generate, "errors", []))
    manifest.step(
        "tool_free", len(kept), **report.counts(), samples=n, rule="drop if any tool-free answer is correct",
        pass_histogram=_histogram(report.pass_counts), failed_requests=failed,
        dropped_fraction=round(1 - len(kept) / len(rows), 4) if rows else 0.0,
    )  # fmt: skip
    return kept


def tool_pass(
    rows: Sequence[PromptRow],
    tasks: Sequence[Any],
    runner: EpisodeRunner,
    n: int,
    manifest: Manifest,
) -> list[PromptRow]:
    """Keep rows with 0 < correct < 4 of ``n`` tool episodes (``tasks[i]`` is ``rows[i]``'s task).

    Records step ``tool_pass`` with the kept count, drops by reason, the ``correct/scored`` histogram and
    the never- and always-solved shares (RA: 15.5% and 31.4%).
    """
    if len(tasks) != len(rows):
        raise ValueError(f"tool_pass: {len(tasks)} tasks for {len(rows)} rows")
    results = runner(list(tasks), n) if rows else []
    if len(results) != len(rows):
        raise ValueError(f"tool_pass: the runner returned {len(results)} groups for {len(rows)} tasks")
    rule = filters.search_agent_band(n)
    counts = {r.id: PassCount.of(group) for r, group in zip(rows, results, strict=True)}
    pairs = {k: (c.passes, c.scored) for k, c in counts.items()}
    report = filters.apply_rule(list(rows), [pairs[r.id] for r in rows], rule)
    scored = [c for c in counts.values() if c.scored]
    manifest.step(
        "tool_pass", len(report.kept), **report.counts(), samples=n, rule="keep 0 < correct < 4",
        pass_histogram=_histogram(pairs),
        aborted_episodes=sum(c.aborted for c in counts.values()),
        never_solved=_share(scored, lambda c: c.passes == 0),
        always_solved=_share(scored, lambda c: c.passes == c.scored),
    )  # fmt: skip
    return report.kept
