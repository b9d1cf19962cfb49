"""The RLHF reward ``rlhf_rm`` (``rewards.rlhf``): raw RM score of the final answer, penalised if positive.

The RM is a real, tiny ``LlamaForSequenceClassification`` with random weights (``tests/test_reward_model``
builds it); a second copy with its score head negated gives exactly the opposite raw score, so one test
sees the same answer scored positive and negative. The SGLang path runs against the loopback stand-in for
SGLang's ``/classify`` from ``tests/test_reward_model`` (no SGLang server runs here).
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_reward_model import PROMPT, _Classify, build_tiny_rm, fake_score

from rewards import RewardRequest, get_reward, safe_score
from rewards.reward_model import LocalRewardModel, SGLangRewardModel
from rewards.rlhf import NO_ANSWER_SCORE, rlhf_reward, score_batch

ANSWER = "The answer is four, because two and two make four."
_ENV = ("RUFUS_RM_URL", "RUFUS_RM_TOKENIZER", "RUFUS_RM_PATH", "RUFUS_RM_MAX_RETRIES", "RUFUS_RM_BATCH_SIZE")


@pytest.fixture(scope="module")
def rms(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny RMs with the same body whose heads are opposite: raw scores of equal size, opposite sign."""
    root = tmp_path_factory.mktemp("rlhf-rm")
    return build_tiny_rm(root / "plus"), build_tiny_rm(root / "minus", negate_head=True)


@pytest.fixture(autouse=True)
def _no_rm_env(monkeypatch) -> None:
    for key in _ENV:
        monkeypatch.delenv(key, raising=False)


def _request(response: str, rm: Path | None = None, **metadata) -> RewardRequest:
    if rm is not None:
        metadata["reward_model_path"] = str(rm)
    return RewardRequest(prompt=PROMPT, response=response, metadata=metadata)


def test_registered() -> None:
    assert get_reward("rlhf_rm") is rlhf_reward


def test_thinking_is_stripped_before_scoring(rms) -> None:
    plain = rlhf_reward(_request(ANSWER, rms[0]))
    thought = rlhf_reward(
        _request(f"<think>Two plus two. Let me think about it.</think>\n\n{ANSWER}", rms[0])
    )
    assert thought.score == plain.score and thought.components == plain.components
    assert thought.parsed == ANSWER and not thought.aborted and thought.failure is None
    assert plain.components["raw"] == pytest.approx(LocalRewardModel(rms[0]).score([PROMPT], [ANSWER])[0])


def test_length_penalty_only_when_raw_is_positive(rms) -> None:
    penalty = {"coef": 0.5, "budget_tokens": 10}
    results = [rlhf_reward(_request(ANSWER, rm, length_penalty=penalty)) for rm in rms]
    raws = [r.components["raw"] for r in results]
    assert raws[0] == pytest.approx(-raws[1]) and raws[0] != 0
    n = LocalRewardModel(rms[0]).count_tokens([ANSWER])[0]
    assert n > 5 and all(r.components["answer_tokens"] == n for r in results)
    positive, negative = sorted(results, key=lambda r: -r.components["raw"])
    raw = positive.components["raw"]
    assert positive.components["length_penalty"] == pytest.approx(0.5 * n / 10)
    assert positive.score == pytest.approx(raw - 0.5 * n / 10)  # may fall below 0: the penalty is linear
    assert negative.components["length_penalty"] == 0.0
    assert negative.score == negative.components["raw"] == -raw


@pytest.mark.parametrize("metadata", [{}, {"length_penalty": {"coef": 0.0, "budget_tokens": 10}}])
def test_no_penalty_when_absent_or_zero(rms, metadata) -> None:
    for rm in rms:
        result = rlhf_reward(_request(ANSWER, rm, **metadata))
        assert result.score == result.components["raw"] and result.components["length_penalty"] == 0.0


@pytest.mark.parametrize(
    ("response", "failure"),
    [
        ("<think>Two plus two is", "unterminated_think"),
        ("<think>four</think>\n  \n", "no_answer"),
        ("", "no_answer"),
        ("<think>a</think>b<think>c</think>Four.", "unbalanced_think"),
    ],
)
def test_no_answer_fails_closed_without_the_rm(response: str, failure: str) -> None:
    result = rlhf_reward(_request(response))  # no RM configured: it is not needed to fail closed
    assert (result.score, result.failure, result.aborted) == (NO_ANSWER_SCORE, failure, False)
    custom = rlhf_reward(_request(response, no_answer_score=-3.5))
    assert custom.score == -3.5


ODD_OUTPUT = ["It is \ud800four.", "x\x00y\u2028z", " " * 3000 + "ok", "\\boxed{" * 500]


@pytest.mark.parametrize("response", ODD_OUTPUT)
def test_odd_model_output_is_scored_not_raised(rms, response: str) -> None:
    result = rlhf_reward(_request(response, rms[0]))
    assert result.failure is None and not result.aborted and math.isfinite(result.score)


def test_no_reward_model_is_aborted() -> None:
    result = rlhf_reward(_request(ANSWER))
    assert result.aborted and result.failure == "reward_model_unavailable"
    assert "RUFUS_RM_URL" in result.details["error"]
    missing = rlhf_reward(_request(ANSWER, Path("/nonexistent/rm")))
    assert missing.aborted and "/nonexistent/rm" in missing.details["error"]


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"length_penalty": {"coef": -1.0, "budget_tokens": 10}}, "length_penalty.coef"),
        ({"length_penalty": {"coef": 0.1, "budget_tokens": 0}}, "length_penalty.budget_tokens"),
        ({"length_penalty": {"coef": 0.1}}, "length_penalty.budget_tokens"),
        ({"length_penalty": {"coef": 0.1, "budget_tokens": 5, "cap": 1}}, "length_penalty.cap"),
        ({"no_answer_score": "low"}, "no_answer_score"),
    ],
)
def test_bad_settings_are_a_verifier_error_naming_the_key(rms, metadata, key: str) -> None:
    result = safe_score(rlhf_reward, _request(ANSWER, rms[0], **metadata))
    assert result.failure == "verifier_error" and f"metadata.{key}" in result.details["error"]


def test_score_batch_matches_single_requests_across_models(rms) -> None:
    penalty = {"coef": 0.2, "budget_tokens": 8}
    requests = [
        _request(ANSWER, rms[0], length_penalty=penalty),
        _request("<think>hmm</think>Four.", rms[1]),
        _request("<think>never closed", rms[0]),
        _request("four", rms[1], length_penalty=penalty),
        _request("It is 4.", rms[0]),
    ]
    batched = score_batch(requests)
    for got, want in zip(batched, [rlhf_reward(q) for q in requests], strict=True):
        assert (got.failure, got.aborted, got.parsed, got.details) == (
            want.failure,
            want.aborted,
            want.parsed,
            want.details,
        )
        assert got.score == pytest.approx(want.score, abs=1e-5)
        assert got.components == pytest.approx(want.components, abs=1e-5)
    assert {r.details.get("reward_model") for r in batched} == {None, f"local:{rms[0]}", f"local:{rms[1]}"}
    assert batched[2].failure == "unterminated_think"


def test_a_prompt_the_template_rejects_fails_alone(rms) -> None:
    bad = RewardRequest(
        prompt=[{"role": "user", "content": None}],
        response="Four.",
        metadata={"reward_model_path": str(rms[0])},
    )
    results = score_batch([_request(ANSWER, rms[0]), bad, _request("Four.", rms[0])])
    assert results[1].failure == "verifier_error" and not results[1].aborted
    assert [r.failure for r in (results[0], results[2])] == [None, None]
    assert results[2].components["raw"] == pytest.approx(
        rlhf_reward(_request("Four.", rms[0])).score, abs=1e-5
    )


# ---- through SGLang ------------------------------------------------------------------------------------
@pytest.fixture
def classify_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Classify)
    server.calls, server.plan = [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _use_sglang(monkeypatch, url: str, rm_dir: Path) -> None:
    monkeypatch.setenv("RUFUS_RM_URL", url)
    monkeypatch.setenv("RUFUS_RM_TOKENIZER", str(rm_dir))
    monkeypatch.setenv("RUFUS_RM_MAX_RETRIES", "0")


def test_sglang_batch_sends_each_answer_once(monkeypatch, classify_server, rms) -> None:
    _use_sglang(monkeypatch, f"http://127.0.0.1:{classify_server.server_address[1]}", rms[0])
    responses = ["<think>x</think>Four.", "<think>cut off", "It is four.", ANSWER]
    results = score_batch([_request(r) for r in responses])
    assert len(classify_server.calls) == 1 and classify_server.calls[0][0] == "/classify"
    sent = classify_server.calls[0][1]["text"]
    render = SGLangRewardModel("http://unused", str(rms[0])).render
    assert sent == [render(PROMPT, a) for a in ("Four.", "It is four.", ANSWER)]
    assert [r.components.get("raw") for r in results] == [fake_score(sent[0]), None] + [
        fake_score(t) for t in sent[1:]
    ]
    assert results[1].score == NO_ANSWER_SCORE


def test_sglang_unreachable_or_malformed_is_aborted(monkeypatch, classify_server, rms) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _use_sglang(monkeypatch, f"http://127.0.0.1:{port}", rms[0])
    down = rlhf_reward(_request(ANSWER))
    assert down.aborted and down.failure == "reward_model_unavailable" and "gave up" in down.details["error"]
    _use_sglang(monkeypatch, f"http://127.0.0.1:{classify_server.server_address[1]}", rms[0])
    classify_server.plan = [{"reply": [{"embedding": []}, {"embedding": [1.0]}]}]
    results = score_batch([_request(ANSWER), _request("Four.")])
    assert all(r.aborted for r in results)
    assert "reply[0].embedding" in results[0].details["error"]
