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

Tokens stay out of the rows: slime's ``Dataset`` keeps every row in one RolloutManager actor, and a row
holding ``token_ids`` + ``loss_mask`` as Python ints costs about 44 bytes per token (2 TB at the paper's
44.5B tokens). ``<split>.tokens.bin`` holds each record's tokens as little-endian uint32, the token id in
the low 31 bits and the loss mask in the top bit (GLM's vocabulary is < 2**31); the JSONL row is
``{"id", "tools": [], "metadata": {"id", "offset", "length"}}`` (a few hundred bytes whatever the length),
read by ``infra.production.sft_rollout`` via ``--input-key id --metadata-key metadata``, which memory-maps
the ``.bin`` beside ``--prompt-data`` and reads each sample's slice when its batch is drawn.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from data_prep.length import message_to_template
from data_prep.schema import SFTSample

STOP_TOKENS = ("<|user|>", "<|observation|>", "<|endoftext|>")
_MASK_BIT = np.uint32(1 << 31)


def tokens_path(rows_path: Path | str) -> Path:
    """The packed token file that goes with a ``<split>.tokens.jsonl`` rows file."""
    return Path(rows_path).with_suffix(".bin")


def pack(ids: list[int], mask: list[int]) -> np.ndarray:
    """Return ``ids`` with the loss mask in the top bit, as little-endian uint32."""
    arr = np.asarray(ids, dtype="<u4")
    if arr.size and int(arr.max()) >= 1 << 31:
        raise ValueError("token id >= 2**31 cannot be packed with its mask bit")
    return arr | (np.asarray(mask, dtype="<u4") << 31)


def unpack(packed: np.ndarray) -> tuple[list[int], list[int]]:
    """Return ``(token_ids, loss_mask)`` of a packed slice."""
    arr = np.asarray(packed, dtype="<u4")
    return (arr & ~_MASK_BIT).tolist(), (arr >> 31).tolist()


def read_tokens(bin_path: Path | str, metadata: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Return ``(token_ids, loss_mask)`` of one row from its ``offset``/``length`` in the packed file."""
    offset, length = metadata.get("offset"), metadata.get("length")
    if not isinstance(offset, int) or not isinstance(length, int) or length < 1:
        raise ValueError(f"SFT row {metadata.get('id')!r}: metadata needs integer offset and length")
    data = np.memmap(bin_path, dtype="<u4", mode="r")
    if offset + length > data.size:
        raise ValueError(f"SFT row {metadata.get('id')!r}: slice past the end of {bin_path}")
    return unpack(data[offset : offset + length])


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
    """Write rows (``dest``) and packed tokens (:func:`tokens_path`); return kept/dropped counts by reason."""
    counts: Counter[str] = Counter()
    tmp, bin_tmp = dest.with_suffix(".tmp"), dest.with_suffix(".bin.tmp")
    offset = 0
    with src.open() as fin, tmp.open("w") as fout, bin_tmp.open("wb") as fbin:
        for lineno, line in enumerate(fin, 1):
            try:
                sample = SFTSample.model_validate_json(line)
                ids, mask = glm_tokens_and_mask(sample, tokenizer)
            except ValueError as exc:  # pydantic ValidationError is a ValueError
                counts[f"dropped:{type(exc).__name__}"] += 1
                if counts[f"dropped:{type(exc).__name__}"] <= 3:
                    print(f"{src}:{lineno}: {str(exc).splitlines()[0]}")
                continue
            fbin.write(pack(ids, mask).tobytes())
            meta = {"id": sample.id, "offset": offset, "length": len(ids)}
            # slime's Dataset asserts that --tool-key values are lists: never null.
            row = {"id": sample.id, "tools": sample.tools or [], "metadata": meta}
            fout.write(json.dumps(row, ensure_ascii=False) + "\n")
            offset += len(ids)
            counts["kept"] += 1
    bin_tmp.replace(tokens_path(dest))
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
