"""GLM-4.5 markup template, offline tokenizer and per-message loss masks of the embedded backend."""

from __future__ import annotations

import pytest

from data_prep.schema import Message, ToolCall
from infra.embedded.chat_format import install_glm_markup, render, render_prompt_ids, render_with_loss_mask
from infra.embedded.tokenizer_build import GLM_SPECIAL_TOKENS, build_micro_tokenizer


@pytest.fixture(scope="module")
def tok():
    t = build_micro_tokenizer(0)
    install_glm_markup(t)
    return t


def conversation() -> list[Message]:
    return [
        Message(role="system", content="Be brief."),
        Message(role="user", content="What is 12+30?"),
        Message(
            role="assistant",
            reasoning="use the tool",
            tool_calls=[ToolCall(name="calculator", arguments={"expr": "12+30", "digits": 2})],
            loss=1,
        ),
        Message(role="tool", content="42"),
        Message(role="assistant", content="It is 42.", loss=1),
        Message(role="user", content="And 1+1?"),
        Message(role="assistant", content="2", loss=0),
        Message(role="user", content="Thanks"),
        Message(role="assistant", reasoning="polite", content="You are welcome.", loss=1),
    ]


TOOLS = [{"name": "calculator", "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}]


def test_tokenizer_is_deterministic_and_splits_digits(tok):
    again = build_micro_tokenizer(0)
    install_glm_markup(again)
    assert again.get_vocab() == tok.get_vocab()
    assert 1000 < len(tok) < 4096
    assert tok.tokenize("2048") == ["2", "0", "4", "8"]
    for special in GLM_SPECIAL_TOKENS:
        assert tok.tokenize(f"a{special}b")[1] == special


def test_template_renders_glm_markup(tok):
    text = render(tok, conversation(), TOOLS)
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n")
    assert '"name": "calculator"' in text
    assert "<|assistant|>\n<think>use the tool</think>\n\n<tool_call>calculator" in text
    assert (
        "<arg_key>expr</arg_key><arg_value>12+30</arg_value><arg_key>digits</arg_key><arg_value>2</arg_value>"
        in text
    )
    assert "</tool_call><|observation|>\n<tool_response>42</tool_response><|assistant|>" in text
    assert "<|assistant|>\n<think></think>\nIt is 42.<|user|>" in text  # non-thinking turn: empty think
    prompt = tok.decode(render_prompt_ids(tok, [{"role": "user", "content": "hi"}]))
    assert prompt == "[gMASK]<sop><|user|>\nhi<|assistant|>\n"


def test_loss_mask_covers_exactly_supervised_assistant_spans(tok):
    msgs = conversation()
    ids, mask = render_with_loss_mask(tok, msgs, TOOLS)
    assert len(ids) == len(mask)
    assert ids == tok(render(tok, msgs, TOOLS), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    # Expected: each supervised body tokenized on its own, followed by the token that ends the turn.
    expected: list[int] = []
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.loss:
            continue
        body = render(tok, msgs[: i + 1], TOOLS)[
            len(render(tok, msgs[:i], TOOLS, add_generation_prompt=True)) :
        ]
        expected += tok(body, add_special_tokens=False)["input_ids"]
        ender = {"tool": "<|observation|>", "user": "<|user|>"}.get(
            msgs[i + 1].role if i + 1 < len(msgs) else ""
        )
        expected.append(tok.convert_tokens_to_ids(ender or "<|endoftext|>"))
    assert [t for t, m in zip(ids, mask, strict=True) if m] == expected
    masked_text = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    for never in (
        "<|system|>",
        "<|assistant|>",
        "<tool_response>",
        "42</tool_response>",
        "And 1+1?",
        "Be brief",
    ):
        assert never not in masked_text
    assert (
        "It is 42." in masked_text
        and "You are welcome." in masked_text
        and "<tool_call>calculator" in masked_text
    )
    # The unsupervised assistant turn ("2", loss=0) is not in the mask.
    assert "<think></think>\n2" not in masked_text


def test_unsupervised_final_turn_gets_no_eos_loss(tok):
    msgs = [Message(role="user", content="hi"), Message(role="assistant", content="hello", loss=0)]
    ids, mask = render_with_loss_mask(tok, msgs)
    assert ids[-1] == tok.eos_token_id and sum(mask) == 0
