"""RL/SFT rows carry ``"tools": []``, never null (slime's ``Dataset`` asserts a list), and ``[]`` renders
exactly as no tools in both the embedded GLM-markup template and through ``chat_format.render``: the
embedded chain's prompts, and so its numbers, do not move.
"""

from __future__ import annotations

import json

import pytest

from data_prep.schema import PromptRow
from data_prep.tiny_tasks import heldout_tasks


@pytest.fixture(scope="module")
def tok():
    from infra.embedded.chat_format import install_glm_markup
    from infra.embedded.tokenizer_build import build_micro_tokenizer

    t = build_micro_tokenizer(seed=0)
    install_glm_markup(t)
    return t


def test_prompt_rows_write_an_empty_tool_list():
    row = PromptRow(id="a", prompt=[{"role": "user", "content": "hi"}], tools=None)
    assert json.loads(row.model_dump_json())["tools"] == []
    task = heldout_tasks("math_acc", 1, 0)[0]
    assert task.prompt_row().model_dump(mode="json")["tools"] == []


@pytest.mark.parametrize("gen", [True, False])
def test_empty_tools_render_byte_identical_to_none(tok, gen):
    from infra.embedded.chat_format import render, render_prompt_ids

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    assert render(tok, msgs, [], add_generation_prompt=gen) == render(
        tok, msgs, None, add_generation_prompt=gen
    )
    # slime's Dataset calls the tokenizer directly with tools=[]: the template itself treats [] as none
    raw = tok.apply_chat_template(msgs, tools=[], tokenize=False, add_generation_prompt=gen)
    assert raw == tok.apply_chat_template(msgs, tools=None, tokenize=False, add_generation_prompt=gen)
    assert render_prompt_ids(tok, msgs, []) == render_prompt_ids(tok, msgs, None)
