"""The KV caches (stand_runtime/target/kv_cache.py). The layer that grows in place: every sequence of
appends, crops, in-place compactions and outside replacements leaves it holding exactly what
transformers' DynamicLayer holds, appends write into spare slots without reallocating, and a
model's cached decoding gives the same logits as on the stock cache. The batched cache's per-row
compaction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from stand_runtime.target.kv_cache import BatchedCache, GrowingLayer, grow_in_place, keep_tree_entries
from stand_runtime.target.forward import with_cache


def _states(generator, n, batch=2):
    return torch.randn(batch, 3, n, 4, generator=generator), torch.randn(batch, 3, n, 4, generator=generator)


def test_growing_layer_matches_dynamic_layer_through_every_change():
    generator = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    stock, grown = DynamicLayer(), GrowingLayer()
    for step in range(200):
        action = rng.integers(0, 10)
        length = stock.get_seq_length()
        if action < 6 or length == 0:
            keys, values = _states(generator, int(rng.integers(1, 9)))
            expected, got = stock.update(keys, values), grown.update(keys, values)
            assert all(torch.equal(a, b) for a, b in zip(expected, got))
        elif action < 8:
            cut = int(rng.integers(1, length + 1))
            stock.crop(-cut)
            grown.crop(-cut)
        elif action < 9:  # tree-step compaction: entries moved to the front of the block in place
            for layer in (stock, grown):
                for states in (layer.keys, layer.values):
                    states[:, :, :1] = states[:, :, length - 1: length].clone()
        else:  # a method that puts a new tensor there (batch selection)
            for layer in (stock, grown):
                layer.batch_select_indices(torch.tensor([1, 0]))
        assert stock.get_seq_length() == grown.get_seq_length()
        assert torch.equal(stock.keys, grown.keys) and torch.equal(stock.values, grown.values), step


def test_appends_write_into_spare_slots():
    generator = torch.Generator().manual_seed(1)
    layer = GrowingLayer()
    layer.update(*_states(generator, 10))
    buffer = layer.keys.data_ptr()
    for _ in range(20):
        layer.update(*_states(generator, 3))
        layer.crop(-1)
    assert layer.keys.data_ptr() == buffer and layer.get_seq_length() == 10 + 20 * 2


def test_appends_outside_inference_mode_after_appends_inside_it():
    """A buffer made under torch.inference_mode cannot be written outside it: the layer then copies
    into a new buffer instead of failing, and holds what DynamicLayer holds."""
    generator = torch.Generator().manual_seed(3)
    stock, grown = DynamicLayer(), GrowingLayer()
    first, second = _states(generator, 5), _states(generator, 2)
    with torch.inference_mode():
        for layer in (stock, grown):
            layer.update(*first)
    for layer in (stock, grown):
        layer.update(*second)
    assert torch.equal(stock.keys, grown.keys) and torch.equal(stock.values, grown.values)


def test_a_lower_precision_append_keeps_the_promoted_dtype():
    generator = torch.Generator().manual_seed(4)
    stock, grown = DynamicLayer(), GrowingLayer()
    first, second = _states(generator, 4), [s.to(torch.bfloat16) for s in _states(generator, 2)]
    for layer in (stock, grown):
        layer.update(*first)
        layer.update(*second)
    assert grown.keys.dtype == stock.keys.dtype == torch.float32
    assert torch.equal(stock.keys, grown.keys) and torch.equal(stock.values, grown.values)


def test_grow_in_place_converts_plain_layers_and_lazy_caches(tiny_qwen2):
    cache = grow_in_place(DynamicCache(config=tiny_qwen2.config))
    assert cache.layers and all(type(layer) is GrowingLayer for layer in cache.layers)
    lazy = grow_in_place(DynamicCache())
    lazy.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0)
    assert type(lazy.layers[0]) is GrowingLayer
    with pytest.raises(ValueError, match="empty"):
        grow_in_place(lazy)


def test_a_model_decodes_alike_on_both_caches(tiny_qwen2):
    """Prefill, one-token steps, and a tree block compacted to two of its entries: same logits."""
    generator = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, tiny_qwen2.config.vocab_size, (1, 40), generator=generator)
    logits = []
    for grown in (False, True):
        cache = DynamicCache(config=tiny_qwen2.config)
        if grown:
            grow_in_place(cache)
        out = []
        with torch.inference_mode():
            tiny_qwen2(input_ids=prefix, **with_cache(tiny_qwen2, cache), use_cache=True)
            block = torch.tensor([[7, 8, 9, 10]])
            tiny_qwen2(input_ids=block, **with_cache(tiny_qwen2, cache), use_cache=True, position_ids=torch.tensor([[40, 41, 41, 42]]))
            keep_tree_entries(cache, 40, [0, 2], 4)
            ids = torch.tensor([[11]])
            for step in range(12):
                result = tiny_qwen2(input_ids=ids, **with_cache(tiny_qwen2, cache), use_cache=True, position_ids=torch.tensor([[42 + step]]))
                out.append(result.logits[0, -1])
                ids = result.logits[:, -1:].argmax(-1)
        logits.append(torch.stack(out))
    assert torch.equal(logits[0], logits[1])


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
