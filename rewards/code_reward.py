"""The Coding-RL reward: run the response's last ```python block against the problem's tests in the sandbox.

A problem (the request's ``label``) is either functional — ``{"tests": [assert strings], "fn_name"?: str}``
— or stdin/stdout — ``{"inputs": [str], "outputs": [str]}``. At most ``max_tests`` (50) tests run, chosen
by a SHA-256-seeded subsample of the problem itself, so every rollout of a problem meets the same tests.
The score is 1.0 only when every selected test passes (binary all-pass); the details say how many ran
and passed, the first failure, timeouts and the error kind. A sandbox that cannot start gives
``aborted=True``, never a silent 0.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from infra.sandbox import Limits, SandboxUnavailable, WorkerPool
from infra.sandbox.judge import JudgeReport, compile_tests, judge_functional, judge_stdio
from rewards.contract import RewardRequest, RewardResult, register_reward, verifier_error

MAX_TESTS = 50
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_FAILURE_OF = {"wrong": "wrong_answer", "error": "runtime_error", "timeout": "timeout", "crash": "crash"}


def extract_code(response: str) -> str | None:
    """The last fenced python block of the final answer (text after the last ``</think>``), or None."""
    text = response.rsplit("</think>", 1)[-1]
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks and blocks[-1].strip() else None


@dataclass(frozen=True)
class Problem:
    """A validated problem: ``mode`` is functional or stdio."""

    mode: str
    tests: tuple[str, ...] = ()
    fn_name: str | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """Number of tests the problem has."""
        return len(self.tests) if self.mode == "functional" else len(self.inputs)

    def key(self) -> str:
        """SHA-256 of the problem's canonical JSON: the seed of its test subsample and its cache key."""
        body = {"tests": self.tests, "fn_name": self.fn_name, "inputs": self.inputs, "outputs": self.outputs}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def parse_problem(label: Any) -> Problem:
    """Validate a problem dict; raise ValueError naming the offending key."""
    if not isinstance(label, dict):
        raise ValueError(f"problem must be an object, got {type(label).__name__}")
    if "tests" in label:
        tests, fn_name = label["tests"], label.get("fn_name")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise ValueError("problem key 'tests' must be a non-empty list of strings")
        if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()):
            raise ValueError("problem key 'fn_name' must be an identifier")
        return Problem("functional", tests=tuple(tests), fn_name=fn_name)
    if "inputs" in label or "outputs" in label:
        inputs, outputs = label.get("inputs"), label.get("outputs")
        for key, val in (("inputs", inputs), ("outputs", outputs)):
            if not isinstance(val, list) or not val or not all(isinstance(v, str) for v in val):
                raise ValueError(f"problem key {key!r} must be a non-empty list of strings")
        if len(inputs) != len(outputs):
            raise ValueError(f"problem has {len(inputs)} 'inputs' but {len(outputs)} 'outputs'")
        return Problem("stdio", inputs=tuple(inputs), outputs=tuple(outputs))
    raise ValueError("problem needs 'tests' (functional) or 'inputs'/'outputs' (stdin/stdout)")


def select_tests(problem: Problem, max_tests: int = MAX_TESTS) -> list[int]:
    """Indices of the tests to run: all if few, else a sorted subsample seeded by the problem's SHA-256."""
    if problem.size <= max_tests:
        return list(range(problem.size))
    rng = random.Random(int(problem.key(), 16))
    return sorted(rng.sample(range(problem.size), max_tests))


@functools.lru_cache(maxsize=4096)
def _compiled(tests: tuple[str, ...]) -> list[Any]:
    return compile_tests(list(tests))


class CodeScorer:
    """Scores (problem, response) pairs on a warm sandbox pool; ``score_batch`` uses all workers."""

    def __init__(
        self,
        workers: int | None = None,
        limits: Limits | None = None,
        max_tests: int = MAX_TESTS,
        unsafe_local: bool = False,
    ) -> None:
        self.limits = limits or Limits(wall_s=30.0, test_timeout_s=4.0)
        self.max_tests = max_tests
        self._workers, self._unsafe = workers, unsafe_local
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()

    @property
    def pool(self) -> WorkerPool:
        """The worker pool, started on first use (raises SandboxUnavailable when it cannot start)."""
        with self._lock:
            if self._pool is None:
                self._pool = WorkerPool(self._workers, self.limits, unsafe_local=self._unsafe)
            return self._pool

    def score(self, problem: Any, response: str) -> RewardResult:
        """Score one response; never raises on model output."""
        return self.score_batch([(problem, response)])[0]

    def score_batch(self, items: Sequence[tuple[Any, str]]) -> list[RewardResult]:
        """Score many (problem, response) pairs in parallel; results in input order."""
        prepared = [self._prepare(problem, response) for problem, response in items]
        jobs = [p for p in prepared if isinstance(p, _Job)]
        if jobs:
            try:
                pool = self.pool
            except SandboxUnavailable as exc:
                return [p if isinstance(p, RewardResult) else _aborted(exc) for p in prepared]
            try:
                done = iter(pool.map(self._run, jobs))
            except SandboxUnavailable as exc:  # a worker that cannot be lent or restarted
                return [p if isinstance(p, RewardResult) else _aborted(exc) for p in prepared]
            prepared = [next(done) if isinstance(p, _Job) else p for p in prepared]
        return prepared  # type: ignore[return-value]

    def _prepare(self, label: Any, response: str) -> _Job | RewardResult:
        try:
            problem = parse_problem(label)
        except ValueError as exc:
            return RewardResult(score=0.0, failure="invalid_problem", details={"error": str(exc)})
        selected = select_tests(problem, self.max_tests)
        base = {"mode": problem.mode, "tests_total": problem.size, "tests_selected": len(selected)}
        code = extract_code(response if isinstance(response, str) else "")
        if code is None:
            details = {**base, "tests_run": 0, "tests_passed": 0, "timeouts": 0, "extraction_failure": True}
            return RewardResult(score=0.0, failure="no_code_block", details=details)
        return _Job(problem, selected, code, base)

    def _run(self, channel: Any, job: _Job) -> RewardResult:
        p, deadline = job.problem, time.monotonic() + self.limits.wall_s
        try:
            if p.mode == "functional":
                compiled = _compiled(p.tests)
                tests = [compiled[i] for i in job.selected]
                report = judge_functional(
                    channel, job.code, tests, p.fn_name, self.limits.test_timeout_s, deadline
                )
            else:
                ins = [p.inputs[i] for i in job.selected]
                outs = [p.outputs[i] for i in job.selected]
                report = judge_stdio(channel, job.code, ins, outs, self.limits.test_timeout_s, deadline)
        except SandboxUnavailable as exc:
            return _aborted(exc)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a job must never end the scoring process
            return verifier_error(exc)
        return _result(job, report)


@dataclass
class _Job:
    problem: Problem
    selected: list[int]
    code: str
    base: dict


def _aborted(exc: Exception) -> RewardResult:
    return RewardResult(score=0.0, failure="sandbox_unavailable", aborted=True, details={"error": str(exc)})


def _result(job: _Job, report: JudgeReport) -> RewardResult:
    outcomes = report.outcomes
    details: dict[str, Any] = {
        **job.base,
        "tests_run": len(outcomes),
        "tests_passed": report.passed,
        "timeouts": sum(o.kind == "timeout" for o in outcomes),
        "extraction_failure": False,
        "error_kind": None,
        "first_failure": None,
    }
    if report.message:
        details["note"] = report.message
    if report.stage_error:
        details["error_kind"] = report.stage_error
        details["timeouts"] += report.stage_error == "timeout"
        return RewardResult(score=0.0, parsed=job.code, failure=report.stage_error, details=details)
    failed = next((o for o in outcomes if not o.passed), None)
    if failed is None and len(outcomes) == len(job.selected):
        return RewardResult(score=1.0, parsed=job.code, components={"pass_rate": 1.0}, details=details)
    if failed is not None:
        details["error_kind"] = failed.kind
        details["first_failure"] = {
            "test": job.selected[failed.index],
            "kind": failed.kind,
            "message": failed.message,
        }
    failure = _FAILURE_OF.get(failed.kind, failed.kind) if failed else "incomplete"
    rate = report.passed / max(len(job.selected), 1)
    return RewardResult(
        score=0.0, parsed=job.code, components={"pass_rate": rate}, failure=failure, details=details
    )


_DEFAULT: CodeScorer | None = None
_DEFAULT_LOCK = threading.Lock()


def default_scorer() -> CodeScorer:
    """The process-wide scorer used by the registered reward (one pool per process)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = CodeScorer()
        return _DEFAULT


@register_reward("code")
def code_reward(request: RewardRequest) -> RewardResult:
    """Binary all-pass reward of ``request.response`` on the problem in ``request.label``."""
    return default_scorer().score(request.label, request.response)


def score_batch(requests: Sequence[RewardRequest], scorer: CodeScorer | None = None) -> list[RewardResult]:
    """Score many requests on the pool in parallel; results in input order."""
    return (scorer or default_scorer()).score_batch([(r.label, r.response) for r in requests])
