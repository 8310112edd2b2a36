"""The KV-cache layer that grows in place (stand_runtime/target/growing_cache.py): every sequence of
appends, crops, in-place compactions and outside replacements leaves it holding exactly what
transformers' DynamicLayer holds, appends write into spare slots without reallocating, and a
model's cached decoding gives the same logits as on the stock cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from stand_runtime.target.growing_cache import GrowingLayer, grow_in_place
from stand_runtime.target.kv_cache import keep_tree_entries
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
