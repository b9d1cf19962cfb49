"""The Coding-RL reward: extraction, test subsampling, both judging modes, the batch API and the CLI."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from infra.sandbox import Limits, check_isolation, isolation
from infra.sandbox.judge import normalize_output
from rewards.code_cli import code_app
from rewards.code_reward import CodeScorer, Problem, extract_code, parse_problem, score_batch, select_tests
from rewards.contract import RewardRequest, get_reward


@pytest.fixture(scope="module")
def scorer():
    """A 2-worker scorer with a 1 s test timeout."""
    if not check_isolation().ok:
        if os.geteuid() != 0:
            pytest.skip("sandbox isolation needs root: " + "; ".join(check_isolation().problems))
        pytest.fail("sandbox isolation unavailable: " + "; ".join(check_isolation().problems))
    sc = CodeScorer(workers=2, limits=Limits(wall_s=4, test_timeout_s=1))
    yield sc
    sc.pool.close()


def _md(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```\n"


FUNC = {
    "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"],
    "fn_name": "add",
}
FUNC_CASES = [
    ("correct", _md("def add(a, b):\n    return a + b"), 1.0, None, 3),
    ("wrong", _md("def add(a, b):\n    return a - b"), 0.0, "wrong_answer", 0),
    ("partial", _md("def add(a, b):\n    return a + b if a > 0 else 99"), 0.0, "wrong_answer", 1),
    ("timeout", _md("def add(a, b):\n    while True:\n        pass"), 0.0, "timeout", 0),
    ("syntax_error", _md("def add(a, b) return a"), 0.0, "syntax_error", 0),
    ("no_code_block", "def add(a, b): return a + b", 0.0, "no_code_block", 0),
    ("runtime_error", _md("def add(a, b):\n    return a / 0"), 0.0, "runtime_error", 0),
]
STDIO = {"inputs": ["1 2\n", "5 7\n", "0 0\n"], "outputs": ["3\n", "12", "0\r\n"]}
STDIO_CASES = [
    ("correct", _md("a, b = map(int, input().split())\nprint(a + b)"), 1.0, None, 3),
    ("wrong", _md("a, b = map(int, input().split())\nprint(a * b + 100)"), 0.0, "wrong_answer", 0),
    (
        "partial",
        _md("a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)"),
        0.0,
        "wrong_answer",
        1,
    ),
    ("timeout", _md("import time\ntime.sleep(5)"), 0.0, "timeout", 0),
    ("syntax_error", _md("print(("), 0.0, "syntax_error", 0),
    ("no_code_block", "print(3)", 0.0, "no_code_block", 0),
    ("runtime_error", _md("raise ValueError('boom')"), 0.0, "runtime_error", 0),
    (
        "trailing_ws_ok",
        _md(
            "import sys\na, b = map(int, sys.stdin.buffer.read().split())\n"
            "sys.stdout.write(f'{a+b}   \\r\\n\\n')"
        ),
        1.0,
        None,
        3,
    ),
    ("leading_ws_wrong", _md("a, b = map(int, input().split())\nprint(' ', a + b)"), 0.0, "wrong_answer", 0),
]


@pytest.mark.parametrize(
    "problem,cases", [(FUNC, FUNC_CASES), (STDIO, STDIO_CASES)], ids=["functional", "stdio"]
)
def test_correctness_table(scorer, problem, cases):
    results = scorer.score_batch([(problem, response) for _, response, *_ in cases])
    for (name, _, score, failure, passed), result in zip(cases, results, strict=True):
        got = (result.score, result.failure, result.details["tests_passed"])
        assert got == (score, failure, passed), name
        assert result.details["tests_selected"] == 3 and not result.aborted
    assert results[0].details["first_failure"] is None
    assert results[2].details["first_failure"]["test"] == 1
    assert results[3].details["timeouts"] == 1 and results[5].details["extraction_failure"] is True


def test_functional_extras(scorer):
    items = [
        (
            {"tests": ["assert Solution().two([2, 7, 11], 9) == [0, 1]"]},
            _md(
                "class Solution:\n    def two(self, n, t):\n        return [0, 1] if n[0] + n[1] == t else []"
            ),
        ),
        (
            {"tests": ["a = [3, 1, 2]\nsort_it(a)\nassert a == [1, 2, 3]"]},
            _md("def sort_it(a):\n    a.sort()"),
        ),
        (
            {"tests": ["assert f(2) == 4"], "fn_name": "f"},
            _md("class Solution:\n    def f(self, x):\n        return x * 2"),
        ),
        (
            {"tests": ["assert math.isclose(f(), 0.3)", "assert f2() == (1, {2: {3}})"]},
            _md("import math\ndef f():\n    return 0.1 + 0.2\ndef f2():\n    return (1, {2: {3}})"),
        ),
        (
            {"tests": ["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False"]},
            _md("def f(x):\n    if x < 0:\n        raise ValueError('neg')"),
        ),
    ]
    assert [r.score for r in scorer.score_batch(items)] == [1.0] * len(items)


def test_registered_reward_and_batch_api(scorer):
    req = RewardRequest(response=_md("def add(a, b):\n    return a + b"), label=FUNC)
    assert get_reward("code")(req).score == 1.0
    bad = RewardRequest(response="x", label={"tests": "not a list"})
    out = score_batch([req, bad], scorer=scorer)
    assert out[0].score == 1.0 and out[1].failure == "invalid_problem"


def test_extract_code_takes_the_last_python_block_of_the_answer():
    text = (
        "<think>```python\nprint(0)\n```</think>```python\nprint(1)\n```\n```py\nprint(2)\n```\n"
        "```python\nprint(3)"
    )
    assert extract_code(text) == "print(2)\n"
    assert extract_code("<think>```python\nx = 1\n```</think> no code") is None
    assert extract_code("```\nprint(1)\n```") is None


def test_subsample_is_deterministic_capped_and_problem_specific():
    many = Problem("functional", tests=tuple(f"assert f({i}) == {i}" for i in range(120)))
    other = Problem("functional", tests=tuple(f"assert g({i}) == {i}" for i in range(120)))
    picked = select_tests(many)
    assert picked == select_tests(parse_problem({"tests": list(many.tests)})) and len(picked) == 50
    assert picked == sorted(set(picked)) and picked != select_tests(other)
    assert select_tests(Problem("stdio", inputs=("1",) * 7, outputs=("1",) * 7)) == list(range(7))


def test_parse_problem_names_the_bad_key():
    with pytest.raises(ValueError, match="'outputs'"):
        parse_problem({"inputs": ["1"], "outputs": "1"})
    with pytest.raises(ValueError, match="fn_name"):
        parse_problem({"tests": ["assert 1"], "fn_name": "not valid"})


def test_normalize_output_only_touches_trailing_whitespace_and_line_endings():
    assert normalize_output("1 \r\n2\t\r\n\n") == normalize_output("1\n2") == "1\n2"
    assert normalize_output(" 1") != normalize_output("1")
    assert normalize_output("1.0") != normalize_output("1")


def test_cli_scores_in_order_drops_malformed_and_is_deterministic(scorer, tmp_path):
    lines = [
        {"id": "a", "problem": FUNC, "response": _md("def add(a, b):\n    return a + b")},
        {"id": "b", "problem": STDIO, "response": _md("print(0)")},
        {"id": "c", "problem": {"nope": 1}, "response": "x"},
        {"id": "d", "problem": FUNC, "response": "no code"},
    ]
    src = tmp_path / "pairs.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken\n")
    outs = []
    for name in ("s1.jsonl", "s2.jsonl"):
        res = CliRunner().invoke(
            code_app, ["--input", str(src), "--output", str(tmp_path / name), "--workers", "2"]
        )
        assert res.exit_code == 0, res.output
        outs.append((tmp_path / name).read_text())
    rows = [json.loads(x) for x in outs[0].splitlines()]
    assert [(r["id"], r["reward"]) for r in rows] == [("a", 1.0), ("b", 0.0), ("d", 0.0)]
    assert rows[2]["failure"] == "no_code_block" and outs[0] == outs[1]


def test_missing_sandbox_aborts_instead_of_scoring_zero(monkeypatch):
    """Simulates a host without bubblewrap (the binary lookup is the boundary replaced)."""
    monkeypatch.setattr(isolation, "find_bwrap", lambda: None)
    isolation.check_isolation.cache_clear()
    try:
        result = CodeScorer(workers=1).score(FUNC, _md("def add(a, b):\n    return a + b"))
    finally:
        isolation.check_isolation.cache_clear()
    assert (
        result.aborted and result.failure == "sandbox_unavailable" and "bubblewrap" in result.details["error"]
    )


def test_unsafe_local_warns_loudly_and_still_judges():
    with pytest.warns(RuntimeWarning, match="UNSAFE"):
        sc = CodeScorer(workers=1, limits=Limits(wall_s=3, test_timeout_s=1), unsafe_local=True)
        sc.pool  # noqa: B018
    try:
        results = sc.score_batch([(FUNC, FUNC_CASES[0][1]), (FUNC, FUNC_CASES[1][1])])
        assert [r.score for r in results] == [1.0, 0.0]
    finally:
        sc.pool.close()
