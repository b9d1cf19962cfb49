"""Teacher-forced scoring of (prompt, response) token sequences: per-token logprobs and logits.

The trainer scores rollouts here with the same temperature scaling the sampler used
(:mod:`infra.embedded.generation`), so rollout and trainer logprobs are comparable (TIS, clip ratios).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
