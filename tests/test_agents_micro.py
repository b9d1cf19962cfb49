"""Multi-turn episodes with the embedded micro model behind the local ``/generate`` server, and the CLI.

Nothing is scripted here: the micro model samples every token. Extra stop tokens keep its turns short
so a seeded episode has several model turns joined by simulated-user continuations.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from infra.agents.cli import rollout
from infra.agents.contract import Termination
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.local_server import micro_model_dir, start_micro_server
from infra.agents.loop import ModelEndpoint, run_episode
from infra.embedded.models import load_model


@pytest.fixture(scope="module")
def micro_server():  # noqa: ANN201
    server = start_micro_server()
    yield server
    server.stop()


def test_micro_multi_turn_masks_lengths_and_logprobs_line_up(micro_server) -> None:  # noqa: ANN001
    tok = micro_server.tokenizer
    stops = [i for i in range(len(tok)) if i % 3 == 0]
    ep = ModelEndpoint(micro_server.url, tok, seed=7, extra_sampling={"stop_token_ids": stops})
    env = CalculatorEnv(turns=3, max_new_tokens=16)
    result = asyncio.run(run_episode(env, env.tasks(1, seed=0)[0], ep))
    assert result.termination is Termination.FINAL_ANSWER, result.error
    assert result.metrics["model_calls"] == 3 and result.metrics["continuations"] == 2
    assert len(result.loss_mask) == len(result.rollout_logprobs) == result.response_length
    model_tokens = sum(c["output_tokens"] for c in result.metrics["calls"])
    assert sum(result.loss_mask) == model_tokens
    assert sum(length for _, length in result.segments) == result.response_length
    assert [is_model for is_model, _ in result.segments] == [True, False, True, False, True]
    # rollout logprobs equal the model's own log-softmax at every sampled position (teacher forcing)
    model = load_model(micro_model_dir())
    ids = torch.tensor([result.tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    n = len(result.prompt_ids)
    for j, (m, lp) in enumerate(zip(result.loss_mask, result.rollout_logprobs, strict=True)):
        pos = n + j
        expected = logp[pos - 1, result.tokens[pos]].item() if m else 0.0
        assert lp == pytest.approx(expected, abs=2e-3)


def test_server_rejects_prompts_beyond_the_context_with_sglang_wording(micro_server) -> None:  # noqa: ANN001
    with pytest.raises(Exception) as info:
        micro_server.generate({"input_ids": [5] * 5000, "sampling_params": {"max_new_tokens": 4}})
    assert "maximum context length" in str(info.value)


def test_cli_rollout_with_micro_writes_aligned_records(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(rollout)
    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(
        app,
        ["--env", "calculator:turns=2,max_new_tokens=8", "--model", "micro", "--n", "2", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    for r in records:
        assert {
            "tokens",
            "loss_mask",
            "rollout_logprobs",
            "response_length",
            "reward",
            "termination",
            "transcript",
        } <= set(r)
        assert len(r["loss_mask"]) == len(r["rollout_logprobs"]) == r["response_length"]
        assert len(r["tokens"]) == r["prompt_length"] + r["response_length"]
        assert r["termination"] in {t.value for t in Termination}
    bad = CliRunner().invoke(app, ["--env", "nope", "--model", "micro", "--n", "1", "--out", str(out)])
    assert bad.exit_code == 2 and "unknown environment" in bad.output


def test_a_client_that_left_is_not_a_server_traceback(micro_server) -> None:  # noqa: ANN001
    """Answering a client that timed out or was killed (broken pipe) ends its connection quietly."""

    class GoneClient:
        def write(self, data: bytes) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    handler_cls = micro_server._handler_class()
    handler = handler_cls.__new__(handler_cls)  # no socket: only the response path is exercised
    handler.request_version, handler.requestline, handler.command = "HTTP/1.1", "POST /generate", "POST"
    handler.wfile, handler.close_connection = GoneClient(), False
    handler._send(200, {"text": "late"})
    assert handler.close_connection is True
