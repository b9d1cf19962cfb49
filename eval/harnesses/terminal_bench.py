"""Terminal-Bench 2.x and SWE-bench Verified on the stage-05 agent stack: Harbor task folders, k attempts.

Use::

    python -m eval.harnesses.terminal_bench --bench terminal_bench_2_1 --data TASKS_ROOT \\
        --model-url http://127.0.0.1:30000 --tokenizer CKPT --runtime docker --trials 1 --out result.json
    # E2B: write the templates to bake (python -m data_prep.harbor_sources build-templates --spec ...), then
    # run with --runtime e2b
    python -m eval.harnesses.terminal_bench --bench swe_bench_verified --data TASKS_ROOT --runtime e2b \\
        --write-templates templates.json

``--data`` is a folder of task folders in either Harbor layout (``task.toml``: Terminal-Bench 2.x as
``harbor run -d terminal-bench/terminal-bench-2`` fetches it, and SWE-bench Verified as Harbor's
``swebench`` adapter writes it: ``FROM`` the instance's ``swebench/sweb.eval...`` image, ``WORKDIR
/testbed``, the dataset row in ``tests/config.json``, a ``tests/test.sh`` that applies the test patch, runs
``FAIL_TO_PASS`` and ``PASS_TO_PASS`` and writes ``reward.txt`` 1 iff swebench grades the instance
resolved) or Terminal-Bench 1's ``task.yaml``. A folder that does not load is dropped and counted, its error
naming the folder, file and key; a SWE-bench folder must also carry its instance row
(:func:`eval.agent_loaders.swe_bench_verified`).

Each task runs ``--trials`` k times, each attempt one episode of the stage's loop
(:func:`infra.agents.loop.run_episode`) in :class:`~eval.harnesses.terminal_bench_env.BenchEnv`: the stage's
``harbor`` environment with the limits of its env spec (``rl.environment.options.env`` of
``stages/05_coding_agent/launch.yaml``: 200 tool calls and turns, 8,192 tokens a call, a 60K trajectory;
``--env-option KEY=VALUE`` overrides one), the one ``execute_command`` tool, and the task's own tests as the
score, binary (the FireFlash partial credit is never used here). The paper states neither k nor timeouts for
these two benchmarks ("evaluated with the harness the corresponding stage trains in"), so k defaults to 1,
the verifier gets the task's own ``[verifier].timeout_sec``, and the task's ``[agent].timeout_sec`` is not
enforced (the stage bounds episodes by tools and tokens); the protocol records all of them.

Infrastructure rules (:mod:`eval.harnesses.protocol`): the model server and the runtime backend are checked
first (and ``--expected-tasks``, the benchmark's size); an attempt whose sandbox does not start, whose
verifier crashes, times out or writes no reward, or whose model server fails is ``aborted`` and rerun up to
``--retries`` times; still aborted, it is missing, never 0. A task the backend cannot run (the local runtime
needs files-only tasks) is aborted on every attempt. pass@1 = the mean over tasks of each task's pass rate
over its scored attempts; the cell is missing when more than ``--max-aborted`` of all attempts were aborted.
Per-task outcomes go to ``<out>.items.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from eval.harnesses.protocol import REPO_ROOT, CellProtocol, CellResult, finish, harness_commit, missing
from eval.harnesses.search_bench import ItemOutcome, model_endpoint, server_problem, write_items
from eval.harnesses.terminal_bench_env import (
    E2B_PREFIX,
    NO_CAP_S,
    BenchEnv,
    LoadedTasks,
    env_options,
    load_bench,
    run_trials,
    tasks_sha256,
)
from infra.agents.harbor.backends import RUNTIMES, make_backend, template_specs
from infra.agents.harbor.task import HarborTask

STAGE_CONFIG = REPO_ROOT / "stages" / "05_coding_agent" / "launch.yaml"
VERSIONS = {
    "terminal_bench_2_1": "Terminal-Bench 2.1 (Harbor task folders; 89 tasks)",
    "swe_bench_verified": "SWE-bench Verified (Harbor swebench adapter folders; 500 instances)",
}
SCORING = {
    "terminal_bench_2_1": "Harbor verifier: tests/ uploaded to /tests after the episode, tests/test.sh on "
    "the final state, reward.json or reward.txt read; passed iff the reward is >= 1 (binary)",
    "swe_bench_verified": "the swebench adapter's tests/test.sh on the final /testbed: test_patch applied, "
    "FAIL_TO_PASS and PASS_TO_PASS run and graded by swebench; reward.txt 1 iff resolved (all pass)",
}
AGENT_TIMEOUT = "not enforced: episodes are bounded by the stage-05 limits (tool calls, turns, tokens)"


class TerminalBenchConfig(BaseModel):
    """One run of Terminal-Bench 2.1 or SWE-bench Verified (the CLI's flags)."""

    model_config = ConfigDict(extra="forbid")

    bench: Literal["terminal_bench_2_1", "swe_bench_verified"]
    data: Path
    model_url: str
    tokenizer: str | None = None
    out: Path
    runtime: Literal["local", "docker", "e2b"] = "local"
    stage_config: Path = STAGE_CONFIG
    env_option: list[str] = Field(default_factory=list)
    trials: int = Field(default=1, ge=1, description="k: scored attempts per task.")
    retries: int = Field(default=1, ge=0, description="Reruns of an attempt aborted by infrastructure.")
    max_aborted: float = Field(default=0.0, ge=0.0, lt=1.0)
    expected_tasks: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)
    concurrency: int = Field(default=8, ge=1)
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    e2b_template_prefix: str = E2B_PREFIX
    write_templates: Path | None = None


def _span(values: list[float | None]) -> dict[str, float] | None:
    known = [v for v in values if v is not None]
    return {"min": min(known), "max": max(known)} if known else None


def protocol_of(
    cfg: TerminalBenchConfig, loaded: LoadedTasks, tasks: list[HarborTask], env: BenchEnv, spec: str
) -> CellProtocol:
    """Return the cell's protocol: benchmark and version, n, k, backend, timeouts, limits, data hashes."""
    opts = env.options
    cap = "" if opts.verifier_timeout >= NO_CAP_S else f", capped at {opts.verifier_timeout:g} s"
    if cfg.runtime == "local":
        cap += "; the local runtime caps every process at 600 s"
    return CellProtocol(
        benchmark=cfg.bench,
        n=len(tasks),
        k=cfg.trials,
        harness="eval.harnesses.terminal_bench",
        harness_commit=harness_commit(),
        tool_backends={"execute_command": env.backend.describe()},
        limits=env.limits.model_dump(),
        settings={
            "benchmark_version": VERSIONS[cfg.bench],
            "scoring": SCORING[cfg.bench],
            "runtime": cfg.runtime,
            "env_spec": spec,
            "stage_config": str(cfg.stage_config),
            "command_timeout_s": opts.command_timeout,
            "output_tokens_per_stream": opts.output_tokens,
            "verifier_timeout": f"the task's own [verifier].timeout_sec{cap}",
            "verifier_timeout_s": _span([t.verifier_timeout_sec for t in tasks]),
            "agent_timeout": AGENT_TIMEOUT,
            "task_agent_timeout_s": _span([t.agent_timeout_sec for t in tasks]),
            "max_turns": env.limits.max_iterations,
            "trials": cfg.trials,
            "retries": cfg.retries,
            "max_aborted": cfg.max_aborted,
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
            "seed": cfg.seed,
            "data": str(cfg.data),
            "tasks_sha256": tasks_sha256(tasks),
            "dropped_on_load": loaded.dropped[:20],
        },
    )


def _reason(texts: list[str]) -> str:
    return "; ".join(dict.fromkeys(t for t in texts if t))[:400]


def score_cell(
    cfg: TerminalBenchConfig,
    protocol: CellProtocol,
    tasks: list[HarborTask],
    trials: dict[str, list[ItemOutcome]],
    unrunnable: dict[str, list[str]],
    dropped: int,
) -> tuple[CellResult, list[dict[str, Any]]]:
    """Return the cell and one record per task: pass@1 over scored attempts, aborted attempts missing."""
    k, records, task_scores, why = cfg.trials, [], [], []
    passes_any = scored_attempts = passed_attempts = aborted = 0
    for task in tasks:
        outcomes = trials.get(task.name, [])
        passed = [None if o.reward is None else float(o.reward >= 1.0) for o in outcomes]
        scored = [p for p in passed if p is not None]
        n_aborted = k - len(scored)
        aborted += n_aborted
        why += ["cannot run here: " + "; ".join(unrunnable[task.name])] if task.name in unrunnable else []
        why += [o.error or str(o.details.get("failure") or "") for o in outcomes if o.reward is None]
        score = sum(scored) / len(scored) if scored else None
        task_scores.append(score)
        scored_attempts, passed_attempts = scored_attempts + len(scored), passed_attempts + int(sum(scored))
        passes_any += bool(scored) and max(scored) == 1.0
        records.append(
            {
                "task": task.name,
                "task_dir": str(task.task_dir),
                "score": score,
                "passed": int(sum(scored)),
                "scored": len(scored),
                "aborted": n_aborted,
                "unrunnable": unrunnable.get(task.name, []),
                "trials": [
                    o.record(trial=j, passed=p) for j, (o, p) in enumerate(zip(outcomes, passed, strict=True))
                ],
            }
        )
    retried = sum(o.attempts > 1 for outs in trials.values() for o in outs)
    counts = {
        "tasks": len(tasks),
        "attempts": k * len(tasks),
        "scored_attempts": scored_attempts,
        "aborted_attempts": aborted,
        "unrunnable_tasks": len(unrunnable),
        "dropped_on_load": dropped,
        "retried": retried,
    }
    metrics: dict[str, float] = {}
    if scored_attempts:
        metrics["attempt_pass_rate"] = 100.0 * passed_attempts / scored_attempts
    with_score = sum(s is not None for s in task_scores)
    if k > 1 and with_score:
        metrics[f"pass@{k}"] = 100.0 * passes_any / with_score
    if tasks and aborted / (k * len(tasks)) > cfg.max_aborted:
        reason = (
            f"{aborted} of {k * len(tasks)} attempts aborted (infrastructure failures after "
            f"{cfg.retries} retries; --max-aborted {cfg.max_aborted:g})"
        )
        detail = _reason(why)
        return missing(
            protocol, reason + (f": {detail}" if detail else ""), metrics=metrics, counts=counts
        ), records
    cell = finish(
        protocol,
        task_scores,
        max_unscored=cfg.max_aborted,
        unscored_reasons=why,
        metric="pass@1",
        metrics=metrics,
        counts=counts,
    )
    return cell, records


def run_bench(cfg: TerminalBenchConfig) -> CellResult:
    """Run the benchmark; write ``cfg.out`` (the cell) and ``*.items.jsonl`` (one record per task)."""
    loaded = load_bench(cfg.bench, cfg.data)
    tasks = loaded.tasks[: cfg.limit] if cfg.limit else loaded.tasks
    spec, options = env_options(cfg.stage_config, cfg.env_option)
    backend = make_backend(cfg.runtime, cfg.e2b_template_prefix)
    by_name = {t.name: t for t in tasks}

    def make_env() -> BenchEnv:
        return BenchEnv(by_name, backend, str(cfg.data), **options)

    probe = make_env()
    protocol = protocol_of(cfg, loaded, tasks, probe, spec)
    endpoint, server = model_endpoint(
        cfg.model_url, cfg.tokenizer, temperature=cfg.temperature, top_p=cfg.top_p
    )
    try:
        problems = [server_problem(endpoint.base_url), backend.preflight()]
        if cfg.expected_tasks and not cfg.limit and len(loaded.tasks) != cfg.expected_tasks:
            dropped = (
                f" (dropped {len(loaded.dropped)}: {_reason(loaded.dropped[:3])})" if loaded.dropped else ""
            )
            problems.append(
                f"{len(loaded.tasks)} task folders loaded, the benchmark has {cfg.expected_tasks}{dropped}"
            )
        problems = [p for p in problems if p]
        if problems:
            result = missing(
                protocol,
                "preflight failed: " + "; ".join(problems),
                counts={"tasks": len(tasks), "dropped_on_load": len(loaded.dropped)},
            )
            result.write(cfg.out)
            return result
        unrunnable = {t.name: p for t in tasks if (p := backend.problems(t))}
        runnable = [t for t in tasks if t.name not in unrunnable]
        trials = run_trials(
            make_env,
            runnable,
            probe.task_of,
            endpoint,
            trials=cfg.trials,
            concurrency=cfg.concurrency,
            attempts=1 + cfg.retries,
            seed=cfg.seed,
        )
    finally:
        if server is not None:
            server.stop()
    result, records = score_cell(cfg, protocol, tasks, trials, unrunnable, len(loaded.dropped))
    for record in records:
        record["instance_id"] = loaded.instance_ids.get(record["task"], record["task"])
    write_items(cfg.out.with_suffix(".items.jsonl"), records)
    result.write(cfg.out)
    return result


def write_templates(cfg: TerminalBenchConfig) -> int:
    """Write the E2B templates of the loaded tasks to ``cfg.write_templates``; return how many."""
    tasks = load_bench(cfg.bench, cfg.data).tasks
    tasks = [t for t in (tasks[: cfg.limit] if cfg.limit else tasks) if t.environment.dockerfile is not None]
    specs = template_specs(tasks, cfg.e2b_template_prefix)
    assert cfg.write_templates is not None
    cfg.write_templates.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_templates.write_text(json.dumps(specs, indent=1) + "\n", encoding="utf-8")
    return len(specs)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m eval.harnesses.terminal_bench", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--bench", required=True, choices=tuple(VERSIONS))
    ap.add_argument("--data", required=True, type=Path, help="The folder of the benchmark's task folders.")
    ap.add_argument("--model-url", help="SGLang /generate server URL, or 'micro'.")
    ap.add_argument("--tokenizer", help="Tokenizer folder of the served checkpoint (needed with a URL).")
    ap.add_argument("--out", type=Path, help="The cell's result.json.")
    ap.add_argument("--runtime", choices=RUNTIMES, default="local", help="Where each attempt's sandbox runs.")
    ap.add_argument(
        "--stage-config", type=Path, default=STAGE_CONFIG, help="The stage whose env spec to use."
    )
    ap.add_argument("--env-option", action="append", default=[], help="KEY=VALUE over the stage's env spec.")
    ap.add_argument("--e2b-template-prefix", default=E2B_PREFIX)
    ap.add_argument("--write-templates", type=Path, help="Write the E2B templates.json to bake, and exit.")
    for flag, kind, default in (
        ("--trials", int, 1),
        ("--retries", int, 1),
        ("--expected-tasks", int, None),
        ("--limit", int, None),
        ("--concurrency", int, 8),
        ("--seed", int, 0),
        ("--max-aborted", float, 0.0),
        ("--temperature", float, 1.0),
        ("--top-p", float, 1.0),
    ):
        ap.add_argument(flag, type=kind, default=default)
    return ap


def main(argv: list[str] | None = None) -> int:
    """CLI: run the benchmark, print the cell; exit 0 when scored, 3 when missing, 2 on a usage error."""
    args = {k: v for k, v in vars(_parser().parse_args(argv)).items() if v is not None}
    try:
        if "write_templates" in args:
            cfg = TerminalBenchConfig(**{"model_url": "-", "out": args["write_templates"], **args})
            print(f"terminal_bench: {write_templates(cfg)} templates written to {cfg.write_templates}")
            return 0
        result = run_bench(TerminalBenchConfig(**args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"terminal_bench: {' '.join(str(exc).split())[:2000]}", file=sys.stderr)
        return 2
    print(result.model_dump_json(indent=2))
    return 3 if result.missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
