"""The IF RL reward (paper §3.4): a list of rubrics, reward 1 only when every rubric passes.

The label is a list of rubrics, each one of:

* ``{"kind": "code", "check": "<constraint id>", "kwargs": {...}}`` — a checker from the constraint
  pool (:mod:`rewards.if_constraints`: IFEval's reference checkers from lm-eval, run in-process);
* ``{"kind": "code_src", "source": "<python>"}`` — a teacher-written checker defining
  ``check(response) -> bool``; it is untrusted code and runs in the sandbox (:mod:`infra.sandbox`);
* ``{"kind": "judge", "requirement": "<text>"}`` — graded by an LLM judge through the ``rubric``
  package's ``PerCriterionOneShotGrader`` on an OpenAI-compatible endpoint (``RUFUS_JUDGE_BASE_URL``,
  ``RUFUS_JUDGE_MODEL``, optional ``RUFUS_JUDGE_API_KEY``).

Code rubrics' ids and kwargs are validated with the label (a bad one is ``bad_label``); a checker that
still fails on a response is ``checker_error`` (score 0, the exception kept), and answers longer than
``MAX_RESPONSE_CHARS`` are ``response_too_long``: every pool checker is linear in what it reads, so a
call is bounded. There are no optional rubrics: every rubric must pass. Rubrics see only the final
answer (the think block is removed). Code rubrics run first and the first failure decides the reward,
so the judge is only asked when the outcome still depends on it. Infrastructure problems — no judge
endpoint configured, the endpoint failing, the sandbox not starting — make the result ``aborted``, never
a pass and never a 0.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import threading
import time
from typing import Any

from rewards.answer_extract import split_thinking
from rewards.contract import RewardRequest, RewardResult, register_reward
from rewards.if_constraints import MAX_RESPONSE_CHARS, check_constraint, get_constraint

RUBRIC_KINDS = ("code", "code_src", "judge")
CODE_SRC_TIMEOUT_S = 10.0


class InfraError(RuntimeError):
    """A rubric could not be evaluated for reasons outside the response (judge or sandbox down)."""


def validate_rubrics(label: Any) -> list[dict[str, Any]]:
    """Return ``label`` as a list of rubric dicts; raise ValueError naming the first bad rubric."""
    if not isinstance(label, list) or not label:
        raise ValueError("label must be a non-empty list of rubrics")
    for i, rub in enumerate(label):
        if not isinstance(rub, dict) or rub.get("kind") not in RUBRIC_KINDS:
            raise ValueError(f"rubric {i}: expected a dict with kind in {RUBRIC_KINDS}, got {rub!r:.120}")
        need = {"code": "check", "code_src": "source", "judge": "requirement"}[rub["kind"]]
        if not isinstance(rub.get(need), str) or not rub[need].strip():
            raise ValueError(f"rubric {i} ({rub['kind']}): missing string field {need!r}")
        if rub["kind"] == "code":
            kwargs = rub.get("kwargs") or {}
            if not isinstance(kwargs, dict):
                raise ValueError(f"rubric {i} (code): kwargs must be a dict")
            try:
                get_constraint(rub["check"]).validate(kwargs)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"rubric {i} (code): {exc}") from None
    return label


# ---- sandboxed teacher checkers -------------------------------------------------------------------------
_sandbox = None
_sandbox_lock = threading.Lock()


def _sandbox_pool():
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            from infra.sandbox.runner import WorkerPool

            _sandbox = WorkerPool(workers=int(os.environ.get("RUFUS_IF_SANDBOX_WORKERS", "1")))
            atexit.register(_sandbox.close)
        return _sandbox


def run_code_src(source: str, response: str, timeout: float = CODE_SRC_TIMEOUT_S) -> tuple[bool, str]:
    """Run a teacher checker's ``check(response)`` in the sandbox; return ``(passed, note)``.

    A checker that fails to compile, raises, returns a non-bool or overruns counts as not passed (the
    rubric cannot be shown satisfied); a sandbox that cannot start raises :class:`InfraError`. A runner
    whose channel breaks is retried once on a fresh runner (under heavy load a runner's socket was seen
    to reset on a harmless checker, about once in ~200 calls); a second break is charged to the checker.
    """
    passed, note = _run_code_src_once(source, response, timeout)
    if note.startswith("checker_crashed"):
        passed, note = _run_code_src_once(source, response, timeout)
    return passed, note


def _run_code_src_once(source: str, response: str, timeout: float) -> tuple[bool, str]:
    from infra.sandbox import harness
    from infra.sandbox.isolation import SandboxUnavailable
    from infra.sandbox.runner import ChannelClosed, ChannelTimeout

    try:
        pool = _sandbox_pool()
        with pool.session() as channel:
            deadline = time.monotonic() + timeout
            loaded = channel.request({"op": "load", "code": source}, deadline)
            if not loaded.get("ok"):
                return False, f"checker_load_error: {loaded.get('exc')}: {str(loaded.get('msg'))[:200]}"
            if loaded.get("names", {}).get("check") != "callable":
                return False, "checker_defines_no_check"
            reply = channel.request(
                {
                    "op": "call",
                    "ref": "check",
                    "args": harness.encode([response]),
                    "kwargs": harness.encode({}),
                },
                deadline,
            )
    except SandboxUnavailable as exc:
        raise InfraError(f"sandbox unavailable: {exc}") from None
    except ChannelTimeout:
        return False, "checker_timeout"
    except (ChannelClosed, harness.ProtocolError) as exc:
        return False, f"checker_crashed: {exc}"
    if not reply.get("ok"):
        return False, f"checker_error: {reply.get('exc')}: {str(reply.get('msg'))[:200]}"
    value = harness.decode(reply.get("value"))
    if not isinstance(value, bool):
        return False, f"checker_returned_{type(value).__name__}"
    return value, ""


# ---- LLM judge ------------------------------------------------------------------------------------------
def judge_endpoint() -> tuple[str, str, str | None] | None:
    """Return ``(base_url, model, api_key)`` from the environment, or None when no judge is configured."""
    url, model = os.environ.get("RUFUS_JUDGE_BASE_URL"), os.environ.get("RUFUS_JUDGE_MODEL")
    if not url or not model:
        return None
    return url, model, os.environ.get("RUFUS_JUDGE_API_KEY")


def _conversation_text(prompt: list[dict[str, Any]]) -> str:
    return "\n".join(f"[{m.get('role', '?')}] {m.get('content', '')}" for m in prompt)


def _run_async(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def judge_requirements(requirements: list[str], response: str, prompt: list[dict[str, Any]]) -> list[bool]:
    """Return MET/UNMET per requirement from one ``PerCriterionOneShotGrader`` call; InfraError on failure."""
    endpoint = judge_endpoint()
    if endpoint is None:
        raise InfraError(
            "judge rubric but no judge endpoint (set RUFUS_JUDGE_BASE_URL and RUFUS_JUDGE_MODEL)"
        )
    from rubric import Criterion
    from rubric.autograders import OneShotOutput, PerCriterionOneShotGrader

    from infra.endpoints import ChatClient, TeacherError

    client = ChatClient(endpoint[0], endpoint[1], api_key=endpoint[2], timeout=120.0)

    async def generate(system_prompt: str, user_prompt: str) -> OneShotOutput:
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}]
        text = (await asyncio.to_thread(client.chat, messages, temperature=0.0, include_reasoning=False))[0]
        body = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
        return OneShotOutput.model_validate(json.loads(body))

    grader = PerCriterionOneShotGrader(generate_fn=generate, normalize=False)
    criteria = [Criterion(weight=1.0, requirement=r) for r in requirements]
    try:
        reports = _run_async(grader.judge(response, criteria, query=_conversation_text(prompt)))
    except (TeacherError, ValueError, OSError) as exc:
        raise InfraError(f"judge failed: {type(exc).__name__}: {exc}") from None
    return [rep.verdict == "MET" for rep in reports]


# ---- the reward -----------------------------------------------------------------------------------------
def score_rubrics(rubrics: list[dict[str, Any]], response: str, prompt: list[dict[str, Any]]) -> RewardResult:
    """Score a final answer against validated rubrics: 1 only if all pass."""
    components: dict[str, float] = {}
    notes: dict[str, str] = {}
    judged: list[tuple[int, str]] = []
    for i, rub in enumerate(rubrics):
        key = f"rubric_{i}"
        if rub["kind"] == "judge":
            judged.append((i, rub["requirement"]))
            continue
        if rub["kind"] == "code":
            try:
                ok = check_constraint(rub["check"], response, rub.get("kwargs") or {})
            except Exception as exc:  # noqa: BLE001 - kwargs were validated: this is the checker failing
                error = f"{key}: {type(exc).__name__}: {str(exc)[:200]}"
                return RewardResult(score=0.0, failure="checker_error", details={"error": error})
        else:
            try:
                ok, note = run_code_src(rub["source"], response)
            except InfraError as exc:
                return RewardResult(
                    score=0.0, aborted=True, failure="sandbox_unavailable", details={"error": str(exc)}
                )
            if note:
                notes[key] = note
        components[key] = float(ok)
        if not ok:
            return RewardResult(
                score=0.0, failure=f"{key}_failed", components=components, details={"notes": notes}
            )
    if judged:
        try:
            verdicts = judge_requirements([req for _, req in judged], response, prompt)
        except InfraError as exc:
            return RewardResult(
                score=0.0,
                aborted=True,
                failure="judge_unavailable",
                components=components,
                details={"error": str(exc)},
            )
        for (i, _), ok in zip(judged, verdicts, strict=True):
            components[f"rubric_{i}"] = float(ok)
        failed = [i for (i, _), ok in zip(judged, verdicts, strict=True) if not ok]
        if failed:
            return RewardResult(score=0.0, failure=f"rubric_{failed[0]}_failed", components=components)
    return RewardResult(score=1.0, components=components, details={"notes": notes} if notes else {})


@register_reward("if_rubrics")
def if_rubrics_reward(request: RewardRequest) -> RewardResult:
    """Binary all-rubrics-pass reward on the final answer (think block removed)."""
    try:
        rubrics = validate_rubrics(request.label)
    except ValueError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": str(exc)})
    _, final, problem = split_thinking(request.response)
    if problem:
        return RewardResult(score=0.0, failure=problem)
    if not final:
        return RewardResult(score=0.0, failure="empty_answer")
    if len(final) > MAX_RESPONSE_CHARS:
        return RewardResult(score=0.0, failure="response_too_long", details={"chars": len(final)})
    result = score_rubrics(rubrics, final, request.prompt)
    result.parsed = final
    return result
