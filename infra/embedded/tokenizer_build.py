"""Build the offline byte-level BPE tokenizer of the ``micro`` model, deterministically from a seed.

No tokenizer can be downloaded at run time, so ``micro`` trains its own with HF ``tokenizers`` on a
corpus generated here from fixed word lists (English prose, arithmetic, code, JSON, tool markup), so the
same seed always yields the same vocabulary. Digits are split one per token (as in most production
tokenizers, which matters for arithmetic rewards), and the GLM-4.5 chat markup tokens are special tokens.
"""

from __future__ import annotations

import json
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# GLM-4.5 markup (see shared/reference/glm-chat-format.md); ``<|endoftext|>`` first so it gets id 0.
EOS_TOKEN = "<|endoftext|>"
GLM_SPECIAL_TOKENS = [
    EOS_TOKEN,
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
]
STOP_TOKENS = (EOS_TOKEN, "<|user|>", "<|observation|>")

_WORDS = (
    "the a an and or but if then else when while for to of in on at by with from as is are was were be "
    "been has have had do does did can could will would should may might must not no yes this that these "
    "those it its we you they he she i my your our their what which who whom whose why how where answer "
    "question problem solve solution step first second third next finally result number sum product total "
    "equal equals value find compute let given because therefore so thus check verify correct wrong true "
    "false think reason plan tool call function argument search file read write code test list string "
    "integer float return print import def class self data model train reward user assistant system "
    "please help explain example simple small large more less than each every all some many few one two "
    "three four five six seven eight nine ten hundred thousand time day year word letter sentence text "
    "format json output input error result final box boxed math python query weather city name date "
    "apple banana water book table chair house car road tree river mountain sun moon star cat dog bird"
).split()
_PUNCT = [".", ",", "?", "!", ":", ";"]
_CODE = [
    "def {f}({a}, {b}):\n    return {a} + {b}\n",
    "for {a} in range({n}):\n    print({a} * {n})\n",
    "if {a} > {n}:\n    {b} = [{a}, {n}]\nelse:\n    {b} = {{'{f}': {n}}}\n",
    "import json\n\nvalue = json.loads('{{\"{f}\": {n}}}')\n",
    "class {F}:\n    def __init__(self, {a}):\n        self.{a} = {a}\n",
]


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(_PUNCT)


def _arithmetic(rng: random.Random) -> str:
    a, b = rng.randint(0, 9999), rng.randint(0, 999)
    op = rng.choice(["+", "-", "*"])
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"What is {a} {op} {b}? The answer is \\boxed{{{value}}}."


def _code(rng: random.Random) -> str:
    names = [w for w in _WORDS if w.isalpha() and len(w) > 2]
    f, a, b = rng.sample(names, 3)
    return rng.choice(_CODE).format(f=f, a=a, b=b, F=f.capitalize(), n=rng.randint(0, 99))


def _tool_json(rng: random.Random) -> str:
    name = rng.choice(["search", "get_weather", "read_file", "calculator", "python"])
    args = {rng.choice(_WORDS): rng.choice([rng.choice(_WORDS), rng.randint(0, 500)]) for _ in range(2)}
    schema = {
        "name": name,
        "description": _sentence(rng),
        "parameters": {"type": "object", "properties": args},
    }
    return json.dumps(schema)


def build_corpus(seed: int = 0, lines: int = 6000) -> list[str]:
    """Return the deterministic training corpus for ``seed`` (a list of text lines)."""
    rng = random.Random(seed)
    makers = [_sentence, _sentence, _sentence, _arithmetic, _code, _tool_json]
    return [rng.choice(makers)(rng) for _ in range(lines)]


def build_micro_tokenizer(seed: int = 0, vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Return a byte-level BPE tokenizer trained on :func:`build_corpus` with the GLM markup as specials."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=GLM_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(build_corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=GLM_SPECIAL_TOKENS[1:],
        clean_up_tokenization_spaces=False,
    )
