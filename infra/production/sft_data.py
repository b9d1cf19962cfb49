"""GLM-correct SFT token ids and loss masks, computed once in data prep for slime's SFT path.

slime's SFT rollout builds masks with ``MultiTurnLossMaskGenerator``, whose ``--loss-mask-type`` has only
Qwen variants; the GLM-4.5 template (``[gMASK]<sop>``, role markers, no end-of-turn token) is not one of
them. So the production SFT reads ids and masks written here, under the model's own chat template:

* the conversation is rendered once (``tools=`` included) and each supervised assistant message's span is
  found by rendering the prefix before it *with* the generation prompt (``<|assistant|>`` and what the
  template puts after it) and the prefix that ends with it: the tokens between are exactly what the model
  generates for that turn (reasoning, text, tool calls);
* the one token after the span is supervised too when it is a GLM stop token (``<|user|>``,
  ``<|observation|>``, ``<|endoftext|>``): GLM has no end-of-turn token, so emitting the next role
  marker *is* how a turn ends, and slime's rollouts stop on those ids; a final assistant turn gets an
  ``<|endoftext|>`` appended for the same reason;
* a template whose prefix rendering is not a prefix of the full rendering raises; the record is dropped
  and counted by :func:`tokenize_file`.

Output rows: ``{"messages": [...], "tools": [...], "metadata": {"id", "token_ids", "loss_mask"}}``, read
by ``infra.production.sft_rollout`` via ``--input-key messages --metadata-key metadata``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from data_prep.length import message_to_template
from data_prep.schema import SFTSample

STOP_TOKENS = ("<|user|>", "<|observation|>", "<|endoftext|>")


def _ids(tokenizer: Any, messages: list[dict], tools: list[dict] | None, gen: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=gen)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def glm_tokens_and_mask(sample: SFTSample, tokenizer: Any) -> tuple[list[int], list[int]]:
    """Return ``(token_ids, loss_mask)`` of one SFT sample: 1 exactly on supervised assistant output."""
    msgs = [message_to_template(m) for m in sample.messages]
    ids = _ids(tokenizer, msgs, sample.tools, gen=False)
    stop_ids = {tokenizer.convert_tokens_to_ids(t) for t in STOP_TOKENS}
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    mask = [0] * len(ids)
    for i, m in enumerate(sample.messages):
        if not (m.loss and m.role == "assistant"):
            continue
        start = len(_ids(tokenizer, msgs[:i], sample.tools, gen=True))
        upto = _ids(tokenizer, msgs[: i + 1], sample.tools, gen=False)
        if ids[: len(upto)] != upto or upto[:start] != _ids(tokenizer, msgs[:i], sample.tools, gen=True):
            raise ValueError(f"{sample.id}: chat template is not prefix-stable at message {i}")
        end = len(upto)
        while end > start and ids[end - 1] in stop_ids:
            end -= 1  # a template that already closes the turn: the stop token is handled below
        for j in range(start, end):
            mask[j] = 1
        if end < len(ids) and ids[end] in stop_ids:
            mask[end] = 1
        elif end == len(ids):
            ids.append(eos)
            mask.append(1)
    if not any(mask):
        raise ValueError(f"{sample.id}: no supervised assistant token")
    return ids, mask


def tokenize_file(src: Path, dest: Path, tokenizer: Any) -> Counter[str]:
    """Write the tokenized rows of an SFTSample JSONL file; return kept/dropped counts by reason."""
    counts: Counter[str] = Counter()
    tmp = dest.with_suffix(".tmp")
    with src.open() as fin, tmp.open("w") as fout:
        for lineno, line in enumerate(fin, 1):
            try:
                sample = SFTSample.model_validate_json(line)
                ids, mask = glm_tokens_and_mask(sample, tokenizer)
            except ValueError as exc:  # pydantic ValidationError is a ValueError
                counts[f"dropped:{type(exc).__name__}"] += 1
                if counts[f"dropped:{type(exc).__name__}"] <= 3:
                    print(f"{src}:{lineno}: {str(exc).splitlines()[0]}")
                continue
            row = {
                "messages": [message_to_template(m) for m in sample.messages],
                "tools": sample.tools,
                "metadata": {"id": sample.id, "token_ids": ids, "loss_mask": mask},
            }
            fout.write(json.dumps(row, ensure_ascii=False) + "\n")
            counts["kept"] += 1
    tmp.replace(dest)
    return counts


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m infra.production.sft_data --input IN --output OUT --tokenizer HF_DIR``."""
    ap = argparse.ArgumentParser(prog="python -m infra.production.sft_data")
    ap.add_argument("--input", required=True, type=Path)
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--tokenizer", required=True, help="HF folder whose chat template is used")
    a = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.tokenizer, trust_remote_code=True)
    counts = tokenize_file(a.input, a.output, tok)
    print(json.dumps(dict(counts)))
    return 0 if counts["kept"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
