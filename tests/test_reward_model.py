"""The reward-model client (``rewards.reward_model``): SGLang ``/classify`` over HTTP, a local seq-cls RM.

No SGLang server runs here, so an ``http.server`` on 127.0.0.1 speaks SGLang's native ``/classify`` wire
format (a list ``text`` in; one ``{"embedding": [score], "meta_info": {...}}`` per text out, in order) and
records what it was sent; it also serves ``/v1/classify`` so a client that called it would be caught. The
local backend runs a real, tiny ``LlamaForSequenceClassification`` (random weights, 1 label) with the
repo's offline micro tokenizer and GLM chat template; scores are checked against transformers' own
forward pass of each conversation alone.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_chat import send_json
from tokenizers.processors import TemplateProcessing
from transformers import AutoModelForSequenceClassification, LlamaConfig, LlamaForSequenceClassification

from infra.embedded.chat_format import install_glm_markup
from infra.embedded.tokenizer_build import EOS_TOKEN, build_micro_tokenizer
from rewards.reward_model import (
    LocalRewardModel,
    RewardModel,
    RewardModelUnavailable,
    SGLangRewardModel,
    pairwise_accuracy,
    parse_classify_reply,
    render_ids,
    reward_model_from_env,
    strip_thinking,
)

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is two plus two?"}]
ANSWERS = [
    "four",
    "The answer is 4 because two and two make four.",
    "no",
    "banana " * 30,
    "It is four" + EOS_TOKEN,  # ends on the pad token id: pooling must not skip it
]


def build_tiny_rm(dest: Path, *, seed: int = 0, num_labels: int = 1, negate_head: bool = False) -> Path:
    """Save a tiny random ``LlamaForSequenceClassification`` RM with the micro tokenizer to ``dest``."""
    tokenizer = build_micro_tokenizer(0)
    install_glm_markup(tokenizer)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        num_labels=num_labels,
        pad_token_id=eos,
        eos_token_id=eos,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
    if negate_head:
        with torch.no_grad():
            model.score.weight.neg_()
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> Path:
    return build_tiny_rm(tmp_path_factory.mktemp("tiny-rm"))


# ---- a local stand-in for SGLang's /classify ------------------------------------------------------------
def fake_score(text: str) -> float:
    """The fake server's deterministic 'reward' of a rendered conversation."""
    return zlib.crc32(text.encode()) % 2000 / 100 - 10


class _Classify(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.calls.append((self.path, body))
        attempt = len(server.calls)
        if self.path != "/classify":
            send_json(self, {"object": "list", "data": [{"probs": [1.0]}]})  # what /v1/classify would say
            return
        plan = server.plan.pop(0) if server.plan else "ok"
        if plan == "503":
            send_json(self, {"error": {"message": "overloaded"}}, status=503)
        elif plan == "400":
            send_json(self, {"error": {"message": "input too long"}}, status=400)
        elif plan == "slow":  # answers after the client gave up, with other scores: they must not be used
            time.sleep(0.6)
            try:
                send_json(self, [{"embedding": [99.0 + attempt]} for _ in body["text"]])
            except OSError:
                pass
        elif isinstance(plan, dict) and "reply" in plan:
            send_json(self, plan["reply"])
        else:
            reply = [
                {"embedding": [fake_score(t)], "meta_info": {"id": str(i)}}
                for i, t in enumerate(body["text"])
            ]
            send_json(self, reply)


@pytest.fixture
def classify_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Classify)
    server.calls, server.plan = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def _sglang(server: ThreadingHTTPServer, rm_dir: Path, **kw: Any) -> SGLangRewardModel:
    kw.setdefault("backoff", 0.0)
    kw.setdefault("max_retries", 2)
    return SGLangRewardModel(_url(server), str(rm_dir), **kw)


# ---- thinking ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "final"),
    [
        ("<think>plan it</think>\n\nFour.", "Four."),
        ("plan it</think>Four.", "Four."),  # the open tag was in the prompt
        ("Four.", "Four."),
        ("<think>still thinking when cut off", ""),
        ("<think>a</think>   ", ""),
    ],
)
def test_strip_thinking(text: str, final: str) -> None:
    assert strip_thinking(text) == final


# ---- SGLang backend ------------------------------------------------------------------------------------
def test_sglang_scores_in_order_batched_on_native_classify(classify_server, rm_dir) -> None:
    rm = SGLangRewardModel(_url(classify_server) + "/v1/", str(rm_dir), batch_size=2, backoff=0.0)
    assert isinstance(rm, RewardModel)
    prompts = [PROMPT] * len(ANSWERS)
    scores = rm.score(prompts, ANSWERS)
    rendered = [rm.render(PROMPT, a) for a in ANSWERS]
    assert scores == [fake_score(t) for t in rendered]
    assert [path for path, _ in classify_server.calls] == ["/classify"] * 3  # never /v1/classify
    assert [body["text"] for _, body in classify_server.calls] == [rendered[:2], rendered[2:4], rendered[4:]]
    # the RM's chat template wrapped prompt and answer, the answer as the assistant turn
    assert rendered[0].startswith("[gMASK]<sop><|system|>\nBe brief.<|user|>\nWhat is two plus two?")
    assert rendered[0].endswith("<|assistant|>\n<think></think>\nfour")


def test_sglang_retries_a_503_without_counting_twice(classify_server, rm_dir) -> None:
    classify_server.plan = ["ok", "503"]  # the second batch fails once
    rm = _sglang(classify_server, rm_dir, batch_size=3)
    scores = rm.score([PROMPT] * 5, ANSWERS)
    rendered = [rm.render(PROMPT, a) for a in ANSWERS]
    assert scores == [fake_score(t) for t in rendered]
    bodies = [body["text"] for _, body in classify_server.calls]
    assert bodies == [rendered[:3], rendered[3:], rendered[3:]]  # the failed batch re-sent whole, once


def test_sglang_timeout_retry_uses_only_the_reply_that_arrived(classify_server, rm_dir) -> None:
    classify_server.plan = ["slow"]
    rm = _sglang(classify_server, rm_dir, timeout=0.3)
    scores = rm.score([PROMPT] * 2, ANSWERS[:2])
    assert scores == [fake_score(rm.render(PROMPT, a)) for a in ANSWERS[:2]]
    assert len(classify_server.calls) == 2 and all(s < 90 for s in scores)


def test_sglang_unreachable_raises_after_retries(rm_dir) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rm = SGLangRewardModel(f"http://127.0.0.1:{port}", str(rm_dir), max_retries=1, backoff=0.0)
    with pytest.raises(RewardModelUnavailable, match="gave up after 2 attempts"):
        rm.score([PROMPT], ["four"])


def test_sglang_client_error_is_not_retried(classify_server, rm_dir) -> None:
    classify_server.plan = ["400"]
    with pytest.raises(RewardModelUnavailable, match="HTTP 400.*input too long"):
        _sglang(classify_server, rm_dir).score([PROMPT], ["four"])
    assert len(classify_server.calls) == 1


def test_sglang_text_gets_one_bos_when_the_tokenizer_adds_it(tmp_path) -> None:
    """A Llama-style RM: the template writes BOS and encoding adds it again; the server must see one."""
    tokenizer = build_micro_tokenizer(0)
    install_glm_markup(tokenizer)
    bos = "[gMASK]"  # the GLM template starts with it; make encoding add it too
    tokenizer._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.convert_tokens_to_ids(bos))]
    )
    tokenizer.bos_token = bos
    tokenizer.save_pretrained(tmp_path)
    rm = SGLangRewardModel("http://127.0.0.1:9", str(tmp_path))
    full = rm.tokenizer.apply_chat_template(
        [*PROMPT, {"role": "assistant", "content": "four"}], tokenize=False
    )
    assert full.startswith(bos) and not full.startswith(bos + bos)
    text = rm.render(PROMPT, "four")
    assert text == full[len(bos) :]
    assert rm.tokenizer(text)["input_ids"] == rm.tokenizer(full, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        ({"embedding": [1.0]}, "reply is dict"),
        ([{"embedding": [1.0]}], "1 items for 2 texts"),
        ([{"embedding": [1.0]}, {"meta_info": {}}], r"reply\[1\]\.embedding"),
        ([{"embedding": [1.0]}, {"embedding": [0.1, 0.9]}], r"reply\[1\]\.embedding: .*got 2 values"),
        ([{"embedding": [1.0]}, {"embedding": ["2.0"]}], r"reply\[1\]\.embedding\[0\]"),
        ([{"embedding": [None]}, {"embedding": [1.0]}], r"reply\[0\]\.embedding\[0\]"),
    ],
)
def test_sglang_malformed_reply_names_the_field(classify_server, rm_dir, reply: Any, field: str) -> None:
    classify_server.plan = [{"reply": reply}]
    with pytest.raises(RewardModelUnavailable, match=field):
        _sglang(classify_server, rm_dir).score([PROMPT] * 2, ANSWERS[:2])
    assert len(classify_server.calls) == 1  # a wrong shape is not a transient fault


def test_parse_classify_reply_rejects_nan() -> None:
    with pytest.raises(RewardModelUnavailable, match=r"embedding\[0\] is nan"):
        parse_classify_reply([{"embedding": [float("nan")]}], 1)


# ---- local backend -------------------------------------------------------------------------------------
def _reference(rm_dir: Path, text: str) -> float:
    """transformers' own forward of one unpadded conversation, pooled at its last token."""
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    model.config.pad_token_id = None  # one sequence, no padding: pool at the last position
    ids = LocalRewardModel(rm_dir).tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float(model(input_ids=ids).logits[0, 0])


def test_local_batch_equals_one_by_one_and_transformers(rm_dir) -> None:
    rm = LocalRewardModel(rm_dir, batch_size=3)
    batch = rm.score([PROMPT] * len(ANSWERS), ANSWERS)
    single = [rm.score([PROMPT], [a])[0] for a in ANSWERS]
    reference = [_reference(rm_dir, rm.render(PROMPT, a)) for a in ANSWERS]
    assert batch == pytest.approx(single, abs=1e-5)
    assert batch == pytest.approx(reference, abs=1e-5)
    assert len(set(round(s, 6) for s in batch)) == len(ANSWERS)  # the texts are told apart


def test_render_ids_and_pairwise_accuracy_match_the_client(rm_dir) -> None:
    rm = LocalRewardModel(rm_dir)
    assert render_ids(rm.tokenizer, PROMPT, "four") == rm.tokenizer(rm.render(PROMPT, "four"))["input_ids"]
    answers = ANSWERS[:3]
    assert len(set(rm.score([PROMPT] * 3, answers))) == 3
    every_order = [{"prompt": PROMPT, "chosen": a, "rejected": b} for a in answers for b in answers if a != b]
    assert pairwise_accuracy(rm.model, rm.tokenizer, every_order) == 0.5  # each pair both ways
    best = max(answers, key=lambda a: rm.score([PROMPT], [a])[0])
    right = [{"prompt": PROMPT, "chosen": best, "rejected": a} for a in answers if a != best]
    assert pairwise_accuracy(rm.model, rm.tokenizer, right) == 1.0
    tie = [{"prompt": PROMPT, "chosen": "four", "rejected": "four"}]
    assert pairwise_accuracy(rm.model, rm.tokenizer, tie) == 0.0  # a tie is not a right ranking


def test_local_counts_tokens_and_caches_the_model(rm_dir) -> None:
    rm = LocalRewardModel(rm_dir)
    assert rm.count_tokens(["", "1234", ANSWERS[3]]) == [0, 4, len(rm.tokenizer(ANSWERS[3])["input_ids"])]
    assert LocalRewardModel(rm_dir, batch_size=2).model is rm.model


def test_local_rejects_a_multi_label_model(tmp_path) -> None:
    with pytest.raises(RewardModelUnavailable, match="num_labels is 2"):
        LocalRewardModel(build_tiny_rm(tmp_path / "two", num_labels=2))
    with pytest.raises(RewardModelUnavailable, match="missing"):
        LocalRewardModel(tmp_path / "missing")


# ---- configuration -------------------------------------------------------------------------------------
def test_reward_model_from_env(monkeypatch, rm_dir, classify_server) -> None:
    for key in ("RUFUS_RM_URL", "RUFUS_RM_TOKENIZER", "RUFUS_RM_PATH", "RUFUS_RM_BATCH_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert reward_model_from_env() is None
    monkeypatch.setenv("RUFUS_RM_PATH", str(rm_dir))
    local = reward_model_from_env()
    assert isinstance(local, LocalRewardModel) and reward_model_from_env() is local
    monkeypatch.setenv("RUFUS_RM_URL", _url(classify_server))
    with pytest.raises(RewardModelUnavailable, match="RUFUS_RM_TOKENIZER"):
        reward_model_from_env()
    monkeypatch.setenv("RUFUS_RM_TOKENIZER", str(rm_dir))
    monkeypatch.setenv("RUFUS_RM_BATCH_SIZE", "7")
    remote = reward_model_from_env()
    assert isinstance(remote, SGLangRewardModel) and remote.batch_size == 7
    assert remote.url == _url(classify_server) + "/classify"
    monkeypatch.setenv("RUFUS_RM_BATCH_SIZE", "many")
    with pytest.raises(RewardModelUnavailable, match="RUFUS_RM_BATCH_SIZE"):
        reward_model_from_env()
    monkeypatch.setenv("RUFUS_RM_BATCH_SIZE", "0")
    with pytest.raises(RewardModelUnavailable, match="batch_size must be >= 1"):
        reward_model_from_env()
