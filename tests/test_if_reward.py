"""IF rewards: the constraint pool (reference checkers), all-rubrics-pass, teacher checkers, judge."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rewards import RewardRequest, get_reward
from rewards.if_constraints import CONSTRAINTS, IFEVAL_IDS, check_constraint

IFEVAL_25 = {
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "startend:quotation",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
}

# (id, kwargs, passing response, failing response)
CASES = [
    ("keywords:existence", {"keywords": ["river"]}, "A River runs.", "A lake."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "cat cat", "cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["dog"]}, "a doghouse", "a dog"),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
        "zoo",
        "zzz",
    ),
    (
        "language:response_language",
        {"language": "fr"},
        "Le chat est sur la table et il dort bien.",
        "The cat is on the table and it sleeps well.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "less than"},
        "One.",
        "One. Two.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", "a b"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "one two three", "one two"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "first\n\nThen more",
        "first\n\nmore",
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[a] and [b]", "[a]"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "hi\nP.S. bye", "hi"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n* b", "* a"),
    ("detectable_format:constrained_response", {}, "My answer is yes.", "Yes."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 1}, "a *b* c", "a b c"),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1 a Section 2 b",
        "Section 1 a",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "{a: 1}"),
    ("detectable_format:title", {}, "<<Sun>>\ntext", "Sun\ntext"),
    ("combination:two_responses", {}, "a\n******\nb", "a\n******\na"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi"}, "say hi. hi", "hi"),
    ("startend:end_checker", {"end_phrase": "the end"}, '"story. The end"', "the end. story"),
    ("startend:quotation", {}, '"quoted"', "quoted"),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "HELLO BIG world",
        "HELLO world",
    ),
    (
        "change_case:english_capital",
        {},
        "THE CAT IS ON THE TABLE AND IT SLEEPS WELL.",
        "The cat is on the table.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "the cat is on the table and it sleeps well.",
        "The cat is on the table.",
    ),
    ("punctuation:no_comma", {}, "a b", "a, b"),
    ("change_case:all_lowercase", {}, "abc", "Abc"),
    ("startend:start_checker", {"start_phrase": "sure"}, "Sure thing", "ok sure"),
]


def test_pool_covers_ifeval_25():
    assert IFEVAL_25 == set(IFEVAL_IDS)
    assert {c[0] for c in CASES} == set(CONSTRAINTS)


@pytest.mark.parametrize(("cid", "kwargs", "good", "bad"), CASES, ids=[c[0] for c in CASES])
def test_checker_semantics(cid, kwargs, good, bad):
    assert check_constraint(cid, good, kwargs)
    assert not check_constraint(cid, bad, kwargs)
    assert CONSTRAINTS[cid].phrase(**kwargs)


def test_bad_kwargs_are_a_bad_label_never_a_random_constraint():
    """The reference fills missing or invalid kwargs with random ones; labels must say them exactly."""
    bad = [
        {"kind": "code", "check": "detectable_content:number_placeholders", "kwargs": {}},
        {
            "kind": "code",
            "check": "keywords:letter_frequency",
            "kwargs": {"letter": "ab", "let_frequency": 1, "let_relation": "at least"},
        },
        {
            "kind": "code",
            "check": "keywords:frequency",
            "kwargs": {"keyword": "a", "frequency": 1, "relation": "about"},
        },
        {"kind": "code", "check": "startend:start_checker", "kwargs": {}},
    ]
    for rub in bad:
        assert _if("<think>t</think>\nx", [rub]).failure == "bad_label", rub


def test_checker_failure_is_named_not_passed(monkeypatch):
    from rewards import instruction_following as ifr

    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(ifr, "check_constraint", broken)
    res = _if("<think>t</think>\nx", [{"kind": "code", "check": "punctuation:no_comma"}])
    assert res.score == 0.0 and res.failure == "checker_error" and "boom" in res.details["error"]


def test_sentence_count_uses_punkt_like_the_reference():
    text = "Mr. Smith met Dr. Jones at 5 p.m. in the U.S. today. He left."
    kwargs = {"num_sentences": 3, "relation": "less than"}
    assert check_constraint("length_constraints:number_sentences", text, kwargs)
    caps = {"capital_frequency": 2, "capital_relation": "less than"}
    assert check_constraint("change_case:capital_word_frequency", "STATE-OF-THE-ART work", caps)
    assert check_constraint(
        "detectable_content:postscript", "hi\nP. P. S. more", {"postscript_marker": "P.P.S"}
    )


def _if(response: str, label, prompt=None):
    return get_reward("if_rubrics")(RewardRequest(prompt=prompt or [], response=response, label=label))


def test_all_rubrics_must_pass_and_think_is_ignored():
    label = [
        {"kind": "code", "check": "keywords:existence", "kwargs": {"keywords": ["apple"]}},
        {"kind": "code", "check": "punctuation:no_comma", "kwargs": {}},
    ]
    assert _if("<think>no, apple</think>\nan apple a day", label).score == 1.0
    res = _if("<think>t</think>\nan apple, a day", label)
    assert (
        res.score == 0.0
        and res.failure == "rubric_1_failed"
        and res.components == {"rubric_0": 1.0, "rubric_1": 0.0}
    )
    assert _if("<think>apple", label).failure == "unterminated_think"
    assert _if("<think>t</think>\nx", [{"kind": "optional", "x": 1}]).failure == "bad_label"
    assert _if("<think>t</think>\nx", [{"kind": "code", "check": "nope"}]).failure == "bad_label"


def test_judge_without_endpoint_is_aborted(monkeypatch):
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("RUFUS_JUDGE_MODEL", raising=False)
    res = _if("<think>t</think>\nhello", [{"kind": "judge", "requirement": "Is polite."}])
    assert res.aborted and res.score == 0.0 and res.failure == "judge_unavailable"
    assert not res.passed


def test_failed_code_rubric_decides_before_judge(monkeypatch):
    monkeypatch.delenv("RUFUS_JUDGE_BASE_URL", raising=False)
    label = [
        {"kind": "code", "check": "punctuation:no_comma"},
        {"kind": "judge", "requirement": "Is polite."},
    ]
    res = _if("<think>t</think>\na, b", label)
    assert res.score == 0.0 and not res.aborted


class _Judge(BaseHTTPRequestHandler):
    """Stands in for the remote OpenAI-compatible judge (a network boundary this machine cannot reach)."""

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        met = "UNMET" if "shellfish" in body["messages"][1]["content"].split("<response>")[1] else "MET"
        verdict = {
            "criteria_evaluations": [{"criterion_number": 1, "criterion_status": met, "explanation": "x"}]
        }
        out = json.dumps({"choices": [{"message": {"content": json.dumps(verdict)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *_args):
        pass


def test_judge_rubric_through_rubric_grader(monkeypatch):
    """The judge endpoint is a local HTTP double (remote API boundary); grading runs through `rubric`."""
    server = HTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("RUFUS_JUDGE_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
        monkeypatch.setenv("RUFUS_JUDGE_MODEL", "judge")
        label = [{"kind": "judge", "requirement": "Avoids shellfish given the allergy in turn 1."}]
        assert _if("<think>t</think>\nTry the pasta.", label).score == 1.0
        res = _if("<think>t</think>\nTry the shellfish.", label)
        assert res.score == 0.0 and res.failure == "rubric_0_failed" and not res.aborted
    finally:
        server.shutdown()


def test_teacher_checker_runs_in_sandbox():
    from infra.sandbox.isolation import check_isolation

    if not check_isolation().ok:
        pytest.skip("sandbox isolation unavailable on this machine")
    src = "def check(response):\n    return response.count('sun') == 1\n"
    assert _if("<think>t</think>\nthe sun", [{"kind": "code_src", "source": src}]).score == 1.0
    assert _if("<think>t</think>\nsun sun", [{"kind": "code_src", "source": src}]).score == 0.0
    broken = _if("<think>t</think>\nsun", [{"kind": "code_src", "source": "def check(r):\n    return 1/0\n"}])
    assert broken.score == 0.0 and "ZeroDivisionError" in broken.details["notes"]["rubric_0"]


def test_code_src_retries_a_broken_runner_channel_once(monkeypatch):
    """A runner whose channel breaks gets one more try on a fresh runner; a second break is not passed.

    The broken channel is simulated by replacing the single-attempt runner call (the sandbox itself is
    exercised by the other code_src tests).
    """
    from rewards import instruction_following as ifr

    calls = []

    def flaky(source, response, timeout):
        calls.append(source)
        return (False, "checker_crashed: reset") if len(calls) == 1 else (True, "")

    monkeypatch.setattr(ifr, "_run_code_src_once", flaky)
    assert ifr.run_code_src("def check(r): return True", "x") == (True, "") and len(calls) == 2
    monkeypatch.setattr(ifr, "_run_code_src_once", lambda *a: (False, "checker_crashed: reset"))
    assert ifr.run_code_src("def check(r): return True", "x") == (False, "checker_crashed: reset")
