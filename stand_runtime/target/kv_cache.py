"""KV caches on transformers' own cache classes, for one row and for a batch (docs/algorithms.md §5.2).

- **Growing in place** (:class:`GrowingLayer`): ``DynamicLayer.update`` appends by ``torch.cat``, a
  copy of the layer's whole cache every step. A growing layer keeps keys and values in buffers with
  spare room and holds ``keys``/``values`` as views of their first ``length`` slots: an append writes
  in place, and ``crop`` and the compactions below keep working on the views. Whenever ``keys`` or
  ``values`` is anything else (a batch selection, a repack), the next append first copies it into a
  new buffer, so the layer is never wrong. A buffer is owned by one layer: slots past a crop are
  overwritten by the next append, so no caller may keep a view of them (prefill caches shared by
  batch rows are read and padded into a new cache, :meth:`BatchedCache.from_rows`).
- **Compaction after a tree step** (:func:`keep_tree_entries`): a step appends root + all drafted
  nodes; only the root and the accepted nodes stay, copied to the front of the block, the rest
  cropped (``Cache.crop``), cheaper than an index_select into new tensors (docs/decisions.md).
- **A batch whose rows hold different numbers of tokens** (:class:`BatchedCache`): each row keeps its
  accepted entries at the front of the step's block and the rest becomes *holes*, hidden by a
  ``[B, S]`` validity mask in the attention mask; positions are explicit per row, so a hole never
  shifts a token's position. When holes take more than :data:`REPACK_HOLES` of the cache the rows are
  right-aligned again.
- **Prompt prefixes kept across calls** (:class:`PrefixCache`, docs/architecture.md §1.5): a DVTS
  round's prompt is the round before's plus the chosen step, so a prompt that starts with a kept one
  is prefilled from a copy of its states; the KV entries of a prefix do not depend on what follows
  it. A drafter that learns from the prompt's logits is only fed the new positions, so a kept prefix
  serves a row only when the row's drafter memory was fed that whole prefix (its ``learners``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np
import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer

SPARE_SLOTS = 256
"""Slots a new buffer holds beyond what it must, at least (and half the length on top): appends are
then amortised O(1) copies, at most one and a half times the cache's memory."""


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose appends write into a buffer with spare slots (module docstring); appended
    states of another dtype make a new buffer of the promoted dtype, as ``torch.cat`` would.

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
    """Make ``cache``'s plain ``DynamicLayer`` layers (present and future ones) :class:`GrowingLayer`;
    other layer kinds (sliding windows) stay as they are. Returns ``cache``, which must be empty.

    Raises:
        ValueError: the cache already holds tokens.
    """
    if cache.get_seq_length() > 0:
        raise ValueError("grow_in_place needs an empty cache")
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = GrowingLayer
    return cache


def keep_tree_entries(cache: Cache, block_start: int, keep: Sequence[int], block_len: int) -> None:
    """Keep only the ``keep`` entries of the last tree block of every layer, in order: afterwards the
    cache holds ``block_start + len(keep)`` entries.

    Args:
        cache: a DynamicCache (layers ``[batch, kv_heads, seq, head_dim]``).
        block_start: sequence length before the tree step (the block's first offset).
        keep: increasing offsets inside the block to keep (root first: ``[0, accepted...]``).
        block_len: number of entries the tree step appended.
    """
    kept = len(keep)
    with torch.inference_mode():
        _move_to_front(cache, block_start, keep)
    if block_len > kept:
        cache.crop(-(block_len - kept))


def _move_to_front(cache: Cache, block_start: int, keep: Sequence[int]) -> None:
    kept = len(keep)
    if list(keep) != list(range(kept)):
        source = torch.as_tensor(keep, dtype=torch.long) + block_start
        device_source: dict[torch.device, torch.Tensor] = {}
        for layer in cache.layers:
            for states in (layer.keys, layer.values):
                index = device_source.setdefault(states.device, source.to(states.device))
                states[:, :, block_start : block_start + kept] = states.index_select(2, index)


def new_cache(model, *, full_window: bool = True) -> Cache:
    """An empty KV cache for ``model`` on transformers' own ``DynamicCache``, its layers growing in
    place (:class:`GrowingLayer`).

    With ``full_window`` (speculative decoding), sliding-window layers get full length (compaction needs
    every entry in place; the tree mask applies the window, :func:`stand_runtime.trees.tree.tree_attention_mask`);
    without it (plain decoding) they stay as the model's config makes them.
    """
    from .model_facts import attention_layout

    if full_window and attention_layout(model).window is not None:
        return grow_in_place(DynamicCache())
    return grow_in_place(DynamicCache(config=model.config))


REPACK_HOLES = 0.25
"""Re-align the cache (one copy) once that would drop this fraction of its columns."""


class BatchedCache:
    """A transformers ``DynamicCache`` of B rows plus each row's validity mask.

    Attributes:
        cache: the ``DynamicCache`` (layers ``[B, kv_heads, S, head_dim]``).
        valid: ``[B, S]`` bool, True where a slot holds one of the row's tokens.
    """

    def __init__(self, cache: DynamicCache, valid: torch.Tensor) -> None:
        self.cache = cache
        self.valid = valid

    @classmethod
    def from_rows(cls, caches: Sequence[DynamicCache], config) -> "BatchedCache":
        """Stack single-row caches (each ``[1, H, L_b, D]``) left-padded to the longest row.

        The same cache object may appear several times (samples of one prompt share its prefill).
        """
        length = max(c.get_seq_length() for c in caches)
        valid = torch.zeros(len(caches), length, dtype=torch.bool)
        for b, c in enumerate(caches):
            valid[b, length - c.get_seq_length():] = True
        batched = grow_in_place(DynamicCache(config=config))
        if length == 0:
            return cls(batched, valid)
        reference = next(c for c in caches if c.get_seq_length() == length)
        for layer_index, like in enumerate(reference.layers):
            keys, values = [], []
            for c in caches:
                layer = c.layers[layer_index] if c.get_seq_length() else None
                for out, states, template in ((keys, getattr(layer, "keys", None), like.keys),
                                              (values, getattr(layer, "values", None), like.values)):
                    if states is None:  # a one-token prompt caches nothing
                        states = template[:, :, :0]
                    out.append(torch.nn.functional.pad(states, (0, 0, length - states.shape[2], 0)))
            batched.update(torch.cat(keys), torch.cat(values), layer_index)
        return cls(batched, valid)

    def extend(self, other: "BatchedCache") -> None:
        """Append ``other``'s rows (admitted into a running batch) after this cache's, both left-padded
        with holes to the longer; this cache must hold states in every layer, ``other`` may hold none."""
        length = max(self.length, other.length)
        added = other.valid.shape[0]
        for index, layer in enumerate(self.cache.layers):
            theirs = other.cache.layers[index] if index < len(other.cache.layers) else None
            for name in ("keys", "values"):
                mine = getattr(layer, name)
                states = getattr(theirs, name, None)
                if states is None or states.dim() != 4:
                    states = mine.new_zeros((added, mine.shape[1], 0, mine.shape[3]))
                setattr(layer, name, torch.cat([_left_pad(mine, length), _left_pad(states.to(mine.dtype), length)]))
        self.valid = torch.cat([_left_pad_mask(self.valid, length), _left_pad_mask(other.valid, length)])

    @property
    def length(self) -> int:
        """Slots per row (S)."""
        return self.valid.shape[1]

    def attention_mask(self, ancestors: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
        """The additive ``[B, 1, N, S + N]`` mask of a batched tree step.

        Args:
            ancestors: ``[B, N, N]`` bool per row (padding nodes see only themselves).
        """
        batch, n = ancestors.shape[0], ancestors.shape[1]
        prefix = self.valid[:, None, :].expand(batch, n, self.length)
        allowed = torch.cat([prefix, ancestors], dim=2).to(device)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def keep(self, block_start: int, keep: Sequence[Sequence[int]], block_len: int) -> None:
        """After a step appended ``block_len`` slots per row at ``block_start``: row b keeps
        ``keep[b]`` (offsets inside the block, increasing) at the block's front; the block shrinks to
        the longest kept list and the remaining slots become holes. Only the columns from the first
        one some row moves are gathered (a path along the block's front is already in place)."""
        kept = max((len(k) for k in keep), default=0)
        batch = len(keep)
        index = np.zeros((batch, kept), dtype=np.int64)
        valid = np.zeros((batch, kept), dtype=bool)
        for b, offsets in enumerate(keep):
            index[b, : len(offsets)] = offsets
            valid[b, : len(offsets)] = True
        moved = ((index != np.arange(kept)) & valid).any(axis=0)  # [kept] some row's entry moves into the column
        first = int(moved.argmax()) if moved.any() else kept  # columns before it stay as they are
        if first < kept:
            gather = torch.from_numpy(index[:, first:] + block_start)
            with torch.inference_mode():
                for layer in self.cache.layers:
                    for name in ("keys", "values"):
                        states = getattr(layer, name)
                        states[:, :, block_start + first: block_start + kept] = _gather(states, gather)
        if block_len > kept:
            self.cache.crop(-(block_len - kept))
        self.valid = torch.cat([self.valid, torch.from_numpy(valid)], dim=1)
        if self.spare() > REPACK_HOLES:
            self.repack()

    def spare(self) -> float:
        """Fraction of columns :meth:`repack` would drop (the longest row's holes)."""
        if not self.valid.numel():
            return 0.0
        return 1.0 - int(self.valid.sum(dim=1).max()) / self.length

    def repack(self) -> None:
        """Right-align every row's tokens (left padding only), dropping all-hole columns."""
        counts = self.valid.sum(dim=1)
        length = int(counts.max()) if counts.numel() else 0
        batch = self.valid.shape[0]
        index = torch.zeros(batch, length, dtype=torch.long)
        valid = torch.zeros(batch, length, dtype=torch.bool)
        for b in range(batch):
            slots = torch.nonzero(self.valid[b]).flatten()
            index[b, length - len(slots):] = slots
            valid[b, length - len(slots):] = True
        with torch.inference_mode():
            for layer in self.cache.layers:
                for name in ("keys", "values"):
                    setattr(layer, name, _gather(getattr(layer, name), index))
        self.valid = valid

    def select(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (batch indices, in order), then drop columns no remaining row uses."""
        indices = torch.as_tensor(list(rows), dtype=torch.long)
        self.cache.batch_select_indices(indices)
        self.valid = self.valid[indices]
        used = torch.nonzero(self.valid.any(dim=0)).flatten()
        first = int(used[0]) if used.numel() else self.length
        if first > 0:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]
            self.valid = self.valid[:, first:]


def _left_pad(states: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, H, S, D]`` states left-padded with zeros to ``length`` slots."""
    return torch.nn.functional.pad(states, (0, 0, length - states.shape[2], 0))


def _left_pad_mask(valid: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, S]`` validity left-padded with False (holes) to ``length`` slots."""
    return torch.nn.functional.pad(valid, (length - valid.shape[1], 0), value=False)


def _gather(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``states[b, :, index[b, j]]`` for ``states`` ``[B, H, S, D]`` and ``index`` ``[B, K]`` → ``[B, H, K, D]``."""
    expanded = index.to(states.device)[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
    return torch.gather(states, 2, expanded)


MAX_BYTES = 512 * 2**20
"""KV bytes kept in all (least recently used dropped beyond): ~11,000 tokens of the default model in
float32, ~22,000 in bfloat16."""


class PrefixCache:
    """KV states of prompt prefixes (module docstring), each kept as a compact copy per layer, at most
    ``max_bytes`` in all (0 keeps nothing)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple, tuple[list, tuple, int]] = OrderedDict()  # tokens -> (states, learners, bytes)
        self._bytes = 0
        self.hits = 0  # prompts prefilled from a kept prefix
        self.reused = 0  # prompt tokens not run again

    def longest(self, tokens: Sequence[int], learners: Sequence[object]) -> tuple[int, list] | None:
        """The longest kept prefix of ``tokens`` fed to every one of ``learners`` (memory objects):
        ``(its length, its states)`` (per layer ``(keys, values)``, ``[1, kv_heads, length, head_dim]``,
        read-only), or None."""
        best = None
        for key, (states, fed, _) in self._entries.items():
            if (len(key) <= len(tokens) and (best is None or len(key) > len(best[0]))
                    and all(any(m is learner for m in fed) for learner in learners)
                    and tuple(tokens[: len(key)]) == key):
                best = (key, states)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        self.hits += 1
        self.reused += len(best[0])
        return len(best[0]), best[1]

    def add(self, tokens: Sequence[int], cache, learners: Sequence[object]) -> None:
        """Keep a compact copy of ``cache``'s states (it holds ``tokens``) and the memories fed all of
        it (a key kept already keeps its states and adds ``learners``)."""
        key = tuple(tokens)
        if not key:
            return
        if key in self._entries:  # the same states: keep the entry, with every memory fed it
            states, fed, size = self._entries[key]
            self._entries[key] = (states, fed + tuple(m for m in learners if not any(m is f for f in fed)), size)
            self._entries.move_to_end(key)
            return
        states = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers
                  if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4]
        size = sum(k.nbytes + v.nbytes for k, v in states)
        if size > self.max_bytes:
            return
        self._entries[key] = (states, tuple(learners), size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def __len__(self) -> int:
        return len(self._entries)


def copied_cache(model, states: list):
    """A fresh cache (:func:`new_cache`) holding a copy of kept ``states``, to append to."""
    fresh = new_cache(model)
    for index, (keys, values) in enumerate(states):
        fresh.update(keys, values, index)
    return fresh
