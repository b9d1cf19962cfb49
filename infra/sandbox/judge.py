"""Runs a problem's tests against one sandboxed solution; every verdict is decided on the host.

Why results cannot be forged: the untrusted process only ever receives the solution code, call
arguments and stdin, and only ever returns *data* (tagged JSON of builtin types, decoded into fresh
builtin objects) or captured output. Expected values and outputs never enter the sandbox, and the test
code — ``assert`` statements, comparisons, ``math.isclose`` — runs here, in the trusted host process,
with every name the solution defines replaced by a proxy that forwards calls over the channel. So:

* printing a success marker, ``sys.exit(0)``/``os._exit(0)`` before the tests, crashing or killing the
  runner only ends the job early: a test that got no answer failed;
* patching ``AssertionError``, builtins or ``__eq__`` (an "always equal" object) changes nothing here:
  a returned object that is not plain data stays a remote handle, which equals nothing;
* the solution's answers only ever *name* things: a module it reports (``import x``) is bound to the
  judge's own copy only when ``x`` is in a fixed allowlist imported when this module loads, so the judge
  never imports, runs or decodes anything on the solution's say-so; replies are size- and depth-bounded
  (:func:`infra.sandbox.wire.decode`) and a malformed one is a crash of the job, never of the host;
* the job runs under its own uid, so it cannot signal, trace or read the zygote or the host, and the
  harness files are read-only binds. The worst a hostile job can do on its channel is answer with
  data, which is exactly what an honest solution does.

Not guaranteed: tests that need the solution's objects to behave locally (compare two custom class
instances, iterate a returned generator, pass a lambda into the solution) fail closed; and in
functional mode only top-level list/dict/set arguments are copied back after a call.
"""

from __future__ import annotations

import builtins
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

from infra.sandbox import wire
from infra.sandbox.runner import Channel, ChannelClosed, ChannelTimeout

# Modules a test may use without importing them (the usual test-file preamble).
_TEST_MODULES = ("math", "collections", "itertools", "functools", "heapq", "re", "string", "random")
# Modules a solution's ``import x`` may bind in the test namespace: side-effect-free standard library,
# imported here once. Any other module the solution reports is left unbound (a test naming it fails).
_SHARED_MODULES = (
    *_TEST_MODULES,
    *("array", "bisect", "cmath", "collections.abc", "copy", "datetime", "decimal", "fractions", "json"),
    *("numbers", "operator", "statistics", "typing", "unicodedata"),
)
_MODULES = {name: importlib.import_module(name) for name in _SHARED_MODULES}
# The most names a solution's namespace may report (each non-callable one costs a round trip).
_MAX_NAMES = 4096


class _Timeout(BaseException):
    """A call ran past its deadline (BaseException so test code's ``except Exception`` cannot hide it)."""


class _Crash(BaseException):
    """The runner died or broke the protocol."""


class RemoteError(Exception):
    """An exception raised inside the solution whose type is not a builtin exception."""


@dataclass
class TestOutcome:
    """One test's verdict: ``kind`` is pass, wrong, error, timeout, crash or output_limit."""

    index: int
    kind: str
    message: str = ""

    @property
    def passed(self) -> bool:
        """True for a passing test."""
        return self.kind == "pass"


@dataclass
class JudgeReport:
    """All verdicts for one solution; ``stage_error`` is set when the solution never got to the tests."""

    outcomes: list[TestOutcome] = field(default_factory=list)
    stage_error: str | None = None
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        """Number of passing tests."""
        return sum(o.passed for o in self.outcomes)


def _remote_exception(reply: dict) -> BaseException:
    name, msg = str(reply.get("exc", "Exception")), str(reply.get("msg", ""))
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, AssertionError):
        try:
            return cls(msg)
        except Exception:  # noqa: BLE001 - exotic constructor signature: keep the name in a RemoteError
            pass
    return RemoteError(f"{name}: {msg}")


class _Remote:
    """A name or object living in the sandbox; calling it (or an attribute of it) is a remote call."""

    __slots__ = ("_conn", "_ref", "_path")

    def __init__(self, conn: _Conn, ref: str | int, path: tuple[str, ...] = ()) -> None:
        self._conn, self._ref, self._path = conn, ref, path

    def __getattr__(self, name: str) -> _Remote:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Remote(self._conn, self._ref, (*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.call(self._ref, self._path, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed {self._ref}{''.join('.' + p for p in self._path)}>"


def _encode_arg(value: Any) -> Any:
    if isinstance(value, _Remote) and not value._path and isinstance(value._ref, int):
        return {"h": value._ref}
    if isinstance(value, list):
        return [_encode_arg(v) for v in value]
    return wire.encode(value)


class _Conn:
    """Remote calls for one test run, each bounded by the test's deadline."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.deadline = 0.0

    def request(self, req: dict) -> dict:
        try:
            return self.channel.request(req, self.deadline)
        except ChannelTimeout:
            raise _Timeout() from None
        except (ChannelClosed, wire.ProtocolError) as exc:
            raise _Crash(str(exc)) from None

    def value(self, raw: Any) -> Any:
        try:
            return wire.decode(raw, lambda ref: _Remote(self, ref))
        except wire.ProtocolError as exc:
            raise _Crash(str(exc)) from None

    def call(self, ref: str | int, path: tuple[str, ...], args: tuple, kwargs: dict) -> Any:
        try:
            req = {"op": "call", "ref": ref, "path": list(path)}
            req["args"] = [_encode_arg(a) for a in args]
            req["kwargs"] = {"d": [[k, _encode_arg(v)] for k, v in kwargs.items()]}
        except (TypeError, RecursionError) as exc:
            raise TypeError(f"argument cannot be sent to the sandbox: {exc}") from None
        reply = self.request(req)
        if not reply.get("ok"):
            raise _remote_exception(reply)
        after = reply.get("after") or {}
        if not isinstance(after, dict) or len(after) > len(args):
            raise _Crash("malformed reply: 'after' is not a map of argument positions")
        for index, raw in after.items():
            if not (isinstance(index, str) and index.isdigit() and int(index) < len(args)):
                raise _Crash(f"malformed reply: no argument at position {str(index)[:20]!r}")
            _copy_back(args[int(index)], self.value(raw))
        return self.value(reply.get("value"))


def _copy_back(target: Any, new: Any) -> None:
    """Apply an in-place mutation the solution made to an argument."""
    if isinstance(target, list) and isinstance(new, list):
        target[:] = new
    elif isinstance(target, dict) and isinstance(new, dict):
        target.clear()
        target.update(new)
    elif isinstance(target, set) and isinstance(new, (set, list)):
        target.clear()
        target.update(new)


def compile_tests(tests: list[str]) -> list[Any]:
    """Compile assert-style test strings once per problem; a test that does not compile stays a str."""
    out: list[Any] = []
    for text in tests:
        try:
            out.append(compile(text, "<test>", "exec"))
        except (SyntaxError, ValueError) as exc:
            out.append(f"test does not compile: {exc}")
    return out


def checked_names(names: object) -> dict[str, str]:
    """The solution's reported ``{name: kind}``, bounded; a reply of another shape is a crash of the job.

    Names a test cannot spell (not identifiers, or dunders) are dropped: binding them changes nothing.
    """
    if not isinstance(names, dict) or len(names) > _MAX_NAMES:
        raise _Crash(f"the solution reported a malformed namespace (a map of at most {_MAX_NAMES} names)")
    if not all(isinstance(kind, str) and len(kind) <= 300 for kind in names.values()):
        raise _Crash("the solution reported a name of a malformed kind")
    return {
        name: kind
        for name, kind in names.items()
        if isinstance(name, str) and name.isidentifier() and not name.startswith("__")
    }


def _base_namespace(conn: _Conn, names: dict[str, str]) -> dict[str, Any]:
    ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "__test__"}
    for mod in _TEST_MODULES:
        ns[mod] = _MODULES[mod]
    for name, kind in names.items():
        if kind.startswith("module:"):
            module = _MODULES.get(kind.split(":", 1)[1])  # a lookup in a fixed table, never an import
            if module is not None:
                ns[name] = module
        elif kind == "callable":
            ns[name] = _Remote(conn, name)
        else:
            reply = conn.request({"op": "get", "name": name})
            ns[name] = conn.value(reply.get("value")) if reply.get("ok") else _Remote(conn, name)
    return ns


def judge_functional(
    channel: Channel,
    code: str,
    tests: list[Any],
    fn_name: str | None,
    test_timeout_s: float,
    deadline: float,
    stop_on_failure: bool = True,
) -> JudgeReport:
    """Load ``code`` in the runner, then run each compiled test here against proxies of its names."""
    start = time.monotonic()
    report = JudgeReport()
    conn = _Conn(channel)
    conn.deadline = min(deadline, start + test_timeout_s)
    try:
        reply = conn.request({"op": "load", "code": code, "fn_name": fn_name})
        if not reply.get("ok"):
            kind = "syntax_error" if reply.get("exc") == "SyntaxError" else "load_error"
            report.stage_error, report.message = kind, f"{reply.get('exc')}: {reply.get('msg', '')}"[:500]
            return report
        names = checked_names(reply.get("names") or {})
        ns0 = _base_namespace(conn, names)
    except _Timeout:
        report.stage_error, report.message = "timeout", "loading the solution timed out"
        return report
    except _Crash as exc:
        report.stage_error, report.message = "crash", f"the solution process died while loading: {exc}"
        return report
    if fn_name and fn_name not in names:
        report.message = f"the solution does not define {fn_name!r}"
    for index, test in enumerate(tests):
        conn.deadline = min(deadline, time.monotonic() + test_timeout_s)
        outcome = _run_one(index, test, dict(ns0), conn)
        report.outcomes.append(outcome)
        if outcome.kind in ("timeout", "crash") or (stop_on_failure and not outcome.passed):
            break
    report.seconds = time.monotonic() - start
    return report


def _run_one(index: int, test: Any, ns: dict[str, Any], conn: _Conn) -> TestOutcome:
    if isinstance(test, str):
        return TestOutcome(index, "error", test)
    try:
        exec(test, ns)  # noqa: S102 - trusted test code from the dataset; solution names are proxies
    except AssertionError as exc:
        return TestOutcome(index, "wrong", str(exc)[:300] or "assertion failed")
    except _Timeout:
        return TestOutcome(index, "timeout", "test timed out")
    except _Crash as exc:
        return TestOutcome(index, "crash", str(exc)[:300])
    except Exception as exc:  # noqa: BLE001 - the solution raised, or the test itself failed
        return TestOutcome(index, "error", f"{type(exc).__name__}: {exc}"[:300])
    return TestOutcome(index, "pass")


def normalize_output(text: str) -> str:
    """LiveCodeBench-style: unify line endings, drop trailing whitespace on each line and at the end."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip()


def judge_stdio(
    channel: Channel,
    code: str,
    inputs: list[str],
    outputs: list[str],
    test_timeout_s: float,
    deadline: float,
    stop_on_failure: bool = True,
    inprocess: bool = True,
) -> JudgeReport:
    """Run ``code`` as a script once per input and compare outputs here.

    ``inprocess`` (default, fast) runs every input in the runner itself with fds 0/1/2 swapped, so a
    test that hangs or exits the process ends the job; otherwise each input gets a forked child.
    """
    start = time.monotonic()
    report = JudgeReport()
    conn = _Conn(channel)
    conn.deadline = min(deadline, start + test_timeout_s)
    try:
        reply = conn.request({"op": "script", "code": code})
    except (_Timeout, _Crash) as exc:
        report.stage_error, report.message = "crash", f"the solution process failed to start: {exc!r}"
        return report
    if not reply.get("ok"):
        kind = "syntax_error" if reply.get("exc") == "SyntaxError" else "load_error"
        report.stage_error, report.message = kind, f"{reply.get('exc')}: {reply.get('msg', '')}"[:500]
        return report
    for index, (stdin, expected) in enumerate(zip(inputs, outputs, strict=True)):
        slack = 0.0 if inprocess else 1.0  # a forked child is timed by the runner, the host only backs it up
        conn.deadline = min(deadline, time.monotonic() + test_timeout_s + slack)
        budget = max(min(test_timeout_s, deadline - time.monotonic()), 0.0)
        try:
            res = conn.request({"op": "run", "stdin": stdin, "timeout": budget, "inprocess": inprocess})
            if not res.get("ok"):
                outcome = TestOutcome(index, "crash", f"{res.get('exc')}: {res.get('msg')}")
            elif res.get("timed_out"):
                outcome = TestOutcome(index, "timeout", "test timed out")
            elif res.get("exit") != 0:
                outcome = TestOutcome(
                    index, "error", f"exit {res.get('exit')}: {str(res.get('stderr'))[-300:]}"
                )
            elif normalize_output(str(res.get("stdout", ""))) == normalize_output(expected):
                outcome = TestOutcome(index, "pass")
            else:
                outcome = TestOutcome(index, "wrong", "output differs")
        except _Timeout:
            outcome = TestOutcome(index, "timeout", "test timed out")
        except _Crash as exc:
            outcome = TestOutcome(index, "crash", str(exc)[:300])
        report.outcomes.append(outcome)
        if outcome.kind == "crash" or (inprocess and outcome.kind == "timeout"):
            break
        if stop_on_failure and not outcome.passed:
            break
    report.seconds = time.monotonic() - start
    return report
