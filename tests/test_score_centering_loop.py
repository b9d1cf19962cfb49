"""Agent score centering: the loop asks ``/generate`` for top-k log-probs and slime gets them aligned.

SGLang needs CUDA, so the boundary is the local ``/generate`` server of ``infra.agents.local_server``
with scripted turns (``tests/agents_scripted.py``); :class:`TopKServer` adds what SGLang answers to
``top_logprobs_num`` (``meta_info.output_top_logprobs``: per output token, ``k`` entries ``[logprob,
token_id, None]``, the sampled token first here) and keeps each request body. The strands-sglang client
and model, the loop, compression and the slime adapter are real; slime's ``Sample`` is the
``SlimeShapedSample`` double of ``tests/test_agents_slime.py``.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
import torch
from agents_scripted import micro_tokenizer, tid, tool_call
from test_agents_slime import CALC_ROW, SlimeShapedSample, hook_args

from infra.agents.compression import SUMMARY_REQUEST, CompressionOptions
from infra.agents.contract import AgentTask, RolloutResult, Termination
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.agents.slime_generate import fill_sample, sampler_top_rows, trained_calls
from infra.embedded.generation import Generation
from infra.objectives.centering import SAMPLER_TOP_IDS, SAMPLER_TOP_LOGPROBS

OBS, EOS = "<|observation|>", "<|endoftext|>"
K = 4


def top_entries(token: int, logprob: float, k: int, vocab: int) -> list[list[Any]]:
    """The server double's top-k of one output token: the sampled token, then ``k - 1`` less likely ids."""
    return [[logprob, token, None]] + [
        [logprob - 1.0 - j, (token + 1 + j) % vocab, None] for j in range(k - 1)
    ]


class TopKServer(GenerateServer):
    """The local ``/generate`` server, answering ``top_logprobs_num`` as SGLang does; keeps request bodies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: list[dict[str, Any]] = []

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(dict(body))
        out = super().generate(body)
        k = body.get("top_logprobs_num")
        if k and body.get("return_logprob"):
            meta = out["meta_info"]
            meta["output_top_logprobs"] = [
                top_entries(t, lp, int(k), self.vocab_size) for lp, t, _ in meta["output_token_logprobs"]
            ]
        return out


def _backend(turns: list[str]):  # noqa: ANN202
    """Replay ``turns`` (tool calls end with the observation marker, answers EOS); summarise on request."""
    tok = micro_tokenizer()
    left = iter(turns)

    def backend(ids: list[int], **kw: Any) -> Generation:
        if SUMMARY_REQUEST in tok.decode(ids).rsplit("<|user|>", 1)[-1]:
            text, end = "<think>recap</think>\nSUMMARY: 12 * 3 is 36.", EOS
        else:
            text = next(left)
            end = OBS if "<tool_call>" in text else EOS
        out = tok.encode(text, add_special_tokens=False) + [tid(tok, end)]
        return Generation(out, [-0.1 - 0.01 * i for i in range(len(out))], "stop")

    return backend


TURNS = [tool_call("12 * 3"), tool_call("36 + 0"), "<think></think>\nThe answer is \\boxed{36}."]


class _Calculator(CalculatorEnv):
    def __init__(self, compression: CompressionOptions | None = None) -> None:
        super().__init__()
        self.compression = compression


def _run(
    top_k: int | None, compression: CompressionOptions | None = None
) -> tuple[RolloutResult, TopKServer]:
    tok = micro_tokenizer()
    task = AgentTask(
        id="c",
        messages=[{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}],
        ground_truth=36,
    )
    with TopKServer(_backend(TURNS), tok, max_context_tokens=4096) as server:
        endpoint = ModelEndpoint(server.url, tok, retry_delay=0.01, top_logprobs_num=top_k)
        result = asyncio.run(run_episode(_Calculator(compression), task, endpoint))
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.error
    return result, server


def _model_rows(result: RolloutResult) -> list[int]:
    return [i for i, m in enumerate(result.loss_mask) if m]


def test_every_request_asks_for_top_k_and_each_call_record_keeps_it() -> None:
    result, server = _run(K)
    calls = result.metrics["calls"]
    assert len(server.bodies) == len(calls) == 3
    assert all(b["return_logprob"] is True and b["top_logprobs_num"] == K for b in server.bodies)
    for call, req in zip(calls, server.requests, strict=True):
        rows = call["output_top_logprobs"]
        assert len(rows) == call["output_tokens"] == len(req["output_ids"])
        assert all(len(r) == K for r in rows) and [r[0][1] for r in rows] == req["output_ids"]
    assert [c["context"] for c in calls] == [0, 0, 0] and result.metrics["last_context"] == 0
    # off by default: no top-k asked for, none kept
    plain, plain_server = _run(None)
    assert all("top_logprobs_num" not in b for b in plain_server.bodies)
    assert all("output_top_logprobs" not in c for c in plain.metrics["calls"])
    assert plain.response_ids == result.response_ids  # asking for top-k changes no sampled token
    with pytest.raises(ValueError, match="top_logprobs_num=0"):
        ModelEndpoint("http://x", micro_tokenizer(), top_logprobs_num=0)


def test_slime_generate_fills_train_metadata_with_padding_on_environment_tokens() -> None:
    """slime's generate hook of a centering stage (``rufus_score_centering_top_k`` in the hook YAML)."""
    from infra.production import slime_hooks

    tok = micro_tokenizer()
    with TopKServer(_backend(TURNS[1:]), tok, max_context_tokens=4096) as server:
        args = hook_args(server.url)
        args.rufus_score_centering_top_k = K
        prompt = [{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}]
        sample = SlimeShapedSample(prompt=prompt, label=36, metadata={"task_id": "a", **CALC_ROW})
        out = asyncio.run(slime_hooks.generate(args, sample, {"max_new_tokens": 64}))
    assert all(b["top_logprobs_num"] == K and b["return_logprob"] for b in server.bodies)
    assert out.reward == 1.0 and out.status is SlimeShapedSample.Status.COMPLETED
    ids, lps = out.train_metadata[SAMPLER_TOP_IDS], out.train_metadata[SAMPLER_TOP_LOGPROBS]
    assert ids.shape == lps.shape == (out.response_length, K) and ids.dtype == torch.long
    mask = torch.tensor(out.loss_mask, dtype=torch.bool)
    assert 0 < mask.sum() < out.response_length  # tool result tokens lie between the two model turns
    sampled = torch.tensor(out.tokens[-out.response_length :])
    assert torch.equal(ids[mask, 0], sampled[mask])  # the server double puts the sampled token first
    assert torch.allclose(lps[mask, 0], torch.tensor(out.rollout_log_probs)[mask])
    assert torch.allclose(lps[mask, 1:], lps[mask, :1] - torch.tensor([1.0, 2.0, 3.0]))
    assert (ids[~mask] == 0).all() and (lps[~mask] == -math.inf).all()


def test_with_compression_only_the_last_contexts_calls_are_aligned() -> None:
    off, _ = _run(K)
    third = off.metrics["calls"][2]["input_tokens"]
    window = int(third / 0.85)  # 85% lies between the 2nd call's context and the 3rd's
    result, server = _run(K, CompressionOptions(0.85, window))
    assert len(result.metrics["compressions"]) == 1
    calls = result.metrics["calls"]  # two tool calls and the summary in context 0, the answer in context 1
    assert [c["context"] for c in calls] == [0, 0, 0, 1] and result.metrics["last_context"] == 1
    assert trained_calls(result.metrics) == calls[3:]
    ids, lps = sampler_top_rows(trained_calls(result.metrics), result.segments, result.response_length, K)
    assert result.response_ids == server.requests[3]["output_ids"]  # the trajectory is the last context
    assert ids[:, 0].tolist() == result.response_ids and ids.shape == (result.response_length, K)
    assert lps[:, 0].tolist() == pytest.approx(result.rollout_logprobs)
    with pytest.raises(ValueError, match="model segments"):  # every call would not fit the last context
        sampler_top_rows(calls, result.segments, result.response_length, K)
    sample = fill_sample(None, SlimeShapedSample(), result, sampler_top=(ids, lps))
    assert sample.train_metadata[SAMPLER_TOP_IDS].shape == (sample.response_length, K)
    assert not math.isinf(float(sample.train_metadata[SAMPLER_TOP_LOGPROBS][0, K - 1]))
