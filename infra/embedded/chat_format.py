"""The GLM-4.5 chat markup as a Jinja chat template, and tokenization with a per-token loss mask.

The template is set on every embedded tokenizer (``micro``, ``smollm2-135m``, any HF model without GLM
markup), so masking, template hashing and tool parsing exercise the markup production uses
(``shared/reference/glm-chat-format.md``): ``[gMASK]<sop>`` prefix, role markers with no end-of-turn
token, ``<think>…</think>`` (empty for non-thinking turns), tools under ``# Tools`` in the system turn,
``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`` and ``<|observation|>`` +
``<tool_response>…</tool_response>``.

:func:`render_with_loss_mask` is written here because no library masks per *message* under an arbitrary
template: the supervised span of an assistant turn is found by rendering message prefixes (a prefix of
the conversation renders to a prefix of the text) and mapping character spans to tokens. The span is the
turn's body (reasoning, text, tool calls) plus the one token that ends the turn, which the model must
learn to emit: the next turn's ``<|user|>``/``<|observation|>`` marker, or ``<|endoftext|>`` appended
after a final assistant turn. Other turns' markers, the newline after a marker, observations and tool
responses are never supervised.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerBase

from infra.embedded.tokenizer_build import EOS_TOKEN, GLM_SPECIAL_TOKENS, STOP_TOKENS

GLM_CHAT_TEMPLATE = (
    "{{- '[gMASK]<sop>' -}}"
    "{%- if tools -%}"
    "{{- '<|system|>\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n' -}}"
    "{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, output the function name and arguments ' -}}"
    "{{- 'in this format:\\n' -}}"
    "{{- '<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>' -}}"
    "{{- '...</tool_call>' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}{{- '<|system|>\\n' + m.content -}}"
    "{%- elif m.role == 'user' -%}{{- '<|user|>\\n' + m.content -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{{- '<|assistant|>\\n<think>' + (m.reasoning_content or m.reasoning or '') -}}"
    "{{- '</think>\\n' + (m.content or '') -}}"
    "{%- for tc in (m.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{{- '\\n<tool_call>' + f.name -}}"
    "{%- for k, v in (f.arguments or {}).items() -%}"
    "{{- '<arg_key>' + k + '</arg_key><arg_value>' -}}"
    "{{- (v if v is string else (v | tojson)) + '</arg_value>' -}}"
    "{%- endfor -%}"
    "{{- '</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}"
    "{{- '\\n<tool_response>' + m.content + '</tool_response>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)


def install_glm_markup(tokenizer: PreTrainedTokenizerBase) -> int:
    """Add the GLM markup special tokens (if missing) and the chat template; return how many were added."""
    missing = [t for t in GLM_SPECIAL_TOKENS if t not in tokenizer.get_vocab()]
    added = 0
    if missing:
        added = tokenizer.add_special_tokens(
            {"additional_special_tokens": missing}, replace_extra_special_tokens=False
        )
    tokenizer.eos_token = EOS_TOKEN
    if tokenizer.pad_token is None:
        tokenizer.pad_token = EOS_TOKEN
    tokenizer.chat_template = GLM_CHAT_TEMPLATE
    return added


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Return the ids of ``<|endoftext|>``, ``<|user|>``, ``<|observation|>`` (those the tokenizer has)."""
    vocab = tokenizer.get_vocab()
    return [vocab[t] for t in STOP_TOKENS if t in vocab]


def _as_dicts(messages: list[Any]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m) for m in messages]


def render(
    tokenizer: PreTrainedTokenizerBase, messages: list[Any], tools: list | None = None, **kw: Any
) -> str:
    """Return the chat-template text of ``messages`` (``data_prep.schema.Message`` objects or dicts)."""
    if not tokenizer.chat_template:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no chat template; run install_glm_markup")
    return tokenizer.apply_chat_template(_as_dicts(messages), tools=tools or None, tokenize=False, **kw)


def render_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, messages: list[Any], tools: list | None = None
) -> list[int]:
    """Return token ids of ``messages`` followed by the assistant generation prompt."""
    text = render(tokenizer, messages, tools, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_with_loss_mask(
    tokenizer: PreTrainedTokenizerBase, messages: list[Any], tools: list | None = None
) -> tuple[list[int], list[int]]:
    """Return ``(input_ids, loss_mask)`` of a conversation; mask is 1 on supervised assistant spans.

    An assistant message is supervised when its ``loss`` is 1 (``data_prep.schema.Message``); dicts
    without a ``loss`` key count as supervised when they are assistant turns.
    """
    msgs = _as_dicts(messages)
    full = render(tokenizer, msgs, tools)
    spans: list[tuple[int, int]] = []
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant" or not m.get("loss", 1):
            continue
        start_text = render(tokenizer, msgs[:i], tools, add_generation_prompt=True)
        end_text = render(tokenizer, msgs[: i + 1], tools)
        if not (full.startswith(end_text) and end_text.startswith(start_text)):
            raise ValueError(
                f"chat template of {tokenizer.name_or_path!r} is not prefix-stable at message {i}; "
                "per-message loss masks need a template where a conversation prefix renders to a text prefix"
            )
        spans.append((len(start_text), len(end_text)))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = list(enc["input_ids"])
    offsets = enc["offset_mapping"]
    stops = set(stop_token_ids(tokenizer))
    mask = [0] * len(ids)
    for s, e in spans:
        last = -1
        for j, (a, b) in enumerate(offsets):
            if a >= s and b <= e and b > a:
                mask[j] = 1
                last = j
        if last < 0:
            continue
        nxt = last + 1
        if nxt < len(ids) and ids[nxt] in stops and offsets[nxt][0] >= e:
            mask[nxt] = 1
    if msgs and msgs[-1].get("role") == "assistant":
        eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
        ids.append(eos)
        mask.append(1 if spans and spans[-1][1] == len(full) else 0)
    return ids, mask
