"""A KV cache for token-by-token decoding that appends in place instead of re-concatenating.

transformers' ``DynamicCache`` grows each layer with ``torch.cat`` on every decoded token, copying the
whole cache each step: a quarter of the decoder's time in the agent stages' episodes (~1,000-token
contexts, py-spy on stage 05). :class:`GrowingCache` keeps each layer in a buffer with spare capacity
(doubled when full) and hands attention a view of the filled part. Attention reads the same numbers in
the same order, so samples are bit-identical to ``DynamicCache``'s (``tests/test_embedded_generation.py``).
Hand-written because transformers has no appendable dynamic cache (its ``StaticCache`` needs the final
length up front and attends over the padding too, which changes the sums).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_CAPACITY = 64


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views of buffers with room to append."""

    _key_buf: torch.Tensor | None = None
    _value_buf: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new states and return views of everything cached."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        filled = self.get_seq_length()
        if self._key_buf is None and filled:  # the views were replaced (crop, batch selection): rebuffer
            self._key_buf, self._value_buf = self.keys, self.values
        need = filled + key_states.shape[-2]
        if self._key_buf is None or need > self._key_buf.shape[-2]:
            capacity = max(need, 2 * filled, MIN_CAPACITY)
            self._key_buf = self._grow(self.keys, key_states, filled, capacity)
            self._value_buf = self._grow(self.values, value_states, filled, capacity)
        self._key_buf[..., filled:need, :] = key_states
        self._value_buf[..., filled:need, :] = value_states
        self.keys, self.values = self._key_buf[..., :need, :], self._value_buf[..., :need, :]
        return self.keys, self.values

    @staticmethod
    def _grow(old: torch.Tensor, new: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
        buf = new.new_empty((*new.shape[:-2], capacity, new.shape[-1]))
        if filled:
            buf[..., :filled, :] = old
        return buf

    def _drop_buffers(self) -> None:
        self._key_buf = self._value_buf = None

    def crop(self, tokens_to_remove: int) -> None:  # noqa: D102 - DynamicLayer's, then rebuffer
        super().crop(tokens_to_remove)
        self._drop_buffers()

    def batch_repeat_interleave(self, repeats: int) -> None:  # noqa: D102
        super().batch_repeat_interleave(repeats)
        self._drop_buffers()

    def batch_select_indices(self, indices: torch.Tensor) -> None:  # noqa: D102
        super().batch_select_indices(indices)
        self._drop_buffers()

    def reset(self) -> None:  # noqa: D102
        super().reset()
        self._drop_buffers()


class GrowingCache(Cache):
    """A dynamic cache of :class:`GrowingLayer` s (one per decoder layer, created as layers are used)."""

    def __init__(self, layers: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        super().__init__(layer_class_to_replicate=GrowingLayer)
        for keys, values in layers or ():
            layer = GrowingLayer()
            layer.update(keys, values)
            self.layers.append(layer)
