"""Harbor local runtime: fresh sandbox per trajectory, execute_command, containment, the test.sh reward.

Runs the real bubblewrap sandbox (root needed; skipped otherwise, like the AWM tests). The tasks are tiny
folders built in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from infra.agents.contract import EnvironmentFailure
from infra.agents.harbor.runtime import LocalRuntime, execute_command_tool, reward_from_files
from infra.sandbox import Limits

LIMITS = Limits(wall_s=60, memory_mb=1024, max_procs=32, max_open_files=256, max_output_bytes=4 << 20)
REPO_FILE = Path(__file__).resolve().parents[1] / "pyproject.toml"


def make_task(root: Path, test_sh: str) -> tuple[Path, Path]:
    """A task folder: ``workspace/`` with two files, ``tests/test.sh`` with ``test_sh``."""
    ws, tests = root / "workspace", root / "tests"
    (ws / "src").mkdir(parents=True)
    (ws / "hello.txt").write_text("hello from the task\n")
    (ws / "src" / "app.py").write_text("print('app')\n")
    tests.mkdir()
    (tests / "test.sh").write_text(test_sh)
    (tests / "test_outputs.py").write_text("SECRET_TEST_MARKER = 1\n")
    return ws, tests


def runtime(root: Path, test_sh: str = "echo 1 > /logs/verifier/reward.txt\n", **kw) -> LocalRuntime:
    ws, tests = make_task(root, test_sh)
    opts = {"limits": LIMITS, "workspace_mb": 8, "tmp_mb": 8, "output_bytes": 2048, **kw}
    return LocalRuntime(ws, tests, **opts)


@pytest.fixture(scope="module")
def rt(sandbox_ok, tmp_path_factory):
    with runtime(tmp_path_factory.mktemp("harbor")) as r:
        yield r


@pytest.fixture
def session(rt):
    with rt.start() as s:
        yield s


def test_each_trajectory_gets_a_fresh_copy(rt) -> None:
    with rt.start() as first:
        res = first.execute("echo changed > hello.txt && touch new.txt && cat hello.txt && pwd")
        assert res.stdout == "changed\n/app\n" and res.exit_code == 0
    with rt.start() as second:
        res = second.execute("cat hello.txt; ls")
        assert res.stdout == "hello from the task\nhello.txt\nsrc\n"


def test_execute_returns_stdout_stderr_and_exit_code(session) -> None:
    res = session.execute("echo out; echo err >&2; exit 3")
    assert (res.stdout, res.stderr, res.exit_code, res.timed_out) == ("out\n", "err\n", 3, False)
    res = session.execute("cd src && python3 app.py && echo $HOME && id -u")
    out = res.stdout.split()
    assert out[:2] == ["app", "/tmp/home"] and int(out[2]) >= 100_000  # an unprivileged uid


def test_output_is_truncated_with_a_marker(session) -> None:
    res = session.execute("head -c 100000 /dev/zero | tr '\\0' a; echo END")
    assert res.truncated and "bytes truncated" in res.stdout and res.stdout.rstrip().endswith("END")
    assert len(res.stdout) < 2200


def test_timeout_kills_the_command_and_the_session_survives(session) -> None:
    start = time.monotonic()
    res = session.execute("sleep 30; echo never", timeout_s=1)
    assert res.timed_out and "never" not in res.stdout and time.monotonic() - start < 10
    res = session.execute("sleep 30 >/dev/null 2>&1 & echo started")  # background jobs do not block
    assert res.stdout == "started\n" and res.duration_s < 10
    assert session.execute("echo alive").stdout == "alive\n"


def test_no_network(session) -> None:
    res = session.execute("exec 3<>/dev/tcp/1.1.1.1/53 && echo connected")
    assert res.exit_code != 0 and "connected" not in res.stdout
    assert session.execute("cat /proc/net/dev | tail -n +3 | cut -d: -f1").stdout.split() == ["lo"]


def test_host_files_are_not_visible(session, tmp_path) -> None:
    secret = tmp_path / "host_secret.txt"
    secret.write_text("top secret\n")
    for path in (secret, REPO_FILE, Path("/etc/shadow"), Path.home() / ".bashrc"):
        res = session.execute(f"cat {path}")
        assert res.exit_code != 0 and "secret" not in res.stdout, path
    assert session.execute(f"ls {REPO_FILE.parent}/infra").exit_code != 0


def test_fork_bomb_is_contained(session) -> None:
    res = session.execute(":(){ :|:& };:; sleep 1", timeout_s=5)
    assert "Resource temporarily unavailable" in res.stderr or "retry" in res.stderr
    assert session.execute("echo alive").stdout == "alive\n"


def test_disk_fill_is_stopped_by_the_size_caps(session) -> None:
    for folder in ("/app", "/tmp", "/dev/shm"):  # files under the 4 MiB file limit, 12 MiB in all
        res = session.execute(
            f"for i in 1 2 3 4; do head -c 3M /dev/zero > {folder}/big$i; done; cat {folder}/big* | wc -c"
        )
        assert "No space left on device" in res.stderr, folder
        assert int(res.stdout.split()[0]) <= 8 << 20
        session.execute(f"rm -f {folder}/big*")


def test_file_size_limit(sandbox_ok, tmp_path) -> None:
    small = Limits(wall_s=60, max_procs=32, max_open_files=256, max_output_bytes=1 << 20)
    with runtime(tmp_path, limits=small) as r, r.start() as s:
        res = s.execute("head -c 3M /dev/zero > /app/f; stat -c %s /app/f")
        assert "File too large" in res.stderr and res.stdout.split()[-1] == str(1 << 20)


def test_read_only_system_and_no_early_tests(session) -> None:
    for path in ("/usr/evil", "/evil", "/etc/evil", "/logs/verifier/reward.txt", "/tests/x"):
        res = session.execute(f"echo 1 > {path}")
        assert res.exit_code != 0, path
    assert session.execute("ls /tests").exit_code != 0  # uploaded only at verification
    res = session.execute("cat /.rufus-private/tests/test_outputs.py; ls /.rufus-private")
    assert "SECRET_TEST_MARKER" not in res.stdout and "Permission denied" in res.stderr


@pytest.mark.parametrize(
    ("test_sh", "score", "aborted"),
    [
        ("echo 1 > /logs/verifier/reward.txt\n", 1.0, False),
        ("echo 0 > /logs/verifier/reward.txt\n", 0.0, False),
        ('echo \'{"reward": 1.0, "tests": 3}\' > /logs/verifier/reward.json\n', 1.0, False),
        ("echo 0.5 > /logs/verifier/reward.json\n", 0.0, False),
        ("echo tests ran but wrote nothing\n", 0.0, True),
        (": > /logs/verifier/reward.txt\n", 0.0, True),
        ("sleep 30\n", 0.0, True),
    ],
)
def test_verify_reads_the_reward_files(sandbox_ok, tmp_path, test_sh, score, aborted) -> None:
    with runtime(tmp_path, test_sh, verify_timeout_s=2, spares=0) as r, r.start() as s:
        result = s.verify()
    assert (result.score, result.aborted) == (score, aborted), result
    if aborted:
        assert result.failure


def test_verify_sees_the_final_state_and_tests_read_only(sandbox_ok, tmp_path) -> None:
    script = (
        "grep -q SECRET_TEST_MARKER /tests/test_outputs.py || exit 1\n"
        "touch /tests/x 2>/dev/null && exit 1\n"
        "pgrep -f 'sleep 300' && exit 1\n"  # the agent's background jobs were stopped first
        'test "$(cat /app/hello.txt)" = fixed && echo 1 > /logs/verifier/reward.txt || echo 0 > '
        "/logs/verifier/reward.txt\n"
    )
    with runtime(tmp_path, script, spares=0) as r:
        with r.start() as s:
            s.execute("(sleep 300 &) ; echo fixed > hello.txt")
            assert s.verify().score == 1.0
            with pytest.raises(EnvironmentFailure):
                s.execute("ls")  # one verification per trajectory
        with r.start() as s:
            assert s.verify().score == 0.0  # do-nothing fails


def test_a_dead_sandbox_aborts(rt) -> None:
    s = rt.start()
    s._box.proc.kill()
    with pytest.raises(EnvironmentFailure):
        s.execute("ls")
    result = s.verify()
    assert result.aborted and "sandbox" in result.failure
    s.close()


def test_execute_command_tool_text(session) -> None:
    tool = execute_command_tool(session, budget_tokens=16)
    assert tool.tool_name == "execute_command"
    assert tool.tool_spec["inputSchema"]["json"]["required"] == ["command"]

    def call(command: object) -> dict:
        async def last() -> dict:
            events = [
                e
                async for e in tool.stream(
                    {"toolUseId": "t1", "name": tool.tool_name, "input": {"command": command}}, {}
                )
            ]
            return events[-1].tool_result

        return asyncio.run(last())

    assert (
        call("echo out; echo err >&2; exit 2")["content"][0]["text"]
        == "out\n\n[stderr]: err\n\n[exit code]: 2"
    )
    assert call("true")["content"][0]["text"] == "(no output)"
    long = call("seq 1 200")
    assert long["status"] == "success" and "[truncated from 692 characters]" in long["content"][0]["text"]
    assert call("")["status"] == "error"


def test_reward_file_rules() -> None:
    assert reward_from_files({"reward.json": '{"acc": 1}', "reward.txt": "1"}).score == 1.0
    assert reward_from_files({"reward.json": "2", "reward.txt": "0"}).score == 1.0  # json first
    assert reward_from_files({"reward.json": "not json", "reward.txt": "1"}).aborted
    assert reward_from_files({"reward.json": None, "reward.txt": "pass"}).aborted
    assert reward_from_files({"reward.json": None, "reward.txt": None}).failure.startswith("reward_file")
