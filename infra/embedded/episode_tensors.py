"""Per-episode Python rows → the padded ``[B, T, ...]`` tensors an RL micro-batch trains on."""

from __future__ import annotations

import torch


def pad_floats(rows: list[list[float]], device: torch.device | str) -> torch.Tensor:
    """Stack per-episode float rows (log-probs) to ``[B, T]`` float32, padded with 0."""
    width = max(max(len(r) for r in rows), 1)
    return torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32, device=device)


def pad_top_k(
    rows: list[tuple[torch.Tensor, ...]], width: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack per-episode top-k ``(ids, log-probs)`` to ``[B, width, k]``; padding: id 0, log-prob ``-inf``."""
    k = rows[0][0].shape[-1]
    ids = torch.zeros(len(rows), width, k, dtype=torch.long, device=device)
    lps = torch.full((len(rows), width, k), -torch.inf, dtype=torch.float32, device=device)
    for j, (row_ids, row_lps) in enumerate(rows):
        n = row_ids.shape[0]
        ids[j, :n], lps[j, :n] = row_ids, row_lps
    return ids, lps


def env_token_mask(response_mask: torch.Tensor, masks: list[list[int] | None]) -> torch.Tensor:
    """Zero the positions of environment tokens (tool results, user turns) in the response mask."""
    if all(m is None for m in masks):
        return response_mask
    width = response_mask.shape[1]
    rows = [m if m is not None else [1] * width for m in masks]
    env = torch.tensor([(r + [0] * width)[:width] for r in rows], device=response_mask.device)
    return response_mask * env.to(response_mask.dtype)
