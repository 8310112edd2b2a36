"""The batched KV cache's per-row compaction (stand_runtime.target.batch_kv)."""

import torch
from transformers import DynamicCache

from stand_runtime.target.batch_kv import BatchedCache
from stand_runtime.target.growing_cache import grow_in_place


def _cache(batch: int, block_start: int, block_len: int, layers: int = 2, seed: int = 0) -> BatchedCache:
    """A cache of ``block_start`` valid slots per row plus a step's block of ``block_len`` appended."""
    length = block_start + block_len
    generator = torch.Generator().manual_seed(seed)
    cache = grow_in_place(DynamicCache())
    for layer in range(layers):
        cache.update(torch.randn(batch, 2, length, 4, generator=generator),
                     torch.randn(batch, 2, length, 4, generator=generator), layer)
    return BatchedCache(cache, torch.ones(batch, block_start, dtype=torch.bool))


def test_keep_moves_each_rows_entries_to_the_blocks_front_and_leaves_rows_in_place_untouched():
    block_start, block_len = 5, 6
    keeps = [[0, 1, 2], [0, 2, 5], [0], [], [0, 1, 3, 4]]  # in place, moved, root only, finished, moved late
    cache = _cache(len(keeps), block_start, block_len)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.cache.layers]
    cache.keep(block_start, keeps, block_len)
    kept = max(len(k) for k in keeps)
    assert cache.length == block_start + kept
    for (keys, values), layer in zip(before, cache.cache.layers):
        assert layer.keys.shape[2] == block_start + kept
        for b, offsets in enumerate(keeps):
            rows = [*range(block_start), *(block_start + o for o in offsets)]
            assert torch.equal(layer.keys[b, :, : len(rows)], keys[b, :, rows])
            assert torch.equal(layer.values[b, :, : len(rows)], values[b, :, rows])
    assert cache.valid[:, block_start:].tolist() == [[j < len(k) for j in range(kept)] for k in keeps]


def test_keep_of_rows_all_in_place_copies_nothing_and_only_crops():
    cache = _cache(3, 4, 4)
    pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.cache.layers]
    before = [layer.keys[:, :, :6].clone() for layer in cache.cache.layers]
    cache.keep(4, [[0, 1], [0], [0, 1]], 4)
    assert cache.length == 6 and cache.valid[:, 4:].tolist() == [[True, True], [True, False], [True, True]]
    for layer, pointer, keys in zip(cache.cache.layers, pointers, before):
        assert (layer.keys.data_ptr(), layer.values.data_ptr()) == pointer
        assert torch.equal(layer.keys, keys)
