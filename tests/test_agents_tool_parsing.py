"""Strict GLM tool-call parsing: well-formed calls parse; every deviation is a recorded parse error."""

from __future__ import annotations

import pytest

from infra.agents.tool_parsing import StrictGLMToolParser

ARGS = "<arg_key>expression</arg_key><arg_value>1 + 2</arg_value><arg_key>n</arg_key><arg_value>3</arg_value>"
CALL = f"<tool_call>calc{ARGS}</tool_call>"
PAIR = "<arg_key>x</arg_key><arg_value>1</arg_value>"


def test_well_formed_calls_parse_in_order_with_json_values() -> None:
    parser = StrictGLMToolParser()
    calls = parser.parse(
        f"<think><tool_call>draft</tool_call></think>text\n{CALL}\n<tool_call>ping</tool_call>"
    )
    assert [(c.name, c.input) for c in calls] == [("calc", {"expression": "1 + 2", "n": 3}), ("ping", {})]
    assert not parser.malformed and all(not c.is_error for c in calls)
    assert calls[0].id < calls[1].id  # ids sort in model order (strands-sglang sorts results by id)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<tool_call>calc<arg_key>x</arg_key>1</tool_call>", "after arguments"),
        (
            "<tool_call>calc junk<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>",
            "invalid function name",
        ),
        ("<tool_call><arg_key>x</arg_key><arg_value>1</arg_value></tool_call>", "missing function name"),
        ("<tool_call>calc<arg_key>x</arg_key><arg_value>1</arg_value>", "unclosed"),
        ("calc</tool_call>", "stray"),
        (
            f"<tool_call>c{PAIR}{PAIR}</tool_call>",
            "duplicate",
        ),
        (
            f"<tool_call>c{PAIR} oops {PAIR.replace('x', 'y')}</tool_call>",
            "between",
        ),
    ],
)
def test_malformed_calls_are_errors_with_reasons(text: str, reason: str) -> None:
    parser = StrictGLMToolParser()
    calls = parser.parse(text)
    assert len(calls) == 1 and calls[0].is_error
    assert reason in parser.malformed[calls[0].id]


def test_a_malformed_call_does_not_hide_the_next_good_one() -> None:
    parser = StrictGLMToolParser()
    calls = parser.parse("<tool_call>calc<arg_key>x</arg_key>" + CALL)
    assert [c.is_error for c in calls] == [True, False] and calls[1].name == "calc"
    assert len(parser.malformed) == 1
