"""``eval.harnesses.terminal_bench``: Terminal-Bench 2.x and SWE-bench Verified on the stage-05 agent stack.

The task loader, the stage's ``harbor`` environment and its ``execute_command`` tool, the local bubblewrap
runtime, each task's own ``tests/test.sh``, the agent loop and the cell rules are real; the tasks are the
Harbor-layout fixtures of ``tests/fixtures/terminal_bench`` (a Terminal-Bench-2-shaped task and a SWE-bench
Verified-shaped folder as Harbor's swebench adapter writes it, its repository small enough for ``/app``) and
one task of ``data_prep.harbor_generate``. The one double stands at the boundary we cannot run here, the
policy behind ``/generate``: a backend served by the same loopback ``GenerateServer`` the other harness
tests use, which plays a fixed plan per task (the reference command for the tasks it solves, ``ls`` for the
others), because an untrained model cannot be steered into tool calls. The Docker daemon and E2B are not
here either: their tests check that the cell is missing with the reason. Sandbox tests skip without root.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from agents_scripted import micro_tokenizer, tid

from data_prep.harbor_generate import generate
from eval.harnesses import terminal_bench
from eval.harnesses.protocol import CellResult
from eval.harnesses.terminal_bench_env import NO_CAP_S, env_options, load_bench
from infra.agents.harbor.sandboxes import clip, verifier_uploads
from infra.agents.harbor.task import load_task
from infra.agents.local_server import GenerateServer, micro_model_dir
from infra.embedded.generation import Generation

FIXTURES = Path(__file__).parent / "fixtures"
TB = FIXTURES / "terminal_bench"
OBS, EOS = "<|observation|>", "<|endoftext|>"
SOLVES = {  # a phrase of the instruction -> the command the policy double runs
    "Count the lines of /app/server.log": "wc -l < /app/server.log > /app/lines.txt",
    "calc.add gives the wrong sum": "sed -i 's/abs(a) + abs(b)/a + b/' /app/calc.py",
}


class PlanBackend:
    """One tool call, then a final answer: the solving command when the prompt holds a task it solves,
    ``ls`` otherwise. Stateless across episodes (the turn is the count of assistant turns so far)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok

    def __call__(self, ids: list[int], **kw: Any) -> Generation:
        prompt = self.tok.decode(ids)
        command = next((c for phrase, c in SOLVES.items() if phrase in prompt), "ls")
        args = f"<arg_key>command</arg_key><arg_value>{command}</arg_value>"
        call = f"<tool_call>execute_command{args}</tool_call>"
        text, end = [(call, OBS), ("Done.", EOS)][min(prompt.count("<|assistant|>") - 1, 1)]
        out = self.tok.encode(text, add_special_tokens=False)[: kw["max_new_tokens"] - 1] + [
            tid(self.tok, end)
        ]
        return Generation(out, [-0.1] * len(out), "stop")


@pytest.fixture(scope="module")
def policy() -> Any:
    tok = micro_tokenizer()
    with GenerateServer(PlanBackend(tok), tok, max_context_tokens=4096) as server:
        yield server


def _tb_root(root: Path) -> Path:
    """count-lines (the policy solves it), a generated task (it does not) and a malformed folder."""
    generate(root, seed=0, n=1)
    shutil.copytree(TB / "count-lines", root / "count-lines")
    shutil.copytree(FIXTURES / "harbor" / "malformed" / "unknown-table", root / "broken-task")
    return root


def _run(bench: str, data: Path, out: Path, model_url: str, *extra: str) -> int:
    argv = [
        "--bench", bench, "--data", str(data), "--model-url", model_url,
        "--tokenizer", str(micro_model_dir()), "--out", str(out), "--concurrency", "2",
        "--env-option", "max_context_tokens=4096", "--env-option", "max_new_tokens=256",
        "--env-option", "spares=0", *extra,
    ]  # fmt: skip
    return terminal_bench.main(argv)


def _cell(out: Path) -> CellResult:
    return CellResult.model_validate_json(out.read_text())


def _items(out: Path) -> dict[str, dict[str, Any]]:
    lines = out.with_suffix(".items.jsonl").read_text().splitlines()
    return {r["task"]: r for r in map(json.loads, lines)}


# ------------------------------------------------------------------------------------------------ loading
def test_both_layouts_load_and_a_broken_folder_is_dropped_and_named(tmp_path: Path) -> None:
    root = _tb_root(tmp_path / "tb")
    shutil.copytree(FIXTURES / "harbor" / "valid" / "tb-hello-world", root / "tb-hello-world")  # task.yaml
    loaded = load_bench("terminal_bench_2_1", root)
    assert [t.name for t in loaded.tasks] == ["count-lines", "tb-hello-world", "text-sort-0000"]
    assert {t.layout for t in loaded.tasks} == {"harbor", "terminal-bench"}
    [error] = loaded.dropped
    assert error.startswith(f"{(root / 'broken-task').absolute()}: task.toml: [") and "\n" not in error
    swe = tmp_path / "swe"
    shutil.copytree(TB / "rufus__calc-1", swe / "rufus__calc-1")
    bad = shutil.copytree(TB / "rufus__calc-1", swe / "rufus__calc-2")
    row = json.loads((bad / "tests" / "config.json").read_text())
    (bad / "tests" / "config.json").write_text(json.dumps({**row, "FAIL_TO_PASS": "[]"}))
    shutil.copytree(TB / "count-lines", swe / "no-instance-row")  # loads as Harbor, has no tests/config.json
    loaded = load_bench("swe_bench_verified", swe)
    assert [t.name for t in loaded.tasks] == ["rufus__calc-1"]
    assert loaded.instance_ids == {"rufus__calc-1": "rufus__calc-1"}
    assert sorted(e.split(": ", 1)[1] for e in loaded.dropped) == [
        "tests/config.json: FAIL_TO_PASS is empty",
        "tests/config.json: missing (the instance row the tests grade)",
    ]


def test_the_stage_env_spec_gives_the_limits_and_overrides_apply(tmp_path: Path) -> None:
    spec, options = env_options(terminal_bench.STAGE_CONFIG, ["command_timeout=5"])
    assert "tasks" not in options and spec.startswith("harbor:max_tool_calls=200,")
    assert (options["max_tool_calls"], options["max_context_tokens"], options["max_new_tokens"]) == (
        200,
        61440,
        8192,
    )
    assert options["command_timeout"] == 5 and options["verifier_timeout"] == NO_CAP_S
    assert options["partial_credit"] is False  # the benchmarks score binary, whatever the stage's spec
    with pytest.raises(ValueError, match="--env-option 'tasks=/x': expected KEY=VALUE"):
        env_options(terminal_bench.STAGE_CONFIG, ["tasks=/x"])
    (tmp_path / "launch.yaml").write_text("rl: {environment: {options: {env: 'awm:release=x'}}}\n")
    with pytest.raises(ValueError, match="rl.environment.options.env: 'awm' is not the harbor environment"):
        env_options(tmp_path / "launch.yaml", [])


# --------------------------------------------------------------------------------------------- episodes
@pytest.fixture(scope="module")
def tb_run(sandbox_ok, policy, tmp_path_factory) -> tuple[int, Path, Path]:
    root = _tb_root(tmp_path_factory.mktemp("tb") / "tasks")
    out = root.parent / "terminal_bench_2_1" / "result.json"
    return _run("terminal_bench_2_1", root, out, policy.url, "--trials", "2"), root, out


def test_one_task_solved_one_failed_gives_pass_at_1_of_50(tb_run) -> None:
    rc, root, out = tb_run
    cell = _cell(out)
    assert rc == 0 and not cell.missing and cell.score == pytest.approx(50.0), cell.reason
    assert cell.metric == "pass@1" and cell.metrics == {"attempt_pass_rate": 50.0, "pass@2": 50.0}
    assert cell.counts == {
        "items": 2, "scored": 2, "unscored": 0, "tasks": 2, "attempts": 4, "scored_attempts": 4,
        "aborted_attempts": 0, "unrunnable_tasks": 0, "dropped_on_load": 1, "retried": 0,
    }  # fmt: skip
    items = _items(out)
    assert (items["count-lines"]["score"], items["text-sort-0000"]["score"]) == (1.0, 0.0)
    for name, passed in (("count-lines", 1.0), ("text-sort-0000", 0.0)):
        trials = items[name]["trials"]
        assert [(t["trial"], t["passed"], t["termination"]) for t in trials] == [
            (0, passed, "final_answer"),
            (1, passed, "final_answer"),
        ]
        calls = [c for e in trials[0]["transcript"] for c in e.get("tool_calls", [])]
        assert [c["name"] for c in calls] == ["execute_command"]
    assert "tests_failed" in json.dumps(items["text-sort-0000"]["trials"][0]["details"])


def test_the_protocol_records_what_moves_the_score(tb_run) -> None:
    _, root, out = tb_run
    p = _cell(out).protocol
    assert (p.benchmark, p.n, p.k, p.harness) == ("terminal_bench_2_1", 2, 2, "eval.harnesses.terminal_bench")
    assert len(p.harness_commit.split("+")[0]) == 40
    assert p.tool_backends["execute_command"].startswith("local bubblewrap sandbox")
    assert p.limits["max_tool_calls"] == 200 and p.limits["max_iterations"] == 200
    assert p.limits["max_context_tokens"] == 4096 and p.limits["tool_result_max_tokens"] == 4096
    s = p.settings
    assert s["runtime"] == "local" and s["benchmark_version"].startswith("Terminal-Bench 2.1")
    assert s["max_turns"] == 200 and s["command_timeout_s"] == 30.0 and s["output_tokens_per_stream"] == 512
    assert s["verifier_timeout"].startswith("the task's own [verifier].timeout_sec")
    assert s["verifier_timeout_s"] == {"min": 30.0, "max": 120.0}
    assert s["task_agent_timeout_s"] == {"min": 120.0, "max": 600.0} and s["agent_timeout"].startswith("not")
    assert "max_context_tokens=4096" in s["env_spec"] and "partial_credit=False" in s["env_spec"]
    assert len(s["tasks_sha256"]) == 64 and len(s["dropped_on_load"]) == 1
    assert (s["trials"], s["retries"], s["max_aborted"]) == (2, 1, 0.0)


def test_swe_bench_verified_folders_are_graded_by_their_own_tests(sandbox_ok, policy, tmp_path: Path) -> None:
    root = tmp_path / "swe"
    shutil.copytree(TB / "rufus__calc-1", root / "rufus__calc-1")
    other = shutil.copytree(TB / "rufus__calc-1", root / "rufus__calc-2")  # the policy does not know it
    (other / "instruction.md").write_text("calc.add is wrong when an argument is negative.\n")
    row = json.loads((other / "tests" / "config.json").read_text())
    (other / "tests" / "config.json").write_text(json.dumps({**row, "instance_id": "rufus__calc-2"}))
    out = tmp_path / "swe_bench_verified" / "result.json"
    assert _run("swe_bench_verified", root, out, policy.url, "--expected-tasks", "2") == 0
    cell = _cell(out)
    assert cell.score == pytest.approx(50.0) and cell.protocol.settings["benchmark_version"].startswith(
        "SWE-bench Verified"
    )
    items = _items(out)
    assert {n: (i["instance_id"], i["passed"]) for n, i in items.items()} == {
        "rufus__calc-1": ("rufus__calc-1", 1),
        "rufus__calc-2": ("rufus__calc-2", 0),  # FAIL_TO_PASS still fails: not resolved
    }
    assert items["rufus__calc-2"]["trials"][0]["details"]["failure"] == "tests_failed"


def test_an_aborted_attempt_is_missing_not_zero(sandbox_ok, policy, tmp_path: Path) -> None:
    root = _tb_root(tmp_path / "tasks")
    crashed = shutil.copytree(root / "count-lines", root / "verifier-crash")
    (crashed / "tests" / "test.sh").write_text("#!/bin/bash\nexit 3\n")  # writes no reward file
    out = tmp_path / "strict" / "result.json"
    assert _run("terminal_bench_2_1", root, out, policy.url, "--retries", "1") == 3
    cell = _cell(out)
    assert cell.missing and cell.score is None
    assert cell.reason.startswith("1 of 3 attempts aborted (infrastructure failures after 1 retries")
    assert "reward_file" in cell.reason and cell.counts["retried"] == 1
    item = _items(out)["verifier-crash"]
    assert (item["score"], item["scored"], item["aborted"]) == (None, 0, 1)
    assert (item["trials"][0]["reward"], item["trials"][0]["passed"], item["trials"][0]["attempts"]) == (
        None,
        None,
        2,
    )
    # tolerated, the aborted attempt stays out of the mean: 1 of 2 scored tasks, not 1 of 3
    out = tmp_path / "tolerant" / "result.json"
    assert _run("terminal_bench_2_1", root, out, policy.url, "--retries", "0", "--max-aborted", "0.4") == 0
    cell = _cell(out)
    assert cell.score == pytest.approx(50.0) and cell.counts["aborted_attempts"] == 1
    assert cell.counts["unscored"] == 1 and _items(out)["verifier-crash"]["score"] is None


def test_a_task_the_runtime_cannot_run_is_aborted_on_every_attempt(
    sandbox_ok, policy, tmp_path: Path
) -> None:
    root = tmp_path / "tasks"
    shutil.copytree(TB / "count-lines", root / "count-lines")
    build = shutil.copytree(TB / "count-lines", root / "needs-build")
    (build / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN apt-get install -y jq\n")
    out = tmp_path / "result.json"
    assert _run("terminal_bench_2_1", root, out, policy.url, "--trials", "2") == 3
    cell = _cell(out)
    assert cell.missing and "2 of 4 attempts aborted" in cell.reason and "not files-only" in cell.reason
    item = _items(out)["needs-build"]
    assert (item["aborted"], item["trials"], cell.counts["unrunnable_tasks"]) == (2, [], 1)


# ------------------------------------------------------------------------------------- preflight and CLI
@pytest.mark.parametrize(
    ("runtime", "env", "needle"),
    [
        ("docker", {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, "docker backend: "),
        ("e2b", {"E2B_API_KEY": None}, "e2b backend: "),
    ],
)
def test_a_production_backend_that_cannot_run_here_makes_the_cell_missing(
    policy, tmp_path: Path, monkeypatch, runtime: str, env: dict[str, str | None], needle: str
) -> None:
    for key, value in env.items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    root = tmp_path / "tasks"
    shutil.copytree(TB / "rufus__calc-1", root / "rufus__calc-1")
    out = tmp_path / "result.json"
    assert _run("swe_bench_verified", root, out, policy.url, "--runtime", runtime) == 3
    cell = _cell(out)
    assert cell.missing and cell.reason.startswith("preflight failed: ") and needle in cell.reason
    assert cell.protocol.settings["runtime"] == runtime and not out.with_suffix(".items.jsonl").exists()


def test_too_few_task_folders_and_a_dead_model_server_fail_the_preflight(tmp_path: Path) -> None:
    root = _tb_root(tmp_path / "tasks")
    out = tmp_path / "result.json"
    assert _run("terminal_bench_2_1", root, out, "http://127.0.0.1:9", "--expected-tasks", "89") == 3
    reason = _cell(out).reason
    assert "model server http://127.0.0.1:9: /health failed" in reason
    assert "2 task folders loaded, the benchmark has 89 (dropped 1: " in reason and "broken-task" in reason


def test_templates_to_bake_and_usage_errors(tmp_path: Path, capsys) -> None:
    root = _tb_root(tmp_path / "tasks")
    spec = tmp_path / "templates.json"
    argv = ["--bench", "terminal_bench_2_1", "--data", str(root), "--runtime", "e2b"]
    assert terminal_bench.main([*argv, "--write-templates", str(spec)]) == 0
    rows = json.loads(spec.read_text())
    assert [r["alias"] for r in rows] == ["rufus-eval-count-lines", "rufus-eval-text-sort-0000"]
    assert rows[0]["memory_mb"] == 2048 and rows[0]["dockerfile"].endswith(
        "count-lines/environment/Dockerfile"
    )
    assert terminal_bench.main(["--bench", "terminal_bench_2_1", "--data", str(tmp_path / "none"),
                                "--model-url", "micro", "--out", str(tmp_path / "r.json")]) == 2  # fmt: skip
    assert "not a folder of task folders" in capsys.readouterr().err


def test_the_verifier_uploads_and_stream_cuts_of_the_container_sessions() -> None:
    harbor = load_task(TB / "rufus__calc-1")
    assert [dest for _, dest in verifier_uploads(harbor)] == [
        "/tests/config.json",
        "/tests/grade.py",
        "/tests/test.sh",
        "/tests/test_calc.py",
    ]
    legacy = load_task(FIXTURES / "harbor" / "valid" / "tb-hello-world")
    assert verifier_uploads(legacy)[-1][1] == "/tests/run-tests.sh"
    long = clip(b"a" * 1000 + b"b" * 1000, 300)
    assert long.startswith("a") and long.endswith("b") and "2000 bytes, middle cut" in long
    assert len(long.encode()) <= 300 and clip(b"short", 300) == "short"
