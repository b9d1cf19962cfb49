"""Feather harness (stage 08): file-tool rules, bash and background tasks, todo, upload, tool-call order.

The file rules run twice: through :class:`FileTools` with a local transport that calls
``files.handle`` on a ``tmp_path`` folder (a stand-in for the sandbox boundary only, so the rules are
checked without root), and end to end in the real bubblewrap sandbox. Everything that needs the sandbox
(bash, background tasks, upload, the episode) skips without root, like the harbor runtime tests. In the
episode test only ``/generate`` is scripted (:mod:`agents_scripted`): an untrained model cannot be
steered into tool calls; the loop, tool layer and sandbox are real.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer

from infra.agents.contract import AgentTask, EnvironmentFailure, EpisodeLimits, Termination
from infra.agents.envs.base import AgentEnvironment
from infra.agents.feather import (
    SYSTEM_PROMPT,
    TOOLS,
    VISION,
    FeatherHarness,
    FeatherOptions,
    FeatherRuntime,
    FileTools,
    PolicyError,
    TodoList,
    coerce_args,
    pack,
    tool_specs,
    upload,
)
from infra.agents.feather import files as inside
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.sandbox import Limits
from rewards.contract import RewardRequest, RewardResult

LIMITS = Limits(wall_s=60, memory_mb=1024, max_procs=32, max_open_files=256, max_output_bytes=4 << 20)
OBS, EOS = "<|observation|>", "<|endoftext|>"


# ---------------------------------------------------------------- file rules, local transport
@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    (root / "docs" / "memo.md").write_text("# Memo\nrevenue rose\nRevenue fell\n")
    return Path(os.path.realpath(root))


@pytest.fixture
def ft(ws: Path) -> FileTools:
    def transport(request: dict) -> dict:  # the sandbox's helper_call, minus the sandbox
        head, text = inside.handle(request, root=str(ws))
        return {**head, "text": text}

    return FileTools(transport, FeatherOptions(read_limit=3, search_limit=2))


def run(ft: FileTools, op: str, **args: object) -> str:
    return ft.run(op, args)


def refused(ft: FileTools, op: str, **args: object) -> str:
    with pytest.raises(PolicyError) as info:
        ft.run(op, args)
    return str(info.value)


def test_read_numbers_lines_and_bounds_them_with_offset_and_limit(ft: FileTools, ws: Path) -> None:
    rows = ["     1\talpha", "     2\tbeta", "     3\tgamma", "     4\tdelta"]
    assert run(ft, "read", file_path="a.txt", limit=10).splitlines() == rows
    assert run(ft, "read", file_path="a.txt").splitlines() == [
        *rows[:3],
        "[lines 1-3 of 4]",
    ]  # default 3 here
    assert run(ft, "read", file_path=str(ws / "a.txt"), offset=3, limit=1) == f"{rows[2]}\n[lines 3-3 of 4]"
    assert "offset 9 is past its end" in run(ft, "read", file_path="a.txt", offset=9)
    assert ft.records[str(ws / "a.txt")] == hashlib.sha256((ws / "a.txt").read_bytes()).hexdigest()
    (ws / "chart.PNG").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    assert run(ft, "read", file_path="chart.PNG") == VISION == "Vision is not available in this environment."
    assert str(ws / "chart.PNG") not in ft.records  # an image is not a read text file
    (ws / "blob.bin").write_bytes(b"PK\x03\x04\0\0binary")
    assert "binary file" in refused(ft, "read", file_path="blob.bin")
    assert "is a directory" in refused(ft, "read", file_path="docs")
    assert "does not exist" in refused(ft, "read", file_path="nope.txt")


def test_read_keeps_within_its_byte_budget(ws: Path) -> None:
    (ws / "long.txt").write_text("".join(f"line {i} " + "x" * 90 + "\n" for i in range(500)))
    request = {"op": "read", "args": {"file_path": "long.txt", "limit": 2000}, "max_bytes": 4000}
    head, text = inside.handle(request, str(ws))
    rows = text.splitlines()
    assert (
        len(text.encode()) < 4200 and rows[-1] == f"[lines 1-{len(rows) - 1} of 500]" and head["lines"] == 500
    )


def test_edit_needs_a_unique_match_unless_replace_all(ft: FileTools, ws: Path) -> None:
    (ws / "dup.txt").write_text("x = 1\ny = 1\nx = 1\n")
    run(ft, "read", file_path="dup.txt")
    assert "not found" in refused(ft, "edit", file_path="dup.txt", old_string="z = 1", new_string="z = 2")
    msg = refused(ft, "edit", file_path="dup.txt", old_string="x = 1", new_string="x = 2")
    assert "occurs 2 times" in msg and "replace_all" in msg
    assert (ws / "dup.txt").read_text() == "x = 1\ny = 1\nx = 1\n"  # refusals change nothing
    assert "identical" in refused(ft, "edit", file_path="dup.txt", old_string="y", new_string="y")
    out = run(ft, "edit", file_path="dup.txt", old_string="y = 1", new_string="y = 3")
    assert out == f"Edited {ws}/dup.txt: 1 replacement."
    out = run(ft, "edit", file_path="dup.txt", old_string="x = 1", new_string="x = 2", replace_all=True)
    assert out.endswith("2 replacements.") and (ws / "dup.txt").read_text() == "x = 2\ny = 3\nx = 2\n"


def test_edit_and_write_refuse_a_file_changed_since_it_was_read(ft: FileTools, ws: Path) -> None:
    assert "has not been read" in refused(ft, "edit", file_path="a.txt", old_string="beta", new_string="B")
    assert "has not been read" in refused(ft, "write", file_path="a.txt", content="new")
    run(ft, "read", file_path="a.txt")
    (ws / "a.txt").write_text("alpha\nbeta (changed behind the model's back)\n")
    for op, args in (("edit", {"old_string": "beta", "new_string": "B"}), ("write", {"content": "new"})):
        assert "file changed since it was read; read it again" in refused(ft, op, file_path="a.txt", **args)
    assert (ws / "a.txt").read_text().startswith("alpha\nbeta (changed")
    run(ft, "read", file_path="a.txt")
    run(ft, "edit", file_path="a.txt", old_string="beta", new_string="B")
    run(ft, "edit", file_path="a.txt", old_string="B", new_string="C")  # the record followed the edit
    assert run(ft, "write", file_path="a.txt", content="whole\n").startswith("Wrote")
    assert run(ft, "write", file_path="new/deep/b.txt", content="fresh").startswith(
        "Created"
    )  # no read needed
    assert (ws / "new/deep/b.txt").read_text() == "fresh" and (ws / "a.txt").read_text() == "whole\n"
    run(ft, "edit", file_path="new/deep/b.txt", old_string="fresh", new_string="edited")  # write recorded it


def test_grep_and_glob_limit_their_results_and_say_when_truncated(ft: FileTools, ws: Path) -> None:
    for name in ("z.md", "b.md", "docs/c.md"):
        (ws / name).write_text("revenue\n")
    hits = ["b.md:1: revenue", "docs/c.md:1: revenue", "docs/memo.md:2: revenue rose", "z.md:1: revenue"]
    assert run(ft, "grep", pattern="revenue", limit=10).splitlines() == [*hits, "truncated: false"]
    cut = "truncated: true (the first 2 matches are shown)"
    assert run(ft, "grep", pattern="revenue").splitlines() == [*hits[:2], cut]  # the default limit here is 2
    out = run(ft, "grep", pattern="^revenue", ignore_case=True, path="docs", glob="memo.*", limit=9)
    assert out == "docs/memo.md:2: revenue rose\ndocs/memo.md:3: Revenue fell\ntruncated: false"
    assert run(ft, "grep", pattern="absent") == "No matches.\ntruncated: false"
    assert "invalid regular expression" in refused(ft, "grep", pattern="(")
    files = ["b.md", "docs/c.md", "docs/memo.md", "z.md", "truncated: false"]
    assert run(ft, "glob", pattern="**/*.md", limit=10).splitlines() == files
    assert run(ft, "glob", pattern="*.md") == "b.md\nz.md\ntruncated: false"  # one level only
    assert (
        run(ft, "glob", pattern="*.{md,txt}", limit=1)
        == "a.txt\ntruncated: true (the first 1 files are shown)"
    )
    assert run(ft, "glob", pattern="*.md", path="docs") == "docs/c.md\ndocs/memo.md\ntruncated: false"


def test_paths_that_leave_the_workspace_are_refused(ft: FileTools, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("host secret\n")
    (ws / "out_link").symlink_to(tmp_path / "outside.txt")
    (ws / "dir_link").symlink_to(tmp_path)
    (ws / "in_link").symlink_to(ws / "a.txt")
    escapes = [
        "../outside.txt",
        str(tmp_path / "outside.txt"),
        "/etc/passwd",
        "out_link",
        "dir_link/outside.txt",
    ]
    for path in [*escapes, "docs/../../outside.txt"]:
        assert "outside the workspace" in refused(ft, "read", file_path=path), path
        assert "outside the workspace" in refused(ft, "write", file_path=path, content="x"), path
    assert "outside the workspace" in refused(ft, "grep", pattern="secret", path="..")
    assert "outside the workspace" in refused(ft, "glob", pattern="*", path="dir_link")
    assert "must be relative" in refused(ft, "glob", pattern="../*")
    assert run(ft, "grep", pattern="secret") == "No matches.\ntruncated: false"  # links out are skipped
    assert (tmp_path / "outside.txt").read_text() == "host secret\n"
    assert run(ft, "read", file_path="docs/../in_link").startswith("     1\talpha")  # resolves inside: fine


# ---------------------------------------------------------------- schemas, arguments, todo, prompt
def test_specs_prompt_and_argument_checks() -> None:
    specs = tool_specs()
    names = ["read", "edit", "write", "grep", "glob", "bash", "task_output", "task_stop", "task_list", "todo"]
    assert [s["name"] for s in specs] == list(TOOLS) == names
    assert all(
        set(s) == {"name", "description", "inputSchema"} and s["inputSchema"]["json"]["type"] == "object"
        for s in specs
    )
    words = SYSTEM_PROMPT.split()  # about 1.3 tokens a word with a real BPE vocabulary: ~50 tokens
    assert 30 <= len(words) <= 42 and SYSTEM_PROMPT.count(". ") == 2 and SYSTEM_PROMPT.endswith(".")
    got = coerce_args("read", {"file_path": "a", "offset": "3", "limit": 2.0})
    assert got == {"file_path": "a", "offset": 3, "limit": 2}
    assert coerce_args("write", {"file_path": "a", "content": 42}) == {"file_path": "a", "content": "42"}
    got = coerce_args("edit", {"file_path": "a", "old_string": "x", "new_string": "y", "replace_all": "true"})
    assert got["replace_all"] is True
    for name, args, why in [
        ("nope", {}, "unknown tool"),
        ("read", {}, "needs file_path"),
        ("read", {"file_path": "a", "path": "b"}, "no argument path"),
        ("read", {"file_path": "a", "offset": 0}, "positive integer"),
        ("bash", {"command": "ls", "run_in_background": "maybe"}, "true or false"),
    ]:
        with pytest.raises(PolicyError, match=why):
            coerce_args(name, args)


def test_todo_is_replaced_wholesale_and_kept_for_compaction() -> None:
    todo = TodoList()
    assert todo.compaction_note() is None and todo.render() == "The todo list is empty."
    items = [
        {"content": "read the brief", "status": "completed"},
        {"content": "build the model", "status": "in_progress"},
    ]
    assert todo.replace(items).startswith("Todo list (1/2 completed):\n1. [completed] read the brief")
    for bad, why in [
        ([{"content": "x", "status": "done"}], "status must be one of"),
        ("x", "must be a list"),
        ([{"content": " ", "status": "pending"}], "non-empty"),
        ([{"content": "x", "status": "pending", "id": 1}], "unknown keys"),
    ]:
        with pytest.raises(PolicyError, match=why):
            todo.replace(bad)
    assert todo.snapshot() == items and todo.updates == 1  # a refused list changes nothing
    note = todo.compaction_note()
    assert note is not None and "2. [in_progress] build the model" in note


def test_pack_refuses_paths_outside_the_workspace() -> None:
    for name in ("/etc/x", "../x", "a/../../x", ""):
        with pytest.raises(ValueError, match="relative path"):
            pack({name: "x"})


# ---------------------------------------------------------------- in the sandbox
@pytest.fixture(scope="module")
def rt(sandbox_ok):
    with FeatherRuntime(limits=LIMITS, workspace_mb=16, tmp_mb=16, spares=1) as r:
        yield r


@pytest.fixture
def harness(rt):
    with rt.start() as session:
        files = {"a.txt": "alpha\nbeta\n", "docs/memo.md": "revenue rose\n", "chart.png": b"\x89PNG\0"}
        upload(session, files)
        yield FeatherHarness(session)


def ok(h: FeatherHarness, name: str, **args: object) -> str:
    text, failed = h.call(name, args)
    assert not failed, text
    return text


def error(h: FeatherHarness, name: str, **args: object) -> str:
    text, failed = h.call(name, args)
    assert failed and text.startswith("Error: "), text
    return text


def test_upload_is_one_archive_extracted_by_one_call(rt) -> None:
    workspace = {f"data/part{i:02d}.csv": f"id,value\n{i},{i * i}\n" for i in range(50)}
    workspace["deep/er/report.bin"] = bytes(range(256)) * 40
    with rt.start() as session:
        calls: list[str] = []
        execute = session.execute
        session.execute = lambda cmd, *a, **k: calls.append(cmd) or execute(cmd, *a, **k)  # count round trips
        assert upload(session, workspace) == 51 and len(calls) == 1
        session.execute = execute
        res = session.execute(
            "ls data | wc -l; sha256sum deep/er/report.bin; cat data/part07.csv; ls ../opt/*/drop"
        )
        digest = hashlib.sha256(workspace["deep/er/report.bin"]).hexdigest()
        assert res.stdout.splitlines() == ["50", f"{digest}  deep/er/report.bin", "id,value", "7,49"]
        assert "Permission denied" in res.stderr  # the drop folder cannot be listed
    assert not any(rt.drop_dir.iterdir())  # the archive is gone once extracted


def test_file_rules_hold_in_the_sandbox(harness: FeatherHarness) -> None:
    h = harness
    assert ok(h, "read", file_path="a.txt") == "     1\talpha\n     2\tbeta"
    ok(h, "bash", command="echo gamma >> a.txt")  # a shell command changes the file after the read
    stale = error(h, "edit", file_path="a.txt", old_string="beta", new_string="B")
    assert "file changed since it was read" in stale
    assert "file changed since it was read" in error(h, "write", file_path="/app/a.txt", content="x")
    assert ok(h, "read", file_path="/app/a.txt", offset=3) == "     3\tgamma\n[lines 3-3 of 3]"
    ok(h, "edit", file_path="a.txt", old_string="beta", new_string="B")
    assert ok(h, "bash", command="cat a.txt") == "alpha\nB\ngamma"
    assert ok(h, "read", file_path="chart.png") == VISION
    ok(h, "bash", command="ln -s /etc/passwd pw && ln -s / root && ln -s /opt/rufus-feather/drop drop")
    for path in ("pw", "root/etc/passwd", "../etc/passwd", "/opt/rufus-feather/files.py", "drop/x"):
        assert "outside the workspace" in error(h, "read", file_path=path), path
    big = "".join(f"{i}\n" for i in range(60000))  # ~350 KB: the request travels through the drop folder
    assert ok(h, "write", file_path="out/big.txt", content=big).startswith("Created /app/out/big.txt")
    digest = hashlib.sha256(big.encode()).hexdigest()
    assert ok(h, "bash", command="sha256sum out/big.txt").split()[0] == digest
    hits = [f"out/big.txt:{n + 1}: {n}" for n in (59990, 59991, 59992)]
    cut = "truncated: true (the first 3 matches are shown)"
    assert ok(h, "grep", pattern="^5999[0-9]$", limit=3).splitlines() == [*hits, cut]
    assert ok(h, "glob", pattern="**/*.md") == "docs/memo.md\ntruncated: false"
    assert h.records == {
        "/app/a.txt": hashlib.sha256(b"alpha\nB\ngamma\n").hexdigest(),
        "/app/out/big.txt": digest,
    }


def test_each_bash_call_is_a_fresh_shell(harness: FeatherHarness) -> None:
    h = harness
    assert ok(h, "bash", command="cd docs && export FEATHER_X=1 && pwd && echo $FEATHER_X") == "/app/docs\n1"
    assert ok(h, "bash", command="pwd; echo ${FEATHER_X:-unset}") == "/app\nunset"
    assert ok(h, "bash", command="echo out; echo err >&2; exit 3") == "out\n\n[stderr]: err\n\n[exit code]: 3"
    assert "[timed out after 1s]" in ok(h, "bash", command="sleep 5", timeout=1)
    assert "command is empty" in error(h, "bash", command=" ")


def test_background_task_lifecycle(harness: FeatherHarness) -> None:
    h = harness
    assert ok(h, "task_list") == "No background tasks."
    ticks = "for i in 1 2 3; do echo tick $i; sleep 0.4; done; echo err >&2"
    assert ok(h, "bash", command=ticks, run_in_background=True).startswith(
        "Started task_1 in the background (pid "
    )
    assert ok(h, "bash", command="sleep 300", run_in_background=True).startswith("Started task_2 ")
    assert ok(h, "task_list").splitlines() == [f"task_1\trunning\t{ticks}", "task_2\trunning\tsleep 300"]
    first = ok(h, "task_output", task_id="task_1")
    assert first.startswith("[task_1: running]\ntick 1")
    seen, deadline = [first], time.monotonic() + 20
    while "exited" not in seen[-1] and time.monotonic() < deadline:
        time.sleep(0.2)
        seen.append(ok(h, "task_output", task_id="task_1"))
    assert seen[-1].startswith("[task_1: exited with code 0]") and "[stderr]: err" in "".join(seen)
    shown = "".join(seen)
    assert [shown.count(f"tick {i}") for i in (1, 2, 3)] == [1, 1, 1]  # each piece of output shown once
    assert ok(h, "task_output", task_id="task_1") == "[task_1: exited with code 0]\n(no new output)"
    assert ok(h, "task_stop", task_id="task_2") == "Stopped task_2."
    deadline = time.monotonic() + 10  # SIGKILL was sent; the runtime reaps the process at a later call
    while (
        left := ok(h, "bash", command="pgrep -x sleep || echo none")
    ) != "none" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == "none"
    assert ok(h, "task_list").splitlines()[1] == "task_2\tstopped\tsleep 300"
    assert ok(h, "task_stop", task_id="task_1") == "task_1 is not running (exited with code 0)."
    quick = ok(h, "bash", command="echo quick; exit 4", run_in_background=True)
    if quick.startswith("Started task_3 in the background (pid "):  # a loaded machine took over 0.2 s
        time.sleep(1)
        ok(h, "task_list")
    else:
        assert quick == "Started task_3 in the background; it has already exited with code 4."
    assert ok(h, "task_output", task_id="task_3") == "[task_3: exited with code 4]\nquick"
    unknown = error(h, "task_output", task_id="task_9")
    assert "no background task 'task_9' (tasks: task_1, task_2, task_3)" in unknown


def test_a_dead_sandbox_is_an_environment_failure_not_a_policy_error(rt) -> None:
    session = rt.start()
    h = FeatherHarness(session)
    result = h.tool_result({"toolUseId": "t1", "name": "read", "input": {"file_path": "../x"}})
    assert result["status"] == "error" and "outside the workspace" in result["content"][0]["text"]
    session._box.proc.kill()
    for name, args in (("read", {"file_path": "a.txt"}), ("bash", {"command": "ls"})):
        with pytest.raises(EnvironmentFailure):
            h.call(name, args)
    session.close()
    with rt.start() as session, pytest.raises(ValueError, match="output_bytes"):
        FeatherHarness(session, FeatherOptions(result_bytes=rt.output_bytes))


# ---------------------------------------------------------------- through the agent loop
class _FeatherEnv(AgentEnvironment):
    """The smallest environment over the harness: a fresh sandbox per episode, one uploaded file."""

    name = "feather_test"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, rt: FeatherRuntime) -> None:
        self.rt, self.harness, self.session = rt, None, None

    def tools(self) -> list:
        return self.harness.tools() if self.harness is not None else []

    def tasks(self, n: int, seed: int = 0) -> list[AgentTask]:
        limits = EpisodeLimits(max_iterations=4, max_tool_calls=8, tool_result_max_tokens=512)
        messages = [{"role": "user", "content": "Fix notes.txt."}]
        return [AgentTask(id="feather-0", messages=messages, limits=limits)]

    def score(self, task: AgentTask, request: RewardRequest) -> RewardResult:
        text = self.session.execute("cat notes.txt").stdout
        return RewardResult(score=float(text == "one\nTWO\n"), details={"notes": text})

    async def reset(self, task: AgentTask) -> None:
        self.session = await asyncio.to_thread(self.rt.start)
        await asyncio.to_thread(upload, self.session, {"notes.txt": "one\n"})
        self.harness = FeatherHarness(self.session)

    async def cleanup(self) -> None:
        if self.session is not None:
            await asyncio.to_thread(self.session.close)


def _call(name: str, **args: str) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def test_tool_calls_of_one_turn_run_in_the_models_order(rt) -> None:
    env = _FeatherEnv(rt)
    calls = [
        _call("bash", command="echo two >> notes.txt"),  # 1: changes the file
        _call("read", file_path="notes.txt"),  # 2: must see line 2
        _call("edit", file_path="notes.txt", old_string="two", new_string="TWO"),  # 3: needs the read
        _call("todo", todos='[{"content": "fix notes", "status": "completed"}]'),
    ]
    tok = micro_tokenizer()
    backend = ScriptedBackend(tok, [("<think>plan</think>\n" + "".join(calls), OBS), ("Done.", EOS)])
    with GenerateServer(backend, tok, max_context_tokens=4096) as server:
        endpoint = ModelEndpoint(server.url, tok, retry_delay=0.01)
        result = asyncio.run(run_episode(env, env.tasks(1)[0], endpoint))
    assert result.termination is Termination.FINAL_ANSWER, result.error
    assert result.reward == 1.0, result.reward_details
    assert env.harness.executed == ["bash", "read", "edit", "todo"] and result.metrics["tool_errors"] == 0
    texts = [str(m) for m in result.transcript]
    assert any("     1\\tone\\n     2\\ttwo" in t for t in texts), texts
    assert env.harness.todo.snapshot() == [{"content": "fix notes", "status": "completed"}]
