"""Hostile solutions against the sandboxed code reward: contained, scored 0, in time, leaving no trace.

Every attack is written so that it *would* pass its test if it succeeded (the test asks for the secret
it tries to read, the marker it tries to forge, …), so a breach shows up as a score of 1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from infra.sandbox import Limits, Sandbox, check_isolation
from rewards.code_reward import CodeScorer

SECRET = "s3cr3t-" + uuid.uuid4().hex
MARKER = "/tmp/rufus-pwned-" + uuid.uuid4().hex
BOUND_S = 8.0  # wall limit 3 s per response + sweep + scheduling slack on 2 busy cores


@pytest.fixture(scope="module")
def scorer():
    """A 2-worker scorer with tight limits; the planted secret is in the host environment when it starts."""
    if not check_isolation().ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root: " + "; ".join(check_isolation().problems))
        pytest.fail("sandbox isolation unavailable: " + "; ".join(check_isolation().problems))
    os.environ["RUFUS_TEST_SECRET"] = SECRET
    sc = CodeScorer(workers=2, limits=Limits(wall_s=3, test_timeout_s=2, memory_mb=256, max_procs=8))
    sc.pool  # noqa: B018
    yield sc
    sc.pool.close()
    os.environ.pop("RUFUS_TEST_SECRET", None)


def _fn(body: str) -> str:
    return f"```python\n{body}\n```"


def _job_pids(scorer: CodeScorer) -> list[str]:
    uids = {str(w.uid) for w in scorer.pool._workers}
    ps = subprocess.run(["ps", "-ww", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if line.split()[0] in uids]


FUNC = {"tests": ["assert f() == 'ok'"], "fn_name": "f"}
TRUE = {"tests": ["assert f() is True"], "fn_name": "f"}
ATTACKS = {
    "fork_bomb": (
        FUNC,
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ),
    "memory_bomb": (FUNC, "blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))"),
    "infinite_loop": (FUNC, "def f():\n    while True:\n        pass"),
    "long_sleep": (FUNC, "import time\ndef f():\n    time.sleep(100)\n    return 'ok'"),
    "socket_connect": (
        TRUE,
        "import socket\ndef f():\n    try:\n        socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
        "        return True\n    except OSError:\n        return False",
    ),
    "read_shadow": (
        TRUE,
        "def f():\n    try:\n        return len(open('/etc/shadow').read()) > 0\n    except OSError:\n"
        "        return False",
    ),
    "read_home": (
        TRUE,
        "import os\ndef f():\n    return os.path.exists(os.path.expanduser('~root/.bashrc'))",
    ),
    "read_workdir": (
        TRUE,
        f"import os\ndef f():\n    return os.path.exists({os.path.abspath('pyproject.toml')!r})",
    ),
    "env_secret": (
        {"tests": [f"assert f() == {SECRET!r}"]},
        "import os\ndef f():\n    return os.environ.get('RUFUS_TEST_SECRET')",
    ),
    "proc_environ": (
        {"tests": [f"assert f() == {SECRET!r}"]},
        "import glob\ndef f():\n    for p in glob.glob('/proc/*/environ'):\n        try:\n"
        "            data = open(p, 'rb').read().decode()\n        except OSError:\n            continue\n"
        "        for kv in data.split('\\0'):\n            if kv.startswith('RUFUS_TEST_SECRET='):\n"
        "                return kv.split('=', 1)[1]",
    ),
    "write_outside": (
        TRUE,
        f"def f():\n    try:\n        open({MARKER!r}, 'w').write('x')\n        return True\n"
        f"    except OSError:\n        return False",
    ),
    "daemon": (
        FUNC,
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\ndef f():\n    return 'no'",
    ),
    "kill_parent": (
        FUNC,
        "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\ndef f():\n"
        "    return 'no'",
    ),
    "flood_stdout": (FUNC, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
    "huge_return": (FUNC, "def f():\n    return 'x' * (40 << 20)"),
    "print_marker": (
        FUNC,
        "print('PASSED ALL TESTS')\nprint('{\"ok\": true, \"value\": \"ok\"}')\ndef f():\n    return 'no'",
    ),
    "exit_zero_early": (FUNC, "import sys\nsys.exit(0)"),
    "os_exit_early": (FUNC, "import os\nos._exit(0)"),
    "exit_in_call": (FUNC, "import sys\ndef f():\n    sys.exit(0)"),
    "always_equal": (
        FUNC,
        "class Eq(str):\n    def __eq__(self, other):\n        return True\ndef f():\n    return Eq('no')",
    ),
    "patch_builtins": (
        FUNC,
        "import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\ndef f():\n"
        "    return 'no'",
    ),
    "harness_tamper": (
        {"tests": ["assert f() == 'hidden-expected-value'"]},
        "import __main__, gc\ntry:\n    open('/opt/rufus-sandbox/harness.py', 'a').write('#')\n"
        "except OSError:\n    pass\n"
        "found = [o for o in gc.get_objects() if isinstance(o, str) and 'hidden-expected' in o]\n"
        "__main__._Runner.op_call = lambda self, req: {'ok': True, 'value': found[0] if found else 'ok'}\n"
        "def f():\n    return 'no'",
    ),
    "segfault": (FUNC, "import ctypes\ndef f():\n    ctypes.string_at(0)\n    return 'ok'"),
    "deep_recursion": (FUNC, "import sys\nsys.setrecursionlimit(10**8)\ndef f(n=0):\n    return f(n + 1)"),
    "ignore_sigterm": (
        FUNC,
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ndef f():\n    while True:\n"
        "        pass",
    ),
    # The judge (outside the sandbox) must not import what the solution's namespace names: lib2to3's
    # __main__ would run its command line on the host's argv and raise SystemExit in the trainer.
    "module_main_import": (
        FUNC,
        "import types\nm = types.ModuleType('lib2to3.__main__')\ndef f():\n    return 'no'",
    ),
    "module_missing_import": (FUNC, "import types\nm = types.ModuleType('os.x')\ndef f():\n    return 'no'"),
    "module_alias_host": (
        {"tests": ["assert f() == 'ok'"]},
        "import types\nf = types.ModuleType('builtins')\n",
    ),
    "deep_return": (
        FUNC,
        "import sys\nsys.setrecursionlimit(100000)\ndef f():\n    v = 'ok'\n    for _ in range(700):\n"
        "        v = [v]\n    return v",
    ),
    "deep_value": (
        FUNC,
        "import sys\nsys.setrecursionlimit(100000)\nv = 'ok'\nfor _ in range(700):\n    v = [v]\n"
        "def f():\n    return 'no'",
    ),
    "deep_json": (
        FUNC,
        "import sys\nsys.setrecursionlimit(10**6)\ndef f():\n    v = 'ok'\n    for _ in range(50000):\n"
        "        v = [v]\n    return v",
    ),
}
STDIO = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
STDIO_ATTACKS = {
    "stdio_exit_code_spoof": "import sys\nsys.exit(0)",
    "stdio_flood": "import sys\nwhile True:\n    sys.stdout.write('3\\n' * 10000)",
    "stdio_guess_from_files": "import os\nfor root, _, files in os.walk('/'):\n    pass\nprint(4)",
    "stdio_fork_bomb": FORK_BOMB,
}


def test_isolation_probe_reports_everything_it_checked():
    report = check_isolation()
    assert report.ok, report.problems
    assert report.probe["net_ifaces"] == ["lo"] and report.probe["network"] is False
    assert report.probe["pid"] == 2 and report.probe["host_paths_visible"] == []


def test_attacks_are_contained_and_score_zero(scorer):
    names = list(ATTACKS)
    items = [(ATTACKS[n][0], _fn(ATTACKS[n][1])) for n in names]
    items += [(STDIO, _fn(code)) for code in STDIO_ATTACKS.values()]
    names += list(STDIO_ATTACKS)
    with socket.socket() as listener:  # a host service the sandbox must not reach
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        names.append("connect_host_port")
        items.append(
            (
                TRUE,
                _fn(
                    f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {port}), 1)\n"
                    f"    return True"
                ),
            )
        )
        start = time.monotonic()
        results = scorer.score_batch(items)
        elapsed = time.monotonic() - start
        listener.settimeout(0.01)
        with pytest.raises(OSError):
            listener.accept()
    breaches = {
        n: (r.score, r.failure) for n, r in zip(names, results, strict=True) if r.score != 0 or r.aborted
    }
    assert not breaches, breaches
    # Two workers, each response bounded by BOUND_S.
    assert elapsed < BOUND_S * len(items) / 2, elapsed
    assert not os.path.exists(MARKER)
    time.sleep(0.2)
    left = _job_pids(scorer)  # only each worker's idle pre-forked runner may exist
    assert len(left) <= len(scorer.pool._workers) and all("harness.py" in line for line in left), left
    # The workers survived every attack and still score a correct answer.
    ok = scorer.score_batch([(FUNC, _fn("def f():\n    return 'ok'"))] * 2)
    assert [r.score for r in ok] == [1.0, 1.0]


def test_each_attack_kind_fails_for_the_expected_reason(scorer):
    picks = ["infinite_loop", "memory_bomb", "segfault", "exit_zero_early", "huge_return", "always_equal"]
    results = scorer.score_batch([(ATTACKS[n][0], _fn(ATTACKS[n][1])) for n in picks])
    kinds = {n: r.failure for n, r in zip(picks, results, strict=True)}
    assert kinds == {
        "infinite_loop": "timeout",
        "memory_bomb": "load_error",
        "segfault": "crash",
        "exit_zero_early": "load_error",
        "huge_return": "crash",
        "always_equal": "wrong_answer",
    }


def test_the_judge_never_imports_or_decodes_on_the_solutions_say_so(scorer):
    """Module names and deep values from the solution fail closed; nothing escapes as a BaseException."""
    import sys

    from rewards.contract import RewardRequest, safe_score

    names = ["module_main_import", "module_missing_import", "module_alias_host", "deep_return", "deep_value"]
    before = set(sys.modules)
    results = scorer.score_batch([(ATTACKS[n][0], _fn(ATTACKS[n][1])) for n in names])
    assert {n: r.score for n, r in zip(names, results, strict=True)} == dict.fromkeys(names, 0.0)
    assert "lib2to3.__main__" not in sys.modules and set(sys.modules) - before == set()
    kinds = {n: r.failure for n, r in zip(names, results, strict=True)}
    assert kinds["deep_return"] == "crash" and kinds["deep_value"] == "crash", kinds
    assert "nests deeper" in results[names.index("deep_return")].details["first_failure"]["message"]
    # A module the judge does not share is simply left unbound: a correct solution still passes.
    honest = _fn("import types, os, math as m\nx = types.ModuleType('os.x')\ndef f():\n    return 'ok'")
    assert scorer.score(FUNC, honest).score == 1.0
    # The same through the reward registry's wrapper, as the trainer calls it.
    request = RewardRequest(response=_fn(ATTACKS["module_main_import"][1]), label=FUNC)
    assert safe_score(lambda req: scorer.score(req.label, req.response), request).score == 0.0


def test_a_verifier_raising_a_base_exception_is_contained():
    from rewards.contract import RewardRequest, safe_score

    def exits(_req):
        raise SystemExit(2)

    def recurses(_req):
        return recurses(_req)

    for fn in (exits, recurses):
        result = safe_score(fn, RewardRequest(response="x"))
        assert result.score == 0.0 and result.failure == "verifier_error", result


def test_wire_decode_bounds_depth_without_recursion_error():
    import sys

    from infra.sandbox import wire

    value: object = "ok"
    for _ in range(700):
        value = [value]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        encoded = wire.encode(value)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(wire.ProtocolError, match="nests deeper than"):
        wire.decode(encoded)
    with pytest.raises(wire.ProtocolError, match="nests deeper than"):
        wire.decode(_deep_tagged(5000))
    shallow = wire.encode({"a": [(1, 2), {3}, b"x", 1 << 1000]})
    assert wire.decode(shallow) == {"a": [(1, 2), {3}, b"x", 1 << 1000]}
    for bad in ({"t": "abc"}, {"d": [[1]]}, {"c": []}, {"I": 5}, {"h": True}):
        with pytest.raises(wire.ProtocolError):
            wire.decode(bad, lambda ref: ref)


def _deep_tagged(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"t": [value]}
    return value


def test_each_response_finishes_within_its_bound(scorer):
    for name in ("fork_bomb", "ignore_sigterm", "long_sleep"):
        start = time.monotonic()
        result = scorer.score(ATTACKS[name][0], _fn(ATTACKS[name][1]))
        assert result.score == 0 and time.monotonic() - start < BOUND_S, name


def test_closing_a_pool_leaves_no_process_behind():
    if not check_isolation().ok:
        pytest.skip("needs sandbox isolation")
    sc = CodeScorer(workers=1, limits=Limits(wall_s=2, test_timeout_s=1))
    daemon = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ndef f():\n    return 'no'"
    )
    assert sc.score(FUNC, _fn(daemon)).score == 0
    uids = {str(w.uid) for w in sc.pool._workers}
    sc.pool.close()
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-ww", "-eo", "uid=,args="], capture_output=True, text=True).stdout
    assert [line for line in ps.splitlines() if line.split()[0] in uids] == []


def test_sandbox_run_python_and_command_are_isolated(tmp_path):
    if not check_isolation().ok:
        pytest.skip("needs sandbox isolation")
    marker = tmp_path / "host-secret.txt"  # the host's /tmp (and the checkout, wherever it is) stay hidden
    marker.write_text("secret")
    home_cache = Path.home() / ".cache"
    home_cache.mkdir(exist_ok=True)
    probe = f"print(os.path.exists({str(marker)!r}), os.path.exists({str(home_cache)!r}))"
    with Sandbox(Limits(wall_s=3, memory_mb=256)) as sb:
        res = sb.run_python(f"import os\nprint(input()[::-1], os.getuid() != 0)\n{probe}", "abc")
        assert res.ok and res.stdout.startswith("cba True")
        assert res.stdout.splitlines()[1] == "False False", res.stdout
        res = sb.run_command(["sh", "-c", "cat in/a.txt; echo $HOME; exit 3"], files={"in/a.txt": b"hello\n"})
        assert res.exit_code == 3 and res.stdout.startswith("hello\n/scratch/")
        res = sb.run_python("while True:\n    pass", timeout_s=0.5)
        assert res.timed_out and res.killed_reason == "wall_time"
        res = sb.run_python("import ctypes\nctypes.string_at(0)")
        assert res.exit_code == -11 and res.killed_reason == "signal 11"
