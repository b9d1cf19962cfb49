"""Teacher-forced scoring of (prompt, response) token sequences: per-token logprobs and logits.

The trainer scores rollouts here with the same temperature scaling the sampler used
(:mod:`infra.embedded.generation`), so rollout and trainer logprobs are comparable (TIS, clip ratios).

:func:`response_logits` runs every sequence whole. :func:`shared_prompt_logits` gives the same logits
(up to float rounding) for samples that share a prompt, as a group's samples do: the prompt is encoded
once and its keys/values serve every response, and the vocabulary projection runs only where a response
token is predicted. With agent prompts (tool schemas, hundreds of tokens) and a group of 8 that is most of
a training step's work saved; gradients flow through the shared keys/values into the prompt's encoding.
Hand-written: transformers has prompt caching for generation, not for a training forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infra.embedded.generation import _cache_kw, _cache_of


@dataclass
class TokenBatch:
    """Right-padded prompt+response sequences and the response tokens' positions ``[B, T]``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    logit_index: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor


def build_batch(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
) -> TokenBatch:
    """Return the padded batch of ``prompt + response`` sequences."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=False))
    t_max = max(max((len(r) for r in responses), default=0), 1)
    n = len(prompts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    index = torch.zeros((n, t_max), dtype=torch.long)
    resp = torch.full((n, t_max), pad_id, dtype=torch.long)
    rmask = torch.zeros((n, t_max), dtype=torch.float32)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=False)):
        seq = list(p) + list(r)
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn[i, : len(seq)] = 1
        if r:
            index[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
            resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            rmask[i, : len(r)] = 1.0
    dev = torch.device(device)
    return TokenBatch(ids.to(dev), attn.to(dev), index.to(dev), resp.to(dev), rmask.to(dev))


def response_logits(model: torch.nn.Module, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """Return the temperature-scaled logits that predict each response token, ``[B, T, V]`` float32."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    picked = logits.gather(1, batch.logit_index[..., None].expand(-1, -1, logits.shape[-1])).float()
    return picked / temperature if temperature > 0 else picked


def logprobs_from_logits(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Return ``log_softmax(logits)`` at ``token_ids``, ``[B, T]``."""
    return torch.log_softmax(logits, dim=-1).gather(-1, token_ids[..., None]).squeeze(-1)


def response_logprobs(model: torch.nn.Module, batch: TokenBatch, temperature: float = 1.0) -> torch.Tensor:
    """Return per-token logprobs of the response tokens (0 where padded), ``[B, T]``."""
    lp = logprobs_from_logits(response_logits(model, batch, temperature), batch.response_ids)
    return lp * batch.response_mask


def _batch_parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Return the decoder stack and the vocabulary projection (``lm_head``) of a causal LM."""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if decoder is None or head is None:
        raise ValueError(f"{type(model).__name__}: no decoder or output embeddings to score a prompt once")
    return decoder, head


def _one_prompt_logits(
    model: torch.nn.Module, prompt: list[int], responses: list[list[int]], pad_id: int, device: torch.device
) -> torch.Tensor:
    """Logits predicting each response token of ``responses`` (all after ``prompt``), ``[B, T, V]``."""
    decoder, head = _batch_parts(model)
    n, width = len(responses), max(max((len(r) for r in responses), default=0), 1)
    # The prompt's last token predicts the first response token: it goes with the responses, so every
    # predicting position is computed in the second pass.
    stem = prompt[:-1]
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, len(stem) + width), dtype=torch.long)
    attn[:, : len(stem)] = 1
    for i, r in enumerate(responses):
        tail = [prompt[-1], *r[:-1]] if r else [prompt[-1]]
        ids[i, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        attn[i, len(stem) : len(stem) + len(tail)] = 1
    reuse = {}
    if stem:
        past = _cache_of(decoder(input_ids=torch.tensor([stem], device=device), use_cache=True))
        past.batch_repeat_interleave(n)
        reuse = {_cache_kw(decoder): past, "use_cache": True}
    positions = torch.arange(len(stem), len(stem) + width, device=device).expand(n, -1)
    hidden = decoder(
        input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=positions, **reuse
    ).last_hidden_state
    return head(hidden)


def shared_prompt_logits(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Return what :func:`response_logits` returns for ``build_batch(prompts, responses)``, ``[B, T, V]``.

    Consecutive samples with the same prompt are scored in one pass that encodes that prompt once.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if any(not p for p in prompts):
        raise ValueError("an empty prompt has no token to predict the first response token from")
    dev = torch.device(device)
    t_max = max(max((len(r) for r in responses), default=0), 1)
    parts, start = [], 0
    while start < len(prompts):
        end = start + 1
        while end < len(prompts) and prompts[end] == prompts[start]:
            end += 1
        logits = _one_prompt_logits(model, prompts[start], responses[start:end], pad_id, dev)
        parts.append(torch.nn.functional.pad(logits, (0, 0, 0, t_max - logits.shape[1])))
        start = end
    picked = torch.cat(parts).float()
    return picked / temperature if temperature > 0 else picked
