"""Pass-rate filters over agent episodes (stage 04): correctness and difficulty, with three episode runners.

The single-turn filters of :mod:`data_prep.filters` score one completion per sample; an agent task is
scored per *episode* (reset, tool calls, verifier). Here an :data:`EpisodeRunner` ``run(tasks, n) ->
list[list[RewardResult]]`` plays each task ``n`` times and :func:`filter_tasks` applies the two rules:

* **correctness**: drop a task that neither the teacher nor the initial policy ever passes (keep when
  the policy passes at least one episode, or, for the rest, when the teacher does);
* **difficulty**: drop a task the initial policy always passes (every scored episode passed).

:func:`filter_band` is FireFlash's alternative (the coding-agent variant): keep pass rates in a band.

Aborted episodes (infrastructure failures) are neither passes nor failures: they leave the count. A task
whose policy episodes all aborted, or whose correctness rests on a teacher whose episodes all aborted,
is dropped as ``aborted``. The teacher only runs on tasks the policy never passed (the rest are decided
without it). :func:`record` writes the step into the manifest with counts and pass histograms.

Runners, all on the existing agent machinery (no second episode loop):

* :class:`CheckpointRunner`: a local HF checkpoint; :meth:`AgentToolEnvironment.rollout` serves it on
  the local ``/generate`` server and runs the agent loop (the embedded RL and evaluation path).
* :class:`EndpointRunner`: a running SGLang server (production), through the same loop
  (strands-sglang's ``SGLangModel`` on SGLang's native ``/generate``). The loop is token-in/token-out,
  so an OpenAI-chat-only endpoint cannot serve it; SGLang serves the teacher and the policy alike.
* :class:`GoldReplayRunner`: the embedded-scale teacher: a task's gold action sequence
  (``gold_actions.jsonl``, written by ``data_prep.awm_generate``) replayed through the sandboxed server
  with :func:`infra.agents.awm.selfcheck.replay`, then scored by the task's verifier. Deterministic, so it
  plays one episode per task whatever ``n`` is.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data_prep.manifest import Manifest
from infra.agents.contract import AgentTask, EnvironmentFailure, EpisodeLimits
from infra.config import SamplerDtype
from rewards.contract import RewardResult

EpisodeRunner = Callable[[list[AgentTask], int], list[list[RewardResult]]]
NEVER_PASSED, ALWAYS_PASSED, ABORTED = "never_passed", "always_passed", "aborted"
BELOW_BAND, ABOVE_BAND, TOO_FEW = "below_band", "above_band", "too_few_scored"


@dataclass(frozen=True)
class PassCount:
    """One task's episodes: how many passed, how many were scored, how many aborted."""

    passes: int
    scored: int
    aborted: int

    @classmethod
    def of(cls, results: Sequence[RewardResult]) -> PassCount:
        """Count ``results`` (aborted ones are left out of ``scored``)."""
        scored = [r for r in results if not r.aborted]
        return cls(sum(r.passed for r in scored), len(scored), len(results) - len(scored))


@dataclass
class AgentFilterReport:
    """Kept tasks, dropped task ids per reason, and each task's policy and teacher pass counts."""

    kept: list[AgentTask] = field(default_factory=list)
    dropped: dict[str, list[str]] = field(default_factory=dict)
    policy: dict[str, PassCount] = field(default_factory=dict)
    teacher: dict[str, PassCount] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """``kept``, ``dropped_never_passed``, ``dropped_always_passed``, ``aborted`` (tasks) and
        ``aborted_episodes`` (policy and teacher together)."""
        episodes = sum(c.aborted for c in (*self.policy.values(), *self.teacher.values()))
        out = {
            "kept": len(self.kept),
            "dropped_never_passed": len(self.dropped.get(NEVER_PASSED, [])),
            "dropped_always_passed": len(self.dropped.get(ALWAYS_PASSED, [])),
            "aborted": len(self.dropped.get(ABORTED, [])),
            "aborted_episodes": episodes,
        }
        for reason in (BELOW_BAND, ABOVE_BAND, TOO_FEW):  # the band rule's reasons, only when it ran
            if reason in self.dropped:
                out[f"dropped_{reason}"] = len(self.dropped[reason])
        return out

    def histogram(self, who: str = "policy") -> dict[str, int]:
        """Return ``"passes/scored" -> tasks`` for ``who`` (``policy`` or ``teacher``), sorted."""
        counts = self.policy if who == "policy" else self.teacher
        hist = Counter(f"{c.passes}/{c.scored}" for c in counts.values())
        return dict(sorted(hist.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("/"))))


def _run(runner: EpisodeRunner, tasks: list[AgentTask], n: int, who: str) -> list[PassCount]:
    if not tasks:
        return []
    results = runner(tasks, n)
    if len(results) != len(tasks):
        raise ValueError(f"{who} runner returned {len(results)} groups for {len(tasks)} tasks")
    return [PassCount.of(group) for group in results]


def filter_tasks(
    tasks: Sequence[AgentTask],
    policy: EpisodeRunner,
    n: int,
    *,
    teacher: EpisodeRunner | None = None,
    teacher_n: int | None = None,
    correctness: bool = True,
    difficulty: bool = True,
) -> AgentFilterReport:
    """Run ``policy`` ``n`` times per task (and ``teacher`` on tasks it never passed); split by the rules.

    ``teacher=None`` judges correctness on the policy alone. Turning a rule off keeps what it would drop.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tasks = list(tasks)
    ids = [t.id for t in tasks]
    dup = next((i for i, k in Counter(ids).items() if k > 1), None)
    if dup is not None:
        raise ValueError(f"task id {dup!r} appears more than once; the filter reports by task id")
    report = AgentFilterReport()
    report.policy = dict(zip(ids, _run(policy, tasks, n, "policy"), strict=True))
    # the teacher decides only tasks the policy never passed in a scored episode
    ask = [t for t in tasks if report.policy[t.id].passes == 0 < report.policy[t.id].scored]
    if correctness and teacher is not None and ask:
        report.teacher = dict(
            zip([t.id for t in ask], _run(teacher, ask, teacher_n or n, "teacher"), strict=True)
        )
    for task in tasks:
        reason = _decide(report.policy[task.id], report.teacher.get(task.id), correctness, difficulty)
        if reason is None:
            report.kept.append(task)
        else:
            report.dropped.setdefault(reason, []).append(task.id)
    return report


def filter_band(
    tasks: Sequence[AgentTask], policy: EpisodeRunner, n: int, band: tuple[float, float], min_scored: int
) -> AgentFilterReport:
    """FireFlash's rule: keep a task whose pass rate over its scored episodes lies in ``band`` (inclusive).

    A task needs ``min_scored`` scored (not aborted) episodes of the ``n`` played (FF: pass rate in
    [15%, 85%] from at least 4 samples under training conditions); one with fewer is dropped as
    ``too_few_scored`` (``aborted`` when none scored). A pass is a solved episode (``RewardResult.passed``),
    whatever partial credit the others got.
    """
    low, high = band
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {band}")
    if n < min_scored:
        raise ValueError(f"n={n} episodes cannot give the {min_scored} scored episodes a task needs")
    tasks = list(tasks)
    report = AgentFilterReport()
    report.policy = dict(zip([t.id for t in tasks], _run(policy, tasks, n, "policy"), strict=True))
    for task in tasks:
        c = report.policy[task.id]
        if c.scored == 0:
            reason: str | None = ABORTED
        elif c.scored < min_scored:
            reason = TOO_FEW
        else:
            rate = c.passes / c.scored
            reason = BELOW_BAND if rate < low else ABOVE_BAND if rate > high else None
        if reason is None:
            report.kept.append(task)
        else:
            report.dropped.setdefault(reason, []).append(task.id)
    return report


def _decide(pol: PassCount, teach: PassCount | None, correctness: bool, difficulty: bool) -> str | None:
    if pol.scored == 0:
        return ABORTED
    if pol.passes == pol.scored:
        return ALWAYS_PASSED if difficulty else None
    if pol.passes > 0 or not correctness:
        return None
    if teach is None:
        return NEVER_PASSED
    if teach.scored == 0:
        return ABORTED
    return None if teach.passes > 0 else NEVER_PASSED


def record(report: AgentFilterReport, manifest: Manifest, step: str, **extra: Any) -> None:
    """Add ``step`` to ``manifest``: kept count, drops by reason, aborted, and both pass histograms."""
    manifest.step(
        step,
        len(report.kept),
        **report.counts(),
        policy_pass_histogram=report.histogram("policy"),
        teacher_pass_histogram=report.histogram("teacher"),
        **extra,
    )


# ---- runners -------------------------------------------------------------------------------------------
class AgentEndpoint(BaseModel):
    """A running SGLang server (native ``/generate``) and the tokenizer of the model it serves."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="SGLang server or router URL, e.g. http://host:30000.")
    tokenizer: str = Field(description="Tokenizer folder or hub id of the served model.")
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    concurrency: int = Field(16, ge=1, description="Episodes in flight at once.")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout.")


def _agent_environment(env_spec: str, concurrency: int) -> Any:
    from infra.environments.agent import AgentOptions, AgentToolEnvironment

    return AgentToolEnvironment(AgentOptions(env=env_spec, concurrency=concurrency))


class CheckpointRunner:
    """Episodes of a local HF checkpoint, through :meth:`AgentToolEnvironment.rollout` (local ``/generate``).

    ``max_context_tokens`` caps the served context (default: the model's ``max_position_embeddings``);
    ``device`` defaults to CUDA when available; ``dtype`` is the weights' dtype when sampling
    (``rl.rollout.sampler_dtype``: the filters sample as the stage's rollouts do); ``drop_finished`` and
    ``eager_decode`` batch the multi-turn decoding as ``rl.rollout``'s flags of those names do (see
    :meth:`from_rollout`). ``backend`` replaces sampling the model (``Policy.backend``; tests script the
    model turns with it).
    """

    def __init__(
        self,
        model_dir: str | Path,
        env_spec: str,
        *,
        seed: int,
        max_new_tokens: int = EpisodeLimits().max_new_tokens,
        temperature: float = 1.0,
        top_p: float = 1.0,
        concurrency: int = 4,
        max_context_tokens: int | None = None,
        device: str | None = None,
        dtype: SamplerDtype = "float32",
        drop_finished: bool = False,
        eager_decode: bool = False,
        backend: Any = None,
    ) -> None:
        self.model_dir, self.env_spec, self.backend = Path(model_dir), env_spec, backend
        self.dtype, self.drop_finished, self.eager_decode = dtype, drop_finished, eager_decode
        self.device, self.max_context_tokens = device, max_context_tokens
        self.seed, self.max_new_tokens, self.concurrency = seed, max_new_tokens, concurrency
        self.temperature, self.top_p = temperature, top_p
        self._policy: Any = None

    @classmethod
    def from_rollout(
        cls, model_dir: str | Path, env_spec: str, rollout: Any, *, seed: int, concurrency: int
    ) -> CheckpointRunner:
        """A runner that samples as a stage's ``rl.rollout`` section does (budgets, temperature, nucleus,
        dtype, multi-turn batching), so a filter scores tasks as the stage's own rollouts would."""
        return cls(
            model_dir, env_spec, seed=seed, concurrency=concurrency,
            max_new_tokens=rollout.max_response_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
            max_context_tokens=rollout.max_context_tokens, dtype=rollout.sampler_dtype,
            drop_finished=rollout.drop_finished_rows, eager_decode=rollout.eager_decode,
        )  # fmt: skip

    def policy(self) -> Any:
        """Return the loaded :class:`~infra.environments.base.Policy` (loaded on first use)."""
        if self._policy is None:
            from infra.embedded.models import load_dtype, load_model, load_tokenizer, pick_device
            from infra.environments.base import Policy

            model = load_model(self.model_dir, pick_device(self.device), load_dtype(self.dtype)).eval()
            self._policy = Policy(model, load_tokenizer(self.model_dir), self.backend)
        return self._policy

    def __call__(self, tasks: list[AgentTask], n: int) -> list[list[RewardResult]]:
        """Return ``n`` episode rewards per task."""
        from infra.embedded.runtime import progress
        from infra.environments.agent import task_row
        from infra.environments.base import Sampling

        env = _agent_environment(self.env_spec, self.concurrency)
        rows = [task_row(t, env.options) for t in tasks]
        sampling = Sampling(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
            top_p=self.top_p,
            max_context_tokens=self.max_context_tokens,
            drop_finished=self.drop_finished,
            eager_decode=self.eager_decode,
        )
        with progress(f"policy episodes ({len(tasks)} tasks x {n})", len(tasks) * n) as advance:
            groups = env.rollout(self.policy(), rows, n, sampling, on_episode=advance)
        return [[episode.reward for episode in group.samples] for group in groups]


class EndpointRunner:
    """Episodes against a running SGLang server, through the agent loop the embedded rollout uses."""

    def __init__(self, endpoint: AgentEndpoint, env_spec: str, *, seed: int, tokenizer: Any = None) -> None:
        self.endpoint, self.env_spec, self.seed = endpoint, env_spec, seed
        self._tokenizer = tokenizer

    def tokenizer(self) -> Any:
        """Return the served model's tokenizer (loaded from ``endpoint.tokenizer`` on first use)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.endpoint.tokenizer)
        return self._tokenizer

    def __call__(self, tasks: list[AgentTask], n: int) -> list[list[RewardResult]]:
        """Return ``n`` episode rewards per task."""
        from infra.agents.loop import ModelEndpoint
        from infra.embedded.runtime import progress
        from infra.environments.agent import episode_of, quiet_episode_logs

        cfg = self.endpoint
        env = _agent_environment(self.env_spec, cfg.concurrency)
        model = ModelEndpoint(
            base_url=cfg.base_url.rstrip("/"),
            tokenizer=self.tokenizer(),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            timeout=cfg.timeout_s,
        )
        title = f"endpoint episodes ({len(tasks)} tasks x {n})"
        with quiet_episode_logs(), progress(title, len(tasks) * n) as advance:
            # the embedded rollout's own fan-out (semaphore, per-episode seeds, a fresh env per episode)
            results = asyncio.run(env._episodes(model, tasks, n, self.seed, on_episode=advance))
        return [[episode_of(r).reward for r in results[i * n : (i + 1) * n]] for i in range(len(tasks))]


class GoldReplayRunner:
    """The embedded-scale teacher: replay each AWM task's gold actions in the sandbox and run its verifier."""

    def __init__(
        self,
        release: str | Path,
        *,
        workers: int = 1,
        unsafe_local: bool = False,
        verifier_timeout: float = 10.0,
    ) -> None:
        from infra.agents.awm.env import runtime
        from infra.agents.awm.selfcheck import load_gold

        self.release = Path(release).resolve()
        self.gold = load_gold(self.release)
        self.runtime = runtime(str(self.release), workers, unsafe_local, verifier_timeout)

    def __call__(self, tasks: list[AgentTask], n: int) -> list[list[RewardResult]]:
        """Return one reward per task (replay is deterministic; ``n`` is ignored).

        Tasks replay grouped by scenario, so each scenario's server boots once and is reset in between.
        """
        order = sorted(range(len(tasks)), key=lambda i: str(tasks[i].metadata.get("scenario")))
        out: list[list[RewardResult]] = [[] for _ in tasks]
        for i in order:
            out[i] = [self.replay(tasks[i])]
        return out

    def replay(self, task: AgentTask) -> RewardResult:
        """Replay ``task``'s gold actions on a fresh database and score the final state and answer."""
        from infra.agents.awm.release import ReleaseError
        from infra.agents.awm.selfcheck import GOLD, replay

        name, idx = str(task.metadata.get("scenario")), int(task.metadata.get("task_idx", -1))
        record = self.gold.get((name, idx))
        if record is None:
            raise ReleaseError(f"{self.release / GOLD}: no gold actions for scenario {name!r} task {idx}")
        scenario = self.runtime.scenario(name)
        code = scenario.verifiers.get(idx)
        if code is None:
            return RewardResult(
                score=0.0, aborted=True, failure="environment", details={"error": "no verifier"}
            )
        try:
            final, rejected = replay(self.runtime.servers(), scenario, record["actions"])
        except EnvironmentFailure as exc:
            return RewardResult(score=0.0, aborted=True, failure="environment", details={"error": str(exc)})
        answer = str(record.get("final_answer") or "")
        result = self.runtime.verifier().verify(code, scenario.database(), final, answer)
        if rejected:
            result = result.model_copy(
                update={"details": {**result.details, "rejected_gold_calls": rejected}}
            )
        return result


def awm_tasks(env_spec: str) -> list[AgentTask]:
    """Return every verified task of an ``awm:release=...`` environment once, in release order."""
    from infra.agents.awm.env import AwmEnv
    from infra.agents.envs.base import load_environment

    env = load_environment(env_spec)
    if not isinstance(env, AwmEnv):
        raise ValueError(f"env spec {env_spec!r} is not an awm environment")
    return [env.task_of(s, t.index) for s in env.runtime.scenarios.values() for t in s.verified_tasks()]
