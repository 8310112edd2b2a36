"""KV-cache compaction after tree verification, on transformers' own cache classes.

A tree step appends the keys and values of root + all drafted nodes to the cache. After verification
only the root and the accepted nodes belong to the sequence. Their entries sit at non-contiguous
offsets of the appended block; :func:`keep_tree_entries` copies them to the front of the block and
crops the rest with ``Cache.crop`` (negative count), cheaper than an index_select into new tensors
or a deep copy (docs/algorithms.md §5.2; docs/decisions.md).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import Cache


def keep_tree_entries(cache: Cache, block_start: int, keep: Sequence[int], block_len: int) -> None:
    """Keep only the ``keep`` entries of the last tree block of every layer, in order.

    Args:
        cache: a transformers cache whose layers hold ``keys``/``values`` of shape
            ``[batch, kv_heads, seq, head_dim]`` (DynamicCache).
        block_start: sequence length before the tree step (the block's first offset).
        keep: increasing offsets inside the block to keep (root first: ``[0, accepted...]``).
        block_len: number of entries the tree step appended.

    After the call the cache holds ``block_start + len(keep)`` entries.
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
    place (:mod:`stand_runtime.target.growing_cache`).

    With ``full_window`` (speculative decoding), models with sliding-window layers get full-length
    layers (no trimming): compaction needs every entry in place, and the window is applied by the
    tree mask instead (:func:`stand_runtime.trees.tree.tree_attention_mask`). Without it (plain
    decoding, which never compacts) sliding-window layers stay as the model's config makes them.
    """
    from transformers import DynamicCache

    from .growing_cache import grow_in_place
    from .model_facts import attention_layout

    if full_window and attention_layout(model).window is not None:
        return grow_in_place(DynamicCache())
    return grow_in_place(DynamicCache(config=model.config))
