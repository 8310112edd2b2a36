"""Lossless over the native store: greedy generate and batched native rows equal plain decoding."""

from __future__ import annotations

import pytest

from stand_runtime import Method, SamplingParams
from stand_runtime.store.native_store import NATIVE_ENV
from test_native import assert_same_store
from test_native import pytestmark as native_required
from test_native_static import BUNDLED, run_generate
from test_native_static import pytestmark as native_static_required


@native_static_required
@pytest.mark.parametrize("method, tree", [("stand", BUNDLED), ("stand-det", "heuristic-80")])
def test_native_greedy_generate_equals_plain_decoding(tiny_qwen2, monkeypatch, method, tree):
    greedy = SamplingParams(temperature=0)
    plain, _, _ = run_generate(tiny_qwen2, monkeypatch, False, "ar", None, greedy)
    native, steps, native_store = run_generate(tiny_qwen2, monkeypatch, True, method, tree, greedy)
    python, python_steps, python_store = run_generate(tiny_qwen2, monkeypatch, False, method, tree, greedy)
    assert native.tokens == plain.tokens and steps == python_steps
    assert_same_store(python_store, native_store)
    assert native.acceptance_length > 1.0  # drafts were accepted


@native_required
@pytest.mark.parametrize("tree", ["dynamic-16", "dynamic-auto-12"])
def test_batched_native_rows_equal_plain_decoding(tiny_qwen2, monkeypatch, tree):
    """generate_batch under STAND_NATIVE=1 (rows drafted and fed in one call each) equals plain
    decoding row by row (greedy), on a fixed-budget and a value-sized dynamic tree."""
    from stand_runtime import generate, generate_batch
    from stand_runtime.target import latency

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, tuple(1 + 0.02 * s for s in sizes)))
    monkeypatch.setenv(NATIVE_ENV, "1")
    calls = {"draft": 0, "feed": 0}
    import stand_runtime.engine.loop as loop
    for name, key in (("best_first_rows", "draft"), ("update_sequences", "feed")):
        original = getattr(loop, name)
        monkeypatch.setattr(loop, name, lambda *a, _f=original, _k=key: (calls.__setitem__(_k, calls[_k] + 1), _f(*a))[1])
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4]
    greedy = SamplingParams(temperature=0)
    plain = [generate(tiny_qwen2, None, p, method="ar", sampling=greedy, max_new_tokens=30, eos_token_ids=[]).tokens
             for p in prompts]
    method = Method.parse("stand", tree, tiny_qwen2, batch=4)
    rows = generate_batch(tiny_qwen2, None, prompts, n=2, method=method, sampling=greedy, max_new_tokens=30,
                          eos_token_ids=[])
    assert [r.tokens for r in rows] == [plain[0], plain[0], plain[1], plain[1]]
    assert type(rows[0].stats.store) is dict and calls["draft"] > 0 and calls["feed"] > 0
    assert sum(r.stats.new_tokens - r.stats.target_forwards for r in rows) > 0  # drafts were accepted
