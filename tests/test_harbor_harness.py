"""FireFlash's harness behaviours and partial credit in the ``harbor`` environment (issue 20), off by default.

Sandboxes, tools, verifier, reward replay and the agent loop are real (bubblewrap sandboxes skip without
root, like ``test_harbor_env.py``); only the generation backend behind ``/generate`` is scripted
(:mod:`agents_scripted` and a prompt-reading double here), because an untrained model cannot be steered
into tool calls or a summary. Compression runs on the calculator environment: it needs a conversation,
not a sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from agents_scripted import ScriptedBackend, micro_tokenizer, tid, tool_call

from data_prep.tiny_tasks.harbor_env import TinyHarborEnv
from infra.agents.compression import SUMMARY_MESSAGE, SUMMARY_REQUEST, CompressionOptions, summary_text
from infra.agents.contract import AgentTask, Termination
from infra.agents.envs.base import load_environment
from infra.agents.envs.calculator import CalculatorEnv
from infra.agents.harbor.command_tool import HarnessOptions, execute_command_tool
from infra.agents.harbor.env import HarborEnv
from infra.agents.harbor.local_runtime import RuntimeOptions
from infra.agents.harbor.reward import harbor_tests
from infra.agents.harbor.runtime import LocalRuntime, reward_from_files
from infra.agents.local_server import GenerateServer
from infra.agents.loop import ModelEndpoint, run_episode
from infra.embedded.generation import Generation
from rewards.contract import RewardRequest

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
OBS, EOS = "<|observation|>", "<|endoftext|>"
# Two checks, FireFlash-style: the reward is the fraction passed (1 only when both pass).
PARTIAL_TEST = """#!/bin/bash
mkdir -p /logs/verifier
passed=0
[ "$(tr -d '[:space:]' < /app/count.txt 2>/dev/null)" = "9" ] && passed=$((passed + 1))
[ -f /app/done.txt ] && passed=$((passed + 1))
python3 -c "print($passed / 2)" > /logs/verifier/reward.txt
"""


# ------------------------------------------------------------------------------------------ options
def test_options_parse_and_default_off(tmp_path: Path) -> None:
    base = load_environment(f"harbor:tasks={tmp_path}")
    assert (
        isinstance(base, HarborEnv) and base.options == RuntimeOptions() and not base.options.harness.enabled
    )
    assert base.partial_credit is False and base.compression is None
    spec = (
        f"harbor:tasks={tmp_path},partial_credit=1,redirect_outputs=true,background_long_commands=1,"
        "compress_at=0.85,context_window=2048,command_timeout=5"
    )
    env = load_environment(spec)
    assert env.partial_credit is True and env.options.harness == HarnessOptions(True, True)
    assert env.options.command_timeout == 5.0 and env.compression == CompressionOptions(0.85, 2048)
    assert load_environment(f"harbor:tasks={tmp_path},compress_at=0.5").compression == CompressionOptions(0.5)
    tiny = load_environment("harbor_tiny:partial_credit=1,redirect_outputs=1,compress_at=0.85")
    assert isinstance(tiny, TinyHarborEnv) and tiny.partial_credit and tiny.options.harness.redirect_outputs
    assert tiny.options.output_tokens == 80 and tiny.compression == CompressionOptions(0.85)
    plain = load_environment("harbor_tiny")  # stage 05's spec: everything off
    assert not plain.options.harness.enabled and not plain.partial_credit and plain.compression is None


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("partial_credit=2", "harbor option partial_credit=2: expected 1 or 0"),
        ("redirect_outputs=maybe", "harbor option redirect_outputs='maybe': expected 1 or 0"),
        ("background_long_commands=0.5", "harbor option background_long_commands=0.5: expected 1 or 0"),
        ("compress_at=1.5", "harbor option compress_at=1.5: expected a fraction in (0, 1)"),
        ("compress_at=0", "harbor option compress_at=0: expected a fraction in (0, 1)"),
        ("compress_at=soon", "harbor option compress_at='soon': expected a fraction"),
        ("compress_at=0.85,context_window=10", "harbor option context_window=10: expected a token count"),
        ("compress_at=0.85,context_window=1.5", "harbor option context_window=1.5: expected a token count"),
        ("context_window=4096", "harbor option context_window=4096: needs compress_at"),
    ],
)
def test_bad_option_values_give_a_one_line_error_naming_the_option(
    tmp_path: Path, option: str, message: str
) -> None:
    for name in (f"harbor:tasks={tmp_path}", "harbor_tiny:spares=1"):
        with pytest.raises(ValueError) as info:
            load_environment(f"{name},{option}")
        assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_reward_files_partial_mode_clamps_and_default_binarises() -> None:
    for text, default, partial in (("0.5", 0.0, 0.5), ("1", 1.0, 1.0), ("1.7", 1.0, 1.0), ("-0.2", 0.0, 0.0)):
        binary = reward_from_files({"reward.txt": text})
        part = reward_from_files({"reward.txt": text}, partial_credit=True)
        assert (binary.score, part.score) == (default, partial)
        solved = float(text) >= 1
        for res in (binary, part):
            assert res.components == {"tests_passed": float(solved)} and res.details["raw_reward"] == float(
                text
            )
            assert res.failure == (None if solved else "tests_failed") and not res.aborted
    json_half = reward_from_files({"reward.json": '{"reward": 0.25, "checks": 4}'}, partial_credit=True)
    assert json_half.score == 0.25 and json_half.details["reward_json"] == {"reward": 0.25, "checks": 4}
    assert reward_from_files({"reward.txt": "nan"}, partial_credit=True).aborted  # never a score


# ----------------------------------------------------------------------------------- partial credit
def _call(command: str) -> str:
    return f"<tool_call>execute_command<arg_key>command</arg_key><arg_value>{command}</arg_value></tool_call>"


def _episode(env: Any, task: AgentTask, turns: list[tuple[str, str]]):
    tok = micro_tokenizer()
    with GenerateServer(ScriptedBackend(tok, turns), tok, max_context_tokens=4096) as server:
        return asyncio.run(run_episode(env, task, ModelEndpoint(server.url, tok, retry_delay=0.01)))


@pytest.fixture(scope="module")
def partial_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("harbor-partial")
    task = shutil.copytree(FIXTURES / "valid" / "count-words", root / "count-words")
    (task / "tests" / "test.sh").write_text(PARTIAL_TEST)
    return root


def test_partial_credit_scores_the_fraction_and_solved_stays_one(sandbox_ok, partial_root: Path) -> None:
    half_turns = [(_call("wc -w < notes.txt > count.txt"), OBS), ("Done.", EOS)]
    full_turns = [(_call("wc -w < notes.txt > count.txt; touch done.txt"), OBS), ("Done.", EOS)]
    spec = f"harbor:tasks={partial_root},spares=0,partial_credit=1"
    partial, default = load_environment(spec), HarborEnv(str(partial_root), spares=0)
    [task] = partial.tasks(1)
    half = _episode(partial, task, half_turns)
    assert half.termination is Termination.FINAL_ANSWER and half.reward == 0.5, half.error
    assert half.reward_details["components"] == {"tests_passed": 0.0}
    assert half.reward_details["failure"] == "tests_failed" and not half.reward_details["aborted"]
    full = _episode(partial, task, full_turns)
    assert full.reward == 1.0 and full.reward_details["components"] == {"tests_passed": 1.0}
    assert full.reward_details["failure"] is None
    binary = _episode(default, task, half_turns)  # the same attempt, stage 05's reward
    assert binary.reward == 0.0 and binary.reward_details["failure"] == "tests_failed"
    # outside an episode: the row's env spec (or a request option) sets the mode of the replay
    meta = {**task.metadata, "environment_options": {"env": spec}}
    replayed = harbor_tests(RewardRequest(response="", metadata=meta, transcript=half.transcript))
    assert (replayed.score, replayed.aborted, replayed.details["replayed_commands"]) == (0.5, False, 1)
    plain = dict(task.metadata)
    assert harbor_tests(RewardRequest(response="", metadata=plain, transcript=half.transcript)).score == 0.0
    asked = {**plain, "partial_credit": True}
    assert harbor_tests(RewardRequest(response="", metadata=asked, transcript=half.transcript)).score == 0.5
    bad = harbor_tests(RewardRequest(response="", metadata={**meta, "partial_credit": "x"}, transcript=[]))
    assert bad.aborted and "harbor_tests option partial_credit='x'" in bad.details["error"]


# ----------------------------------------------------------------------------- redirect, background
def _text(tool: Any, command: str) -> str:
    return tool._tool_func({"toolUseId": "c", "input": {"command": command}})["content"][0]["text"]


@pytest.fixture
def runtime(sandbox_ok, tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    with LocalRuntime(
        tmp_path / "ws", tmp_path / "tests", spares=0, outputs_mb=16, output_bytes=65536, command_timeout_s=1
    ) as rt:
        yield rt


def test_a_long_output_lands_in_a_sandbox_file_with_a_preview(runtime: LocalRuntime, tmp_path: Path) -> None:
    full = "".join(f"{i}\n" for i in range(1, 1001))  # 3,893 characters, over the 400-character budget
    with runtime.start() as session:
        tool = execute_command_tool(session, budget_tokens=100, harness=HarnessOptions(redirect_outputs=True))
        text = _text(tool, "seq 1 1000; seq 1 300 >&2")
        path = "/tmp/rufus_outputs/cmd_1.out"
        assert text.startswith(full[:400]) and full[400:] not in text  # a cut preview ...
        assert (
            f"[stdout was {len(full)} bytes, cut above; all of it is in {path}]" in text
        )  # ... and the file
        assert "all of it is in /tmp/rufus_outputs/cmd_1.err]" in text  # stderr (1,092 bytes) too
        assert session.execute(f"cat {path}").stdout == full  # a later command reads all of it
        assert _text(tool, "echo short") == "short"  # within budget: as before, no file
        assert session.execute("ls /tmp/rufus_outputs").stdout == "cmd_1.err\ncmd_1.out\n"
        tamper = session.execute(f"echo x > {path}; rm -f {path}; mv /tmp/rufus_outputs /tmp/o; ls /tmp")
        assert tamper.stderr.count("Permission denied") == 2 and "not permitted" in tamper.stderr  # read-only
        assert session.execute(f"md5sum < {path}").stdout.split()[0] == hashlib.md5(full.encode()).hexdigest()
    assert not list(tmp_path.rglob("cmd_1.out"))  # inside the sandbox, never on the host


def test_a_long_command_moves_to_the_background_and_finishes_there(runtime: LocalRuntime) -> None:
    with runtime.start() as session:
        tool = execute_command_tool(session, 100, harness=HarnessOptions(background_long_commands=True))
        start = time.monotonic()
        text = _text(tool, "echo started; sleep 5; echo done > f; echo finished")
        assert time.monotonic() - start < 4  # returned at the 1 s timeout, not after the command
        pid = int(text.split("pid ")[1].split(",")[0])
        assert text == (
            f"started\n\n[moved to background after 1s: pid {pid}, output in /tmp/rufus_outputs/cmd_1.out "
            "(stderr in /tmp/rufus_outputs/cmd_1.err); its exit status will be written to "
            "/tmp/rufus_outputs/cmd_1.exit when it ends]"
        )
        assert _text(tool, f"kill -0 {pid} && echo running; test -e f || echo no-f") == "running\nno-f"
        time.sleep(5)
        assert _text(tool, "cat f /tmp/rufus_outputs/cmd_1.out") == "done\nstarted\nfinished"
        assert (
            _text(tool, f"cat /tmp/rufus_outputs/cmd_1.exit; kill -0 {pid} 2>/dev/null || echo gone")
            == "0\ngone"
        )
        assert _text(tool, "exit 3") == "[exit code]: 3"  # short commands read as before
        _text(tool, "sleep 60")  # left running: verification still ends it
        start = time.monotonic()
        assert session.verify().score == 1.0 and time.monotonic() - start < 10


def test_default_tool_kills_at_the_timeout_and_saves_nothing(runtime: LocalRuntime) -> None:
    with runtime.start() as session:
        tool = execute_command_tool(session, budget_tokens=100)
        assert _text(tool, "sleep 5; echo done > f") == "[timed out after 1s]"
        text = _text(tool, "seq 1 1000")
        assert text.endswith("\n[truncated from 3893 characters]") and "rufus_outputs" not in text
        time.sleep(4.5)
        assert _text(tool, "ls -A; ls /tmp/rufus_outputs") == "(no output)"  # f never written, no files


def test_harness_env_spec_reaches_the_tool_and_stage_05_has_no_outputs_folder(
    sandbox_ok, partial_root: Path
) -> None:
    on = load_environment(f"harbor:tasks={partial_root},spares=0,redirect_outputs=1,output_tokens=80")
    off = HarborEnv(str(partial_root), spares=0, output_tokens=80)
    [task] = on.tasks(1)

    async def probe(env: HarborEnv) -> tuple[str, str]:
        # one event loop for the whole episode: the sandbox lives as long as the thread that booted it
        await env.reset(task)
        try:
            [tool] = env.tools()
            text = _text(tool, "seq 1 400")
            size = env.session.execute("test -d /tmp/rufus_outputs && wc -c < /tmp/rufus_outputs/cmd_1.out")
            return text, size.stdout.strip()
        finally:
            await env.cleanup()

    text, size = asyncio.run(probe(on))
    assert "all of it is in /tmp/rufus_outputs/cmd_1.out]" in text and size == "1492"
    text, size = asyncio.run(probe(off))
    assert "rufus_outputs" not in text and "bytes truncated" in text and size == ""


# ------------------------------------------------------------------------------------ compression
class _CompressingCalculator(CalculatorEnv):
    def __init__(self, compression: CompressionOptions | None) -> None:
        super().__init__()
        self.compression = compression


def _calc_task() -> AgentTask:
    return AgentTask(
        id="c",
        messages=[{"role": "user", "content": "Compute 12 * 3. Answer as \\boxed{N}."}],
        ground_truth=36,
    )


def _compression_run(compression: CompressionOptions | None) -> tuple[Any, list[dict[str, Any]]]:
    """Two tool calls, then an answer; a summary whenever the last user turn asks for one."""
    tok = micro_tokenizer()
    turns = iter([tool_call("12 * 3"), tool_call("36 + 0"), "<think></think>\nThe answer is \\boxed{36}."])

    def backend(ids: list[int], **kw: Any) -> Generation:
        last_user = tok.decode(ids).rsplit("<|user|>", 1)[-1]
        if SUMMARY_REQUEST in last_user:
            text, end = "<think>recap</think>\nSUMMARY: 12 * 3 is 36, checked twice.", EOS
        else:
            text = next(turns)
            end = OBS if "<tool_call>" in text else EOS
        out = tok.encode(text, add_special_tokens=False) + [tid(tok, end)]
        return Generation(out, [-0.1] * len(out), "stop")

    with GenerateServer(backend, tok, max_context_tokens=4096) as server:
        env = _CompressingCalculator(compression)
        result = asyncio.run(run_episode(env, _calc_task(), ModelEndpoint(server.url, tok, retry_delay=0.01)))
        return result, list(server.requests)


def test_compression_fires_at_the_threshold_and_continues_from_system_instruction_summary() -> None:
    tok = micro_tokenizer()
    off, off_reqs = _compression_run(None)
    assert len(off_reqs) == 3 and "compressions" not in off.metrics and off.reward == 1.0
    assert not any(SUMMARY_REQUEST in tok.decode(r["input_ids"]) for r in off_reqs)
    # a window whose 85% lies between the 2nd call's context and the 3rd's: compress before the 3rd
    third = len(off_reqs[2]["input_ids"])
    window = int(third / 0.85)
    assert len(off_reqs[1]["input_ids"]) + 1 < 0.85 * window <= third
    result, reqs = _compression_run(CompressionOptions(0.85, window))
    assert result.termination is Termination.FINAL_ANSWER and result.reward == 1.0, result.error
    [event] = result.metrics["compressions"]
    assert event["threshold"] == math.ceil(0.85 * window)
    assert event["occupied_tokens"] >= event["threshold"] > len(off_reqs[1]["input_ids"])
    assert len(reqs) == 4 and reqs[:2] == off_reqs[:2]  # nothing changed below the threshold
    # the summary request is appended to the END of the existing context: all of it (up to the generation
    # prompt that would have followed the last tool result) is an unchanged prefix of the summary call
    summary_call, context = reqs[2]["input_ids"], off_reqs[2]["input_ids"]
    assert tok.decode(context[-2:]) == "<|assistant|>\n" and summary_call[: third - 2] == context[:-2]
    assert tok.decode(summary_call[third - 2 :]) == f"<|user|>\n{SUMMARY_REQUEST}<|assistant|>\n"
    assert event["context_tokens"] == len(summary_call) + len(reqs[2]["output_ids"])
    assert event["summary_tokens"] == len(reqs[2]["output_ids"])
    # then the context is exactly [system, instruction, summary] (tools in the system turn), and the
    # episode's trajectory is that last context
    restarted = tok.decode(reqs[3]["input_ids"])
    summary = SUMMARY_MESSAGE.format(summary="SUMMARY: 12 * 3 is 36, checked twice.")
    assert restarted.startswith(tok.decode(off_reqs[0]["input_ids"]).rsplit("<|user|>", 1)[0])
    assert restarted.endswith(
        f"<|user|>\nCompute 12 * 3. Answer as \\boxed{{N}}.<|user|>\n{summary}<|assistant|>\n"
    )
    assert not any(x in restarted for x in ("<tool_response>", OBS, "36 + 0", SUMMARY_REQUEST, "recap"))
    assert (
        result.prompt_ids == reqs[3]["input_ids"]
        and result.tokens == reqs[3]["input_ids"] + reqs[3]["output_ids"]
    )
    assert result.loss_mask == [1] * len(reqs[3]["output_ids"])
    # the transcript keeps the whole episode in order: both tool calls, the summary exchange, the answer
    roles = [e["role"] for e in result.transcript]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert [c["input"] for e in result.transcript for c in e.get("tool_calls", [])] == [
        {"expression": "12 * 3"},
        {"expression": "36 + 0"},
    ]
    assert result.transcript[6]["content"] == SUMMARY_REQUEST and result.transcript[8]["content"] == summary
    assert result.metrics["model_calls"] == 4


def test_summary_text_drops_reasoning_markup_and_markers() -> None:
    raw = "<think>x</think>\nDid A.<tool_call>ls<arg_key>a</arg_key></tool_call> Next B.<|user|>"
    assert summary_text(raw) == "Did A. Next B."
    assert summary_text("<think>only thoughts</think><|user|>") == "(no summary was given)"
