"""Stage 06's ``search_judge`` reward: every gate, the deterministic judge and the LLM judge.

The gates are tested on the pure :func:`search_reward` and through the registered reward on loop-shaped
transcripts, with a recording judge double where a test must see whether the judge was asked. The LLM
judge runs against a loopback HTTP double of the OpenAI chat-completions API on 127.0.0.1 (the remote
judge endpoint is a network boundary this machine cannot reach); everything between the reward and the
socket (``infra.endpoints.ChatClient``, the prompt, the verdict parser) is the product code. Property
tests (hypothesis) feed arbitrary model output, transcripts and judge replies and check nothing raises.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from fake_chat import send_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.agents.contract import Termination
from infra.endpoints import ChatClient
from rewards import RewardRequest, get_reward
from rewards.search_agent import (
    BUDGET_PENALTY,
    MALFORMED_PREFIX,
    MAX_ANSWER_CHARS,
    extract_answer,
    grade_answer,
    score_episode,
    search_reward,
    tool_stats,
)
from rewards.search_judges import (
    DeterministicJudge,
    JudgeUnparsable,
    JudgeVerdict,
    LLMJudge,
    normalise,
    parse_verdict,
)

GOLD = "Mira Kalden"
SETTINGS = settings(
    deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.fixture(autouse=True)
def no_judge_env(monkeypatch):
    """No judge configured unless a test sets one (the machine's environment must not leak in)."""
    for name in ("RUFUS_SEARCH_JUDGE", "RUFUS_JUDGE_BASE_URL", "RUFUS_JUDGE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for prefix in ("RUFUS_SEARCH_JUDGE", "RUFUS_SEARCH_EVAL_JUDGE"):
        for suffix in ("BASE_URL", "MODEL", "API_KEY"):
            monkeypatch.delenv(f"{prefix}_{suffix}", raising=False)


# ---- episode builders -----------------------------------------------------------------------------------
def _call(i: int, status: str = "success", content: str = "result") -> list[dict[str, Any]]:
    name = ("web_search", "web_scrape", "python")[i % 3]
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "name": name, "input": {}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "status": status, "content": content},
    ]


def _episode(
    final: str | None,
    ok: int = 2,
    malformed: int = 0,
    errors: int = 0,
) -> list[dict[str, Any]]:
    """A transcript with ``ok`` successful, ``malformed`` and ``errors`` failed calls, then ``final``."""
    entries: list[dict[str, Any]] = [{"role": "system", "content": "You research."}]
    i = 0
    for status, content, n in (
        ("success", "page text", ok),
        ("error", f"{MALFORMED_PREFIX} (bad arg_key); it was not executed.", malformed),
        ("error", "Error: page not found", errors),
    ):
        for _ in range(n):
            entries += _call(i, status, content)
            i += 1
    if final is not None:
        entries.append({"role": "assistant", "content": final})
    return entries


def _request(
    final: str | None, label: Any = GOLD, transcript: list | None = None, **metadata: Any
) -> RewardRequest:
    transcript = _episode(final) if transcript is None else transcript
    response = final if final is not None else ""
    return RewardRequest(
        prompt=[{"role": "user", "content": "Who founded the Aldwin observatory?"}],
        response=response,
        label=label,
        metadata=metadata,
        transcript=transcript,
    )


class RecordingJudge:
    """A judge double that returns a fixed verdict and records every question it is asked."""

    name = "recording"

    def __init__(self, score: float = 1.0) -> None:
        self.verdict = JudgeVerdict(score=score, rationale="fixed")
        self.calls: list[tuple[str, list[str], str]] = []

    def score(self, question: str, gold: Sequence[str], answer: str) -> JudgeVerdict:
        self.calls.append((question, list(gold), answer))
        return self.verdict


# ---- the gates, pure ------------------------------------------------------------------------------------
def test_no_answer_is_zero_and_budget_exhaustion_costs():
    plain = search_reward(None, None, 5, 0, 5, budget_exhausted=False)
    assert (plain.score, plain.failure) == (0.0, "no_answer")
    spent = search_reward(None, None, 5, 0, 5, budget_exhausted=True)
    assert (spent.score, spent.failure) == (BUDGET_PENALTY, "budget_exhausted") == (-0.1, "budget_exhausted")
    assert spent.components["budget_penalty"] == -0.1 and spent.components["answer_tag"] == 0.0


def test_a_verdict_without_an_answer_is_ignored():
    res = search_reward(None, JudgeVerdict(score=1.0), 5, 0, 5, budget_exhausted=False)
    assert res.score == 0.0 and "judge" not in res.components


def test_fewer_than_two_successful_calls_caps_a_correct_answer_at_zero():
    for successful in (0, 1):
        res = search_reward(GOLD, JudgeVerdict(score=1.0), successful, 0, successful, False)
        assert (res.score, res.failure) == (0.0, "too_few_tool_calls")
        assert res.components["tool_gate"] == 0.0 and res.components["judge"] == 1.0


def test_correct_with_two_calls_is_one_and_passes():
    res = search_reward(GOLD, JudgeVerdict(score=1.0), 2, 0, 2, False)
    assert res.score == 1.0 and res.failure is None and res.passed and res.parsed == GOLD


@pytest.mark.parametrize(
    ("judge", "failure"), [(0.5, "partial_credit"), (0.25, "partial_credit"), (0.0, "wrong")]
)
def test_partial_credit_passes_through(judge: float, failure: str):
    res = search_reward("Kalden", JudgeVerdict(score=judge), 3, 0, 3, False)
    assert res.score == judge and res.failure == failure and not res.passed


@pytest.mark.parametrize(
    ("successful", "malformed", "total", "factor"),
    [(2, 0, 2, 1.0), (3, 1, 4, 0.75), (4, 1, 5, 0.8), (2, 2, 4, 0.5), (2, 3, 5, 0.5), (2, 8, 10, 0.5)],
)
def test_malformed_fraction_scales_down_to_half(successful: int, malformed: int, total: int, factor: float):
    for judge in (1.0, 0.5):
        res = search_reward(GOLD, JudgeVerdict(score=judge), successful, malformed, total, False)
        assert res.score == pytest.approx(judge * factor)
        assert res.components["malformed_factor"] == pytest.approx(factor)
    assert search_reward(GOLD, JudgeVerdict(score=1.0), successful, malformed, total, False).failure is None


def test_inconsistent_counts_and_missing_verdict_are_caller_errors():
    with pytest.raises(ValueError, match="inconsistent"):
        search_reward(GOLD, JudgeVerdict(score=1.0), 3, 1, 2, False)
    with pytest.raises(ValueError, match="inconsistent"):
        search_reward(GOLD, JudgeVerdict(score=1.0), -1, 0, 2, False)
    with pytest.raises(ValueError, match="verdict"):
        search_reward(GOLD, None, 2, 0, 2, False)


def test_no_unconditional_bonus():
    """Whatever the counts, nothing positive without a judged answer, and a 0 verdict stays 0."""
    for successful, malformed in ((0, 0), (2, 0), (10, 0), (2, 2)):
        total = successful + malformed
        for exhausted in (False, True):
            assert search_reward(None, None, successful, malformed, total, exhausted).score <= 0.0
        assert search_reward(GOLD, JudgeVerdict(score=0.0), successful, malformed, total, False).score == 0.0


# ---- the gates through the registered reward ------------------------------------------------------------
def test_no_answer_tag_is_zero_and_the_judge_is_not_asked():
    judge = RecordingJudge()
    for final in (f"The answer is {GOLD}.", f"Answer: {GOLD}", f"\\boxed{{{GOLD}}}", "<answer> </answer>"):
        res = score_episode(_request(final), judge=judge)
        assert res.score == 0.0 and res.failure in ("no_answer", "empty_answer") and not res.aborted
    thinking = score_episode(_request(f"<think>maybe <answer>{GOLD}</answer></think>{GOLD}"), judge=judge)
    assert thinking.failure == "no_answer"
    cut = score_episode(_request(f"<think>so <answer>{GOLD}</answer>"), judge=judge)
    assert cut.failure == "unterminated_think"
    assert judge.calls == []


def test_tagged_answer_is_judged_with_the_question_and_all_aliases():
    judge = RecordingJudge()
    label = {"answer": GOLD, "aliases": ["M. Kalden"]}
    res = score_episode(
        _request(f"<think>found it</think>Done. <ANSWER> {GOLD} </Answer>", label), judge=judge
    )
    assert res.score == 1.0 and res.passed and res.parsed == GOLD
    assert judge.calls == [("Who founded the Aldwin observatory?", [GOLD, "M. Kalden"], GOLD)]
    assert res.details["judge"] == "recording"


def test_last_complete_answer_tag_wins():
    assert extract_answer("<answer>a</answer> then <answer>b</answer> <answer>c") == ("b", "")
    assert extract_answer("<answer>İİİ x</answer>") == ("İİİ x", "")  # lower() would shift the indices


def test_too_few_successful_calls_in_the_transcript_is_zero_without_judging():
    judge = RecordingJudge()
    for transcript in (
        _episode(f"<answer>{GOLD}</answer>", ok=1, errors=3),
        _episode(f"<answer>{GOLD}</answer>", ok=0),
    ):
        res = score_episode(_request(f"<answer>{GOLD}</answer>", transcript=transcript), judge=judge)
        assert (res.score, res.failure) == (0.0, "too_few_tool_calls")
    res = score_episode(RewardRequest(response=f"<answer>{GOLD}</answer>", label=GOLD), judge=judge)
    assert res.failure == "too_few_tool_calls"  # no transcript: no tool calls
    assert judge.calls == []


def test_malformed_and_failed_calls_are_counted_from_the_transcript():
    final = f"<answer>{GOLD}</answer>"
    stats = tool_stats(_episode(final, ok=3, malformed=1, errors=1))
    assert (stats.calls, stats.successful, stats.malformed, stats.errors) == (5, 3, 1, 1)
    unknown = _episode(None, ok=2)
    for entry in unknown:
        entry.pop("status", None)
    assert tool_stats(unknown).successful == 0  # only a result with status "success" counts
    res = score_episode(
        _request(final, transcript=_episode(final, ok=3, malformed=1)), judge=RecordingJudge()
    )
    assert res.score == pytest.approx(0.75) and res.failure is None
    worst = score_episode(
        _request(final, transcript=_episode(final, ok=2, malformed=4, errors=4)), judge=RecordingJudge(0.5)
    )
    assert worst.score == pytest.approx(0.25) and worst.components["malformed_factor"] == 0.5


def test_budget_exhaustion_from_the_transcript_and_from_the_termination():
    judge = RecordingJudge()
    stopped = _episode(None, ok=6)  # the last event is a tool result: a budget stopped the research
    res = score_episode(_request(None, transcript=stopped), judge=judge)
    assert (res.score, res.failure) == (-0.1, "budget_exhausted")
    for term in (Termination.TOOL_BUDGET, Termination.CONTEXT_OVERFLOW, Termination.MAX_TOKENS):
        cut = score_episode(_request("<think>the pages say", termination=term.value), judge=judge)
        assert (cut.score, cut.failure) == (-0.1, "budget_exhausted"), term
    natural = score_episode(_request("I could not find it.", termination="final_answer"), judge=judge)
    assert (natural.score, natural.failure) == (0.0, "no_answer")
    gave_up = score_episode(_request(None, transcript=stopped, termination="tool_error"), judge=judge)
    assert (gave_up.score, gave_up.failure) == (0.0, "no_answer")
    answered = score_episode(_request(f"<answer>{GOLD}</answer>", termination="max_tokens"), judge=judge)
    assert answered.score == 1.0  # an answer given before the budget ran out is judged
    assert len(judge.calls) == 1


def test_an_answer_in_a_turn_that_still_calls_tools_does_not_count():
    transcript = _episode(None, ok=3)
    transcript[-2]["content"] = f"<answer>{GOLD}</answer>"
    req = RewardRequest(response=f"<answer>{GOLD}</answer>", label=GOLD, transcript=transcript)
    res = score_episode(req, judge=RecordingJudge())
    assert (res.score, res.failure) == (-0.1, "budget_exhausted")
    res = score_episode(
        req.model_copy(update={"metadata": {"termination": "tool_error"}}), judge=RecordingJudge()
    )
    assert (res.score, res.failure) == (0.0, "answer_in_tool_turn")


def test_infrastructure_terminations_and_bad_inputs():
    for term in ("aborted", "model_error"):
        res = score_episode(_request(f"<answer>{GOLD}</answer>", termination=term), judge=RecordingJudge())
        assert res.aborted and res.failure == "environment"
    bogus = score_episode(_request(f"<answer>{GOLD}</answer>", termination="bogus"), judge=RecordingJudge())
    assert bogus.aborted and "bogus" in bogus.details["error"]
    for label in (None, "", [], [GOLD, 3], {"nope": 1}):
        res = score_episode(_request(f"<answer>{GOLD}</answer>", label=label), judge=RecordingJudge())
        assert (res.score, res.failure, res.aborted) == (0.0, "bad_label", False)
    long = score_episode(_request("<answer>" + "x " * MAX_ANSWER_CHARS + "</answer>"), judge=RecordingJudge())
    assert (long.score, long.failure) == (0.0, "answer_too_long")


def test_registered_reward_with_the_deterministic_judge():
    reward = get_reward("search_judge")
    right = reward(_request(f"<answer>{GOLD.upper()}.</answer>", judge="deterministic"))
    assert right.score == 1.0 and right.details["judge"] == "deterministic"
    part = reward(_request("<answer>Kalden</answer>", judge="deterministic"))
    assert (part.score, part.failure) == (0.5, "partial_credit")
    target = reward(
        _request("<answer>M Kalden</answer>", label={"target": [GOLD, "M. Kalden"]}, judge="deterministic")
    )
    assert target.score == 1.0


def test_judge_selection_fails_closed_as_aborted(monkeypatch):
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>"))
    assert (
        res.aborted
        and res.failure == "judge_unavailable"
        and "RUFUS_SEARCH_JUDGE_BASE_URL" in res.details["error"]
    )
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>", judge="eval"))
    assert res.aborted and "RUFUS_SEARCH_EVAL_JUDGE_BASE_URL" in res.details["error"]
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>", judge="gpt"))
    assert res.aborted and "unknown search judge" in res.details["error"]
    monkeypatch.setenv("RUFUS_SEARCH_JUDGE", "deterministic")
    assert get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>")).score == 1.0


def test_grade_answer_has_no_tool_gates():
    """The tool-free filter pass and held-out accuracy grade the answer alone."""
    req = RewardRequest(response=f"<think>I recall</think><answer>{GOLD}</answer>", label=GOLD)
    assert grade_answer(req, DeterministicJudge()).score == 1.0
    assert score_episode(req, DeterministicJudge()).failure == "too_few_tool_calls"
    assert (
        grade_answer(req.model_copy(update={"response": GOLD}), DeterministicJudge()).failure == "no_answer"
    )


def test_held_out_accuracy_is_the_grade_never_negative():
    """search_accuracy (the held-out metric's reward) grades the answer: no tool gate, no budget penalty."""
    acc = get_reward("search_accuracy")
    assert acc(_request(f"<answer>{GOLD}</answer>", judge="deterministic")).score == 1.0
    few = _request(f"<answer>{GOLD}</answer>", transcript=_episode(f"<answer>{GOLD}</answer>", ok=0))
    assert acc(few.model_copy(update={"metadata": {"judge": "deterministic"}})).score == 1.0
    exhausted = acc(_request(None, termination="tool_budget", judge="deterministic"))
    assert (exhausted.score, exhausted.failure) == (0.0, "no_answer")
    assert get_reward("search_judge")(_request(None, termination="tool_budget")).score < 0
    mid = _episode(None) + _call(9)
    assert acc(_request(f"<answer>{GOLD}</answer>", transcript=mid, judge="deterministic")).score == 0.0
    assert acc(_request(f"<answer>{GOLD}</answer>", termination="aborted")).aborted


def test_search_accuracy_held_out_rows_name_the_accuracy_reward():
    from data_prep.tiny_tasks import heldout_tasks

    rows = heldout_tasks("search_accuracy", 2, 0)
    assert {r.metadata["reward"] for r in rows} == {"search_accuracy"}


# ---- the deterministic judge ----------------------------------------------------------------------------
JUDGE = DeterministicJudge()


@pytest.mark.parametrize(
    ("answer", "gold", "score"),
    [
        ("mira kalden", [GOLD], 1.0),
        ("MIRA KALDEN.", [GOLD], 1.0),
        ("Mïra Kaldén!", [GOLD], 1.0),  # accents and punctuation
        ("The Mira Kalden", [GOLD], 1.0),  # articles
        ("Mira Kaldne", [GOLD], 1.0),  # a typo (difflib ratio >= 0.9)
        ("M. Kalden", [GOLD, "M. Kalden"], 1.0),  # a second alias
        ("1,200", ["1200"], 1.0),
        ("3.0 km", ["3 km"], 1.0),
        ("Kalden", [GOLD], 0.5),  # part of the gold answer
        ("March 1987", ["12 March 1987"], 0.5),
        ("Mira Tosh", [GOLD], 0.0),  # shares a word but names someone else
        ("12 March 1988", ["12 March 1987"], 0.0),  # numbers must match exactly
        ("120", ["1200"], 0.0),
        ("", [GOLD], 0.0),
        ("Alice, Bob", ["Alice, Bob and Carol"], 2 / 3),  # list: matched items over the longer list
        ("Carol and Alice and Bob", ["Alice, Bob, Carol"], 1.0),
        ("Alice, Bob, Dan, Eve", ["Alice, Bob"], 0.5),
    ],
)
def test_deterministic_judge(answer: str, gold: list[str], score: float):
    verdict = JUDGE.score("q", gold, answer)
    assert verdict.score == pytest.approx(score) and verdict.rationale


def test_naming_several_candidates_never_beats_committing():
    hedges = ["Mira Kalden or Tor Venn", "Tor Venn, Mira Kalden", "Mira Kalden, Tor Venn and Ada Lusk"]
    for hedge in hedges:
        assert JUDGE.score("q", [GOLD], hedge).score <= 0.5
    assert JUDGE.score("q", [GOLD], GOLD).score == 1.0


@SETTINGS
@given(gold=st.text(min_size=1, max_size=40), answer=st.text(max_size=60))
def test_deterministic_judge_properties(gold: str, answer: str):
    """Scores lie in [0, 1]; every gold whose normal form is non-empty grades itself 1."""
    assert 0.0 <= JUDGE.score("q", [gold], answer).score <= 1.0
    if normalise(gold):
        assert JUDGE.score("q", [gold], gold).score == 1.0


# ---- the LLM judge against a loopback chat API ----------------------------------------------------------
class _ChatAPI(BaseHTTPRequestHandler):
    """Loopback stand-in for the remote OpenAI-compatible judge endpoint: answers with queued replies."""

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        reply = self.server.replies.pop(0) if len(self.server.replies) > 1 else self.server.replies[0]
        if isinstance(reply, int):
            send_json(self, {"error": {"message": "bad request"}}, status=reply)
            return
        send_json(self, {"choices": [{"message": {"role": "assistant", "content": reply}}]})

    def log_message(self, *_args):
        pass


@pytest.fixture
def chat_api(monkeypatch) -> Iterator[HTTPServer]:
    """A chat API on 127.0.0.1 configured as the training judge; tests set ``server.replies``."""
    server = HTTPServer(("127.0.0.1", 0), _ChatAPI)
    server.requests, server.replies = [], ['{"score": 1, "rationale": "same"}']
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("RUFUS_SEARCH_JUDGE_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("RUFUS_SEARCH_JUDGE_MODEL", "qwen3-32b")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_llm_judge_grades_through_the_chat_api(chat_api):
    chat_api.replies = ['<think>compare</think>```json\n{"score": 0.5, "rationale": "surname only"}\n```']
    res = get_reward("search_judge")(_request("<answer>Kalden</answer>"))
    assert (res.score, res.failure, res.aborted) == (0.5, "partial_credit", False)
    assert res.details["judge"] == "train:qwen3-32b" and res.details["rationale"] == "surname only"
    (body,) = chat_api.requests
    assert body["model"] == "qwen3-32b" and body["temperature"] == 0.0
    user = body["messages"][-1]["content"]
    assert GOLD in user and "<candidate>\nKalden\n</candidate>" in user and "Aldwin observatory" in user


def test_llm_judge_is_not_asked_when_a_gate_decides(chat_api):
    get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>", transcript=_episode("x", ok=1)))
    get_reward("search_judge")(_request("no tag"))
    assert chat_api.requests == []


def test_garbage_reply_is_asked_again_then_fails_closed(chat_api):
    chat_api.replies = ["I think it is right!", "Score: great"]
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>"))
    assert (res.score, res.failure, res.aborted) == (0.0, "judge_unparsable", False)
    assert len(chat_api.requests) == 2
    assert chat_api.requests[1]["messages"][-1]["content"].startswith("Reply with only the JSON object")


def test_garbage_then_a_verdict_uses_the_verdict(chat_api):
    chat_api.replies = ["hmm", '{"score": "1", "rationale": "ok"}']
    assert get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>")).score == 1.0


def test_eval_judge_is_configured_separately(chat_api, monkeypatch):
    port = chat_api.server_port
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>", judge="eval"))
    assert res.aborted and chat_api.requests == []  # the training judge's settings are not borrowed
    monkeypatch.setenv("RUFUS_SEARCH_EVAL_JUDGE_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("RUFUS_SEARCH_EVAL_JUDGE_MODEL", "strong-judge")
    monkeypatch.setenv("RUFUS_SEARCH_EVAL_JUDGE_API_KEY", "k")
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>", judge="eval"))
    assert res.score == 1.0 and chat_api.requests[-1]["model"] == "strong-judge"


def test_unreachable_or_refusing_judge_is_aborted(chat_api):
    chat_api.replies = [400]  # not retried by the client
    res = get_reward("search_judge")(_request(f"<answer>{GOLD}</answer>"))
    assert res.aborted and res.failure == "judge_unavailable" and "HTTP 400" in res.details["error"]
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = LLMJudge(ChatClient(f"http://127.0.0.1:{port}/v1", "j", max_retries=0, timeout=2), name="down")
    res = score_episode(_request(f"<answer>{GOLD}</answer>"), judge=judge)
    assert res.aborted and res.failure == "judge_unavailable" and res.score == 0.0


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 1, "rationale": "x"}', 1.0),
        ('{"score": 0.5}', 0.5),
        ('{"score": "0"}', 0.0),
        (
            'Verdict follows. {"score": 0, "rationale": "no"} and finally {"score": 1, "rationale": "yes"}',
            1.0,
        ),
        ('<think>{"score": 0}</think>{"score": 1}', 1.0),
        ('{"rationale": "cut off", "score": 0.5, "rationale2": "unterminated', 0.5),
        ('{"verdict": {"score": 1}}', 1.0),  # nested: read by the field fallback
        ('{"grade": 1, "rationale": "fine"}', None),
        ("score: excellent", None),
        ('{"score": 2}', None),
        ('{"score": -1}', None),
        ('{"score": true}', None),
        ('{"score": NaN}', None),
        ("", None),
        ("{" * 5000, None),
    ],
)
def test_parse_verdict(reply: str, score: float | None):
    if score is None:
        with pytest.raises(JudgeUnparsable):
            parse_verdict(reply)
    else:
        assert parse_verdict(reply).score == score


# ---- arbitrary model output never raises ----------------------------------------------------------------
FRAGMENTS = (
    "<answer>",
    "</answer>",
    "<ANSWER>",
    "<think>",
    "</think>",
    GOLD,
    "Kalden",
    "Answer: ",
    "\n",
    "{",
    "İ",
)
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=16).map("".join)
junk = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2))
entries = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": texts},
        optional={
            "tool_calls": st.one_of(junk, st.lists(st.just({"id": "c", "name": "web_search"}), max_size=3))
        },
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "status": st.one_of(st.sampled_from(("success", "error")), junk),
            "content": st.one_of(st.sampled_from((MALFORMED_PREFIX + " (x)", "page")), junk),
        }
    ),
    st.dictionaries(st.sampled_from(("role", "content", "status", "tool_calls")), junk, max_size=4),
)
terminations = st.one_of(st.none(), st.sampled_from([t.value for t in Termination] + ["bogus"]))


@SETTINGS
@given(
    response=texts,
    transcript=st.one_of(st.none(), st.lists(entries, max_size=12)),
    termination=terminations,
)
def test_search_judge_never_raises_on_model_output(response, transcript, termination):
    metadata = {"judge": "deterministic"} | ({} if termination is None else {"termination": termination})
    req = RewardRequest(
        response=response, label=[GOLD, "M. Kalden"], metadata=metadata, transcript=transcript
    )
    first = get_reward("search_judge")(req)
    assert math.isfinite(first.score) and (first.score == BUDGET_PENALTY or 0.0 <= first.score <= 1.0)
    assert first.score >= 0.0 or first.failure == "budget_exhausted"
    second = get_reward("search_judge")(req)
    assert (first.score, first.failure, first.aborted) == (second.score, second.failure, second.aborted)


class _Replies:
    """A chat client double (the remote API boundary) that answers with given text."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def chat(self, messages, **kwargs):
        return [self.reply]


@SETTINGS
@given(reply=st.one_of(texts, st.text(max_size=200), junk))
def test_llm_judge_never_raises_on_weird_replies(reply):
    res = score_episode(_request(f"<answer>{GOLD}</answer>"), judge=LLMJudge(_Replies(reply), name="weird"))
    assert not res.aborted and 0.0 <= res.score <= 1.0
    assert res.failure in (None, "wrong", "partial_credit", "judge_unparsable")
