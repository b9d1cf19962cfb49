"""Converters, repairs, the interleaved-thinking split rule and validators on hand-built conversations."""

from __future__ import annotations

import json

import pytest

from data_prep.converters import ConversionError, convert_row, detect_format
from data_prep.repairs import RowRejected, repair_conversation, split_reasoning
from data_prep.schema import Message, SFTSample, ToolCall
from data_prep.split import split_interleaved
from data_prep.validators import validate_sample


def _prepare(row: dict, fmt: str = "auto", patterns: tuple[str, ...] = ()) -> list[list[Message]]:
    messages, _ = convert_row(row, fmt)
    messages, _ = repair_conversation(messages, patterns)
    return split_interleaved(messages)


def test_sharegpt_hermes_tool_calls_and_schemas_are_structured():
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    row = {
        "conversations": [
            {"from": "system", "value": f"Be brief.<tools>{json.dumps(tools)}</tools>"},
            {"from": "human", "value": "Find x"},
            {
                "from": "gpt",
                "value": "<think>call it</think><tool_call>"
                + json.dumps({"name": "lookup", "arguments": '{"q": 1}'})
                + "</tool_call>",
            },
            {"from": "tool", "value": "<tool_response>a</tool_response><tool_response>b</tool_response>"},
            {"from": "gpt", "value": "done"},
        ]
    }
    assert detect_format(row) == "sharegpt"
    messages, got_tools = convert_row(row)
    assert got_tools == tools and messages[0].content == "Be brief."
    assert messages[2].tool_calls == [ToolCall(name="lookup", arguments={"q": 1})]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [m.content for m in messages[3:5]] == ["a", "b"]


def test_openai_legacy_function_role_and_reasoning_field():
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": {"a": 2}}},
            {"role": "function", "name": "f", "content": "4"},
            {"role": "assistant", "content": "4", "reasoning": "2+2"},
        ]
    }
    messages, _ = convert_row(row)
    assert messages[0].content == "hi" and messages[1].tool_calls[0].arguments == {"a": 2}
    assert messages[2].role == "tool" and messages[3].reasoning == "2+2"


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}, "unknown_role"),
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}
                ]
            },
            "bad_tool_arguments",
        ),
        ({"text": "no known keys"}, "missing_prompt_response"),
    ],
)
def test_unconvertible_rows_raise_with_reason(row, reason):
    with pytest.raises(ConversionError) as err:
        convert_row(row)
    assert err.value.reason == reason


def test_split_reasoning_handles_malformed_tags():
    assert split_reasoning("<think>a</think>b") == ("a", "b", "think_tags_moved")
    assert split_reasoning("a</think>b") == ("a", "b", "missing_think_open")
    assert split_reasoning("<think>cut off")[2] == "truncated_reasoning"
    assert split_reasoning("plain") == (None, "plain", None)


def test_repairs_system_control_lines_truncation_and_suffixes():
    msgs = [
        Message(role="system", content="detailed thinking on"),
        Message(role="user", content="q1"),
        Message(role="assistant", content="<think>r</think><answer>A1</answer></s>"),
        Message(role="user", content="q2"),
        Message(role="assistant", content="<think>never finished"),
    ]
    out, applied = repair_conversation(msgs, (r"^\s*detailed thinking (on|off)\s*$",))
    assert [m.role for m in out] == ["user", "assistant"]
    assert out[1].content == "A1" and out[1].reasoning == "r"
    assert {"empty_system_dropped", "answer_tags_unwrapped", "truncated_final_turn_cut"} <= set(applied)
    kept, applied = repair_conversation(msgs[1:3], keep_answer_tags=True)
    assert kept[1].content == "<answer>A1</answer>" and "answer_tags_unwrapped" not in applied
    with pytest.raises(RowRejected) as err:
        repair_conversation([Message(role="user", content="hello")])
    assert err.value.reason == "no_supervised_reply"


def test_split_rule_one_example_per_completed_response_with_masks():
    call = [ToolCall(name="f", arguments={})]
    msgs = [
        Message(role="system", content="s"),
        Message(role="user", content="u1"),
        Message(role="assistant", content="", reasoning="plan", tool_calls=call),
        Message(role="tool", content="obs"),
        Message(role="assistant", content="answer1", reasoning="why1"),
        Message(role="user", content="u2"),
        Message(role="assistant", content="", reasoning="plan2", tool_calls=call),
        Message(role="tool", content="obs2"),
        Message(role="assistant", content="answer2", reasoning="why2"),
    ]
    first, second = split_interleaved(msgs)
    assert len(first) == 5 and [m.loss for m in first] == [0, 0, 1, 0, 1]
    assert first[2].reasoning == "plan" and first[4].reasoning == "why1"
    assert [m.loss for m in second] == [0, 0, 0, 0, 0, 0, 1, 0, 1]
    assert second[2].reasoning is None and second[4].reasoning is None  # earlier rationales stripped
    assert second[6].reasoning == "plan2" and second[8].reasoning == "why2"
    for k, ex in enumerate((first, second)):
        assert validate_sample(SFTSample(id=str(k), messages=ex)) == []


def test_tool_call_without_result_ends_a_response():
    call = [ToolCall(name="f", arguments={})]
    msgs = [
        Message(role="user", content="u"),
        Message(role="assistant", content="try", tool_calls=call),
        Message(role="user", content="no, stop"),
        Message(role="assistant", content="ok"),
    ]
    examples = split_interleaved(msgs)
    assert len(examples) == 2 and examples[0][-1].tool_calls == call and examples[0][-1].loss == 1


def test_validators_flag_bad_masks_tags_and_roles():
    bad_mask = [Message(role="user", content="u", loss=1), Message(role="assistant", content="a", loss=0)]
    problems = validate_sample(SFTSample(id="m", messages=bad_mask))
    assert "loss_on_user" in problems and "response_turn_unsupervised" in problems
    tags = [Message(role="user", content="u"), Message(role="assistant", content="<think>x", loss=1)]
    assert "unbalanced_think_tags" in validate_sample(SFTSample(id="t", messages=tags))
    orphan = [
        Message(role="user", content="u"),
        Message(role="tool", content="o"),
        Message(role="assistant", content="a", loss=1),
    ]
    assert "tool_without_call" in validate_sample(SFTSample(id="o", messages=orphan))
    unstripped = [
        Message(role="user", content="u"),
        Message(role="assistant", content="a", reasoning="r"),
        Message(role="user", content="v"),
        Message(role="assistant", content="b", loss=1),
    ]
    assert "context_turn_supervised_or_unstripped" in validate_sample(SFTSample(id="c", messages=unstripped))


def test_prompt_response_pairs_keep_reasoning_inline_and_split_once():
    (example,) = _prepare({"input": "q?", "output": "<think>hm</think>yes"}, "prompt_response")
    assert example[-1].reasoning == "hm" and example[-1].content == "yes" and example[-1].loss == 1
