"""``rufus validate-tasks``: FireFlash's nine gates on clean Harbor tasks and one planted defect per gate.

The tasks come from tests/fixtures/harbor_gates/build.py. The sandbox is real (these tests skip without
root, like tests/test_harbor_env.py). The one double is the remote LLM judge of gate 2: a local HTTP server
speaking the OpenAI chat API (:class:`JudgeDouble`) that flags a test comparing count.txt with "<N> lines"
(defect 2) and nothing else, so the judge client, the prompt and the parsing of the answer run for real.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from infra.agents.harbor.gates import GATES, environment_leaks, fetch_commands, leak_needles, network_settings
from infra.agents.harbor.gates_mutations import skip_last_command
from infra.agents.harbor.gates_sandbox import SCAN_PY
from infra.agents.harbor.task import load_task
from infra.agents.harbor.validate_tasks import validate_tasks

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("harbor_gates_build", FIXTURES / "harbor_gates" / "build.py")
build_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_fixtures)
WORKSPACE = ["--workspace-mb", str(build_fixtures.WORKSPACE_MB)]

app = typer.Typer(add_completion=False)
app.command()(validate_tasks)  # infra/cli.py mounts it as `rufus validate-tasks`


class JudgeDouble:
    """An OpenAI-compatible ``/chat/completions`` server standing in for the remote judge.

    ``mode="rules"``: reports an unstated requirement, quoting the test line, when the tests compare with a
    quoted "<N> lines", else none; ``mode="prose"``: answers prose instead of the JSON asked for.
    """

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.mode = "rules"
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.requests.append(body)
                reply = json.dumps({"choices": [{"message": {"content": double.answer(body)}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> str:
        if self.mode == "prose":
            return "The tests look fine to me."
        tests = body["messages"][1]["content"].split("## Tests", 1)[1]
        line = next((x.strip() for x in tests.splitlines() if re.search(r'"\d+ lines"', x)), None)
        found = [{"requirement": "count.txt must hold the number followed by ' lines'", "evidence": line}]
        return "```json\n" + json.dumps({"unstated": found if line else []}) + "\n```"


@pytest.fixture(scope="module")
def judge():
    double = JudgeDouble()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUFUS_JUDGE_BASE_URL", double.url)
        mp.setenv("RUFUS_JUDGE_MODEL", "judge-double")
        mp.delenv("RUFUS_JUDGE_API_KEY", raising=False)
        yield double
    double.server.shutdown()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> tuple[Path, dict[str, set[int]]]:
    root = tmp_path_factory.mktemp("gate-tasks") / "tasks"
    return root, build_fixtures.build(root)


@pytest.fixture(scope="module")
def full_run(sandbox_ok, judge, tasks, tmp_path_factory):
    """Every fixture task through every gate, once: (expected failures, CLI result, JSON report)."""
    root, expected = tasks
    out = tmp_path_factory.mktemp("report") / "report.json"
    result = CliRunner().invoke(app, [str(root), *WORKSPACE, "--out", str(out)])
    return expected, result, json.loads(out.read_text())


def _gates(report: dict, task: str) -> dict[int, dict]:
    [entry] = [t for t in report["tasks"] if t["task"] == task]
    return {g["gate"]: g for g in entry["gates"]}


def test_clean_tasks_pass_every_gate_and_each_defect_fails_only_its_own(full_run) -> None:
    expected, result, report = full_run
    assert result.exit_code == 1, result.output
    assert len(expected) == 13 and sum(bool(v) for v in expected.values()) == 9
    for name, must_fail in expected.items():
        gates = _gates(report, name)
        failed = {n for n, g in gates.items() if g["status"] == "fail"}
        assert failed == must_fail, (
            name,
            {n: g["evidence"] for n, g in gates.items() if n in failed | must_fail},
        )
        if not must_fail:
            assert {g["status"] for g in gates.values()} == {"pass"}, (name, gates)
    assert report["summary"] == {
        "tasks": 13, "ok": 4, "failed": sorted(n for n, v in expected.items() if v), "exit_code": 1,
    }  # fmt: skip


def test_each_failure_says_what_was_found(full_run, judge) -> None:
    _, result, report = full_run
    evidence = {int(t["task"].split("-")[1]): _gates(report, t["task"]) for t in report["tasks"]
                if t["task"].startswith("defect-")}  # fmt: skip
    assert "reward 0 (raw 0.0)" in evidence[1][1]["evidence"]
    assert (
        evidence[1][7]["status"] == "skipped"
        and "reference itself does not pass" in evidence[1][7]["evidence"]
    )
    assert (
        re.search(r'= "\d+ lines" \]', evidence[2][2]["evidence"])
        and "not found" not in evidence[2][2]["evidence"]
    )
    assert "solution/solve.sh:3: curl" in evidence[3][3]["evidence"]
    assert "0/" in evidence[4][4]["evidence"] and "No space left on device" in evidence[4][4]["evidence"]
    assert all(evidence[4][n]["status"] == "skipped" for n in (1, 3, 5, 6, 7, 8, 9))
    assert "environment/files/solve.sh holds all of solution/solve.sh" in evidence[5][5]["evidence"]
    assert "/app/solve.sh (readable by the agent)" in evidence[5][5]["evidence"]
    assert "untouched /app gets reward 0 (raw 0.5)" in evidence[6][6]["evidence"]
    assert evidence[7][7]["evidence"].startswith("no-final-newline scored wrongly")
    assert evidence[8][8]["evidence"].startswith("garbage crashed the grader")
    assert "disagree" in evidence[9][9]["evidence"]
    clean = _gates(report, "clean-text-count")
    for mutation in ("wrapped", "no-final-newline", "skip-last-command", "empty-outputs"):
        assert mutation in clean[7]["evidence"]
    assert "WRONG" not in clean[7]["evidence"] and "n/a" not in clean[7]["evidence"]
    # the judge saw the instruction, the starting files and the tests, at temperature 0
    asked = next(r for r in judge.requests if "defect-2" in r["messages"][1]["content"])
    user = asked["messages"][1]["content"]
    assert asked["temperature"] == 0.0 and "Write the number of lines in log.txt to count.txt." in user
    assert "log.txt" in user.split("## Files in /app at the start")[1] and "tests/test.sh" in user
    assert "FAIL defect-7-exact-format gate 7 (accepts_alternatives)" in result.stdout
    assert "13 task(s): 4 passed every gate that ran, 9 failed" in result.stdout


def test_report_shape(full_run) -> None:
    _, _, report = full_run
    assert set(report) == {"version", "gates", "options", "tasks", "summary"}
    assert [(g["gate"], g["name"]) for g in report["gates"]] == [(n, v[0]) for n, v in GATES.items()]
    assert (
        report["options"]["workspace_mb"] == build_fixtures.WORKSPACE_MB and report["options"]["boots"] == 3
    )
    for task in report["tasks"]:
        assert set(task) == {"task", "task_dir", "ok", "gates"} and Path(task["task_dir"]).is_dir()
        assert [g["gate"] for g in task["gates"]] == list(GATES)
        for g in task["gates"]:
            assert set(g) == {"gate", "name", "status", "evidence", "seconds"}
            assert g["status"] in ("pass", "fail", "skipped") and g["evidence"] and "\n" not in g["evidence"]
        assert task["ok"] == all(g["status"] != "fail" for g in task["gates"])


def test_exit_0_when_every_gate_that_ran_passes(sandbox_ok, tasks, monkeypatch) -> None:
    root, _ = tasks
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    result = CliRunner().invoke(app, [str(root / "clean-python-name"), *WORKSPACE, "--boots", "2"])
    assert result.exit_code == 0, result.output
    assert "skipped gate 2 (requirements_stated) on 1 task(s): no judge endpoint" in result.stdout


def test_without_a_judge_gate_2_is_skipped_never_passed(tasks, monkeypatch, tmp_path) -> None:
    root, _ = tasks
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app, [str(root / "defect-2-unstated-requirement"), "--gate", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output  # nothing that ran failed
    gates = _gates(json.loads(out.read_text()), "defect-2-unstated-requirement")
    assert gates[2]["status"] == "skipped" and "no judge endpoint" in gates[2]["evidence"]
    assert all(
        gates[n] == {**gates[n], "status": "skipped", "evidence": "not selected"} for n in range(3, 10)
    )


def test_a_judge_answer_that_is_not_json_skips_gate_2(judge, tasks, tmp_path) -> None:
    root, _ = tasks
    judge.mode = "prose"
    try:
        out = tmp_path / "r.json"
        result = CliRunner().invoke(
            app, [str(root / "defect-2-unstated-requirement"), "--gate", "2", "--out", str(out)]
        )
    finally:
        judge.mode = "rules"
    gate = _gates(json.loads(out.read_text()), "defect-2-unstated-requirement")[2]
    assert result.exit_code == 0 and gate["status"] == "skipped"
    assert gate["evidence"].startswith("judge judge-double did not answer the JSON asked for")


def test_usage_and_loading_errors_exit_2_with_one_line_naming_the_path(tasks, tmp_path) -> None:
    root, _ = tasks
    broken = shutil.copytree(FIXTURES / "harbor" / "malformed" / "unknown-table", tmp_path / "set" / "broken")
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(tmp_path / "nope")], f"{tmp_path / 'nope'}: not a directory"),
        ([str(broken.parent)], f"{broken}: task.toml"),
        ([str(broken)], f"{broken}: task.toml"),
        ([str(tmp_path / "empty")], f"{tmp_path / 'empty'}: no task dirs"),
        ([str(root), "--gate", "10"], "--gate: Value error, unknown gate numbers [10]"),
        ([str(root), "--boots", "0"], "--boots: Input should be greater than or equal to 1"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, lines)


def test_a_task_the_local_runtime_cannot_run_fails_gate_1_and_skips_the_sandbox_gates(
    sandbox_ok, tmp_path
) -> None:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app, [str(FIXTURES / "harbor" / "valid" / "tb-hello-world"), "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    gates = _gates(json.loads(out.read_text()), "tb-hello-world")
    assert gates[1]["status"] == "fail" and "cannot run in the training sandbox" in gates[1]["evidence"]
    assert all(gates[n]["status"] == "skipped" for n in (4, 6, 7, 8, 9))


def test_offline_checks_read_task_toml_and_skip_comments(tasks, tmp_path) -> None:
    root, _ = tasks
    task_dir = shutil.copytree(root / "clean-text-count", tmp_path / "t")
    assert network_settings(load_task(task_dir)) == [] and fetch_commands(load_task(task_dir)) == []
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"\n', ""))
    solve = task_dir / "solution" / "solve.sh"
    solve.write_text("# no curl here, just a comment\npip install requests\n" + solve.read_text())
    (task_dir / "tests" / "helper.py").write_text("import os\nos.system('git  clone https://x/y.git')\n")
    task = load_task(task_dir)
    assert network_settings(task) == [
        'task.toml [environment].network_mode is "public" (Harbor\'s default when unset)'
    ]
    assert fetch_commands(task) == [
        "tests/helper.py:2: os.system('git  clone https://x/y.git')",
        "solution/solve.sh:2: pip install requests",
    ]


def test_leak_needles_and_the_in_sandbox_scanner(tasks, tmp_path) -> None:
    """The scanner program run on the host over a folder (in the gate it runs inside the sandbox)."""
    root, _ = tasks
    task = load_task(root / "defect-5-leaks-solution")
    needles = leak_needles(task)
    assert {(n["source"], n["kind"]) for n in needles} >= {
        ("solution/solve.sh", "file"),
        ("tests/test.sh", "file"),
    }
    assert all("/logs/verifier" not in n["text"] for n in needles if n["kind"] == "line")
    assert environment_leaks(task, needles) == ["environment/files/solve.sh holds all of solution/solve.sh"]
    assert environment_leaks(load_task(root / "clean-text-count"), needles) == []
    (tmp_path / "app" / "sub").mkdir(parents=True)
    (tmp_path / "app" / "notes.md").write_text(
        "try: " + task.solution_script.read_text().splitlines()[-1] + "\n"
    )
    (tmp_path / "app" / "sub" / "t.sh").write_text(task.test_script.read_text())
    (tmp_path / "pruned").mkdir()
    (tmp_path / "pruned" / "t.sh").write_text(task.test_script.read_text())
    arg = tmp_path / "arg.json"
    paths = [str(tmp_path / "app"), "/nonexistent"]
    scan = {"roots": [str(tmp_path)], "prune": [str(tmp_path / "pruned")], "max_bytes": 1 << 20}
    arg.write_text(json.dumps({**scan, "needles": needles, "paths": paths}))
    done = subprocess.run(
        [sys.executable, "-c", SCAN_PY, str(arg)], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    assert not arg.exists() and report["paths"] == [str(tmp_path / "app")]
    hits = {
        (Path(h["file"]).relative_to(tmp_path).as_posix(), h["source"], h["kind"]) for h in report["hits"]
    }
    assert hits == {("app/notes.md", "solution/solve.sh", "line"), ("app/sub/t.sh", "tests/test.sh", "file")}


def test_skip_last_command_drops_the_last_command_line_only() -> None:
    script = "#!/bin/bash\n# fix it\nmkdir out\n\ncp a out/\n# done\n"
    assert skip_last_command(script) == "#!/bin/bash\n# fix it\nmkdir out\n\n# done\n"
    assert skip_last_command("#!/bin/bash\n# nothing\n") is None
