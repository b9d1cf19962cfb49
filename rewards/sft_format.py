"""The SFT format reward: does a response follow the chat format and the family's answer convention?

Used for SFT checkpoint selection and as the ``sft_format`` held-out metric. A response scores 1.0 when
it has exactly one balanced ``<think>…</think>`` block at its start, followed by a non-empty final answer
in the convention of ``metadata.answer_format`` (or, if absent, the default of ``metadata.family``):

* ``boxed`` (math, puzzle, science): the final part contains a non-empty ``\\boxed{…}``;
* ``python_block`` (code): the final part contains a non-empty fenced ```` ```python ```` block;
* ``text`` (instruction following, chat): the final part is non-empty.

Otherwise the score is 0 and ``failure`` says which rule broke.
"""

from __future__ import annotations

import re

from rewards.answer_extract import THINK_OPEN, last_boxed, split_thinking
from rewards.contract import RewardRequest, RewardResult, register_reward

FAMILY_FORMATS = {
    "math": "boxed",
    "puzzle": "boxed",
    "science": "boxed",
    "code": "python_block",
    "if_multi_constraint": "text",
    "if_multiturn": "text",
    "chat": "text",
}
_PY_BLOCK = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)


def answer_format(metadata: dict) -> str:
    """Return the answer convention of a row: its ``answer_format``, else its family's, else ``text``."""
    fmt = metadata.get("answer_format") or FAMILY_FORMATS.get(str(metadata.get("family", "")), "text")
    if fmt not in ("boxed", "python_block", "text"):
        raise ValueError(f"metadata.answer_format {fmt!r} is not one of boxed, python_block, text")
    return fmt


def check_format(response: str, fmt: str) -> str | None:
    """Return None when ``response`` follows the format ``fmt``, else the failure reason."""
    if not response.lstrip().startswith(THINK_OPEN):
        return "no_think"
    _, final, problem = split_thinking(response)
    if problem:
        return problem
    if not final:
        return "empty_answer"
    if fmt == "boxed" and not last_boxed(final):
        return "no_boxed_answer"
    if fmt == "python_block":
        blocks = _PY_BLOCK.findall(final)
        if not blocks or not blocks[-1].strip():
            return "no_python_block"
    return None


@register_reward("sft_format")
def sft_format_reward(request: RewardRequest) -> RewardResult:
    """1.0 for a well-formed response in the row's answer convention, else 0 with the reason."""
    try:
        fmt = answer_format(request.metadata)
    except ValueError as exc:
        return RewardResult(score=0.0, failure="bad_label", details={"error": str(exc)})
    failure = check_format(request.response, fmt)
    return RewardResult(score=0.0 if failure else 1.0, failure=failure, details={"answer_format": fmt})
