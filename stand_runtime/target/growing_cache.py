"""A KV-cache layer that grows in place: transformers' ``DynamicLayer`` without a copy per step.

``DynamicLayer.update`` appends by ``torch.cat``, which copies the layer's whole cache every step, a
cost that grows with the context, for plain decoding and every drafting method alike.
:class:`GrowingLayer` keeps each of keys and values in a buffer with spare room and holds
``keys``/``values`` as views of its first ``length`` slots: an append writes the new slots in place;
``crop`` (a shorter view of the same buffer) and the in-place compaction of tree steps
(:mod:`stand_runtime.target.kv_cache`, :mod:`stand_runtime.target.batch_kv`) keep working on the
views. Whenever ``keys`` or ``values`` is anything else (a tensor another method put there: a batch
selection, a repack, a reorder), the next append first copies it into a new buffer, so the layer is
never wrong, at worst as slow as ``DynamicLayer`` once.

A buffer is owned by one layer: slots past a crop are overwritten by the next append, so neither
another cache nor a caller may keep a view of them (keys or values an earlier ``update`` returned
are not to be read after a crop and a later append; nothing in this package does: prefill caches
shared by batch rows are read and padded into a new cache,
:meth:`stand_runtime.target.batch_kv.BatchedCache.from_rows`). Appended states of another dtype make a
new buffer of the promoted dtype, as ``torch.cat`` would.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

SPARE_SLOTS = 256
"""Slots a new buffer holds beyond what it must, at least (and half the length on top): appends are
then amortised O(1) copies, at most one and a half times the cache's memory."""


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose appends write into a buffer with spare slots (module docstring).

    ``keys`` / ``values``: ``[batch, kv_heads, length, head_dim]`` views of ``[batch, kv_heads,
    capacity, head_dim]`` buffers (same dtype and device as the states appended).
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._buffers: dict[str, torch.Tensor] = {}

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[batch, kv_heads, n, head_dim]`` key and value states; returns the whole keys and
        values (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys = self._append("keys", self.keys, key_states)
        self.values = self._append("values", self.values, value_states)
        return self.keys, self.values

    def _append(self, name: str, current: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        length = current.shape[-2] if current.dim() == 4 else 0
        end = length + new.shape[-2]
        buffer = self._buffers.get(name)
        dtype = torch.promote_types(current.dtype, new.dtype) if length else new.dtype
        if not (_is_prefix_view(current, buffer) and buffer.shape[-2] >= end and buffer.dtype == dtype
                and buffer.shape[:2] == new.shape[:2] and buffer.shape[-1] == new.shape[-1]
                and (torch.is_inference_mode_enabled() or not buffer.is_inference())):
            # (a buffer made under torch.inference_mode cannot be written outside it: a new one then)
            shape = (*new.shape[:2], end + max(SPARE_SLOTS, end // 2), new.shape[-1])
            buffer = torch.empty(shape, dtype=dtype, device=new.device)
            if length:
                buffer[:, :, :length] = current
            self._buffers[name] = buffer
        buffer[:, :, length:end] = new
        return buffer[:, :, :end]


def _is_prefix_view(tensor: torch.Tensor, buffer: torch.Tensor | None) -> bool:
    """True when ``tensor`` is ``buffer[:, :, :length]`` for some length."""
    return (buffer is not None and tensor.dim() == 4 and tensor.device == buffer.device
            and tensor.data_ptr() == buffer.data_ptr() and tensor.stride() == buffer.stride()
            and tensor.shape[:2] == buffer.shape[:2] and tensor.shape[-1] == buffer.shape[-1]
            and tensor.shape[-2] <= buffer.shape[-2])


def grow_in_place(cache: Cache) -> Cache:
    """Make ``cache``'s plain ``DynamicLayer`` layers (present and, for a cache that adds layers
    lazily, future ones) :class:`GrowingLayer`; other layer kinds (sliding windows) stay as they
    are. Returns ``cache``, which must hold no tokens yet.

    Raises:
        ValueError: the cache already holds tokens.
    """
    if cache.get_seq_length() > 0:
        raise ValueError("grow_in_place needs an empty cache")
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = GrowingLayer
    return cache
