"""Test doubles at the ``/generate`` boundary for the agent-loop tests (not a test module).

The agent loop, tool layer, strands-sglang client/provider and the HTTP server are all real; only the
generation backend behind ``/generate`` is replaced, because a randomly initialised model cannot be
steered into tool calls. :class:`ScriptedBackend` replays fixed assistant turns; :func:`oracle_backend`
solves calculator tasks from the prompt text (stateless, so concurrent episodes can share it).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from infra.embedded.generation import Generation


@functools.cache
def micro_tokenizer() -> Any:
    from infra.agents.local_server import micro_model_dir
    from infra.embedded.models import load_tokenizer

    return load_tokenizer(micro_model_dir())


def tid(tok: Any, token: str) -> int:
    return tok.convert_tokens_to_ids(token)


class ScriptedBackend:
    """Replays ``turns`` in order; a turn is ``(text, end)`` with end a stop token or ``"length"``."""

    def __init__(self, tok: Any, turns: list[tuple[str, str]]) -> None:
        self.tok = tok
        self.turns = list(turns)
        self.calls = 0

    def __call__(self, ids: list[int], **kw: Any) -> Generation:
        text, end = self.turns[self.calls]
        self.calls += 1
        out = self.tok.encode(text, add_special_tokens=False)
        if end == "length":
            out = out[: kw["max_new_tokens"]]
            return Generation(out, [-0.5 - 0.01 * i for i in range(len(out))], "length")
        out = out[: kw["max_new_tokens"] - 1] + [tid(self.tok, end)]
        return Generation(out, [-0.1 - 0.01 * i for i in range(len(out))], "stop")


def tool_call(expr: str) -> str:
    body = f"calculate<arg_key>expression</arg_key><arg_value>{expr}</arg_value>"
    return f"<think>use the tool</think>\n<tool_call>{body}</tool_call>"


_FOLLOW = {"add": "+", "subtract": "-", "multiply the result by": "*"}


def oracle_backend(tok: Any):  # noqa: ANN201
    """Return a backend that solves calculator tasks: call the tool, then box the tool's answer."""

    def backend(ids: list[int], **kw: Any) -> Generation:
        text = tok.decode(ids)
        last_user = text.rsplit("<|user|>", 1)[-1]
        if "<tool_response>" in last_user:
            value = re.findall(r"<tool_response>(.*?)</tool_response>", last_user)[-1]
            out, end = f"<think></think>\nThe answer is \\boxed{{{value}}}.", "<|user|>"
        else:
            m = re.search(r"Compute (\d+) ([-+*]) (\d+)", last_user)
            if m:
                expr = f"{m.group(1)} {m.group(2)} {m.group(3)}"
            else:
                prev = re.findall(r"\\boxed\{(-?\d+)\}", text)[-1]
                f = re.search(r"Now (add|subtract|multiply the result by) (\d+)", last_user)
                expr = f"{prev} {_FOLLOW[f.group(1)]} {f.group(2)}"
            out, end = tool_call(expr), "<|observation|>"
        toks = tok.encode(out, add_special_tokens=False) + [tid(tok, end)]
        return Generation(toks, [-0.2] * len(toks), "stop")

    return backend
