"""Lossless with one node budget per batched forward: ragged and zero allocations keep greedy identity and the exact law."""

from __future__ import annotations

import copy

from stand_runtime import Method, NGramStore, RowSpec, SamplingParams, SizingSession, decode_rows, generate, generate_batch
from stand_runtime.engine.metrics import padding_waste
from test_allocation import PROMPTS, flat_profile


def test_batch_allocated_rows_equal_plain_decoding_greedy(tiny_qwen2, monkeypatch):
    """Greedy rows sized from one budget per forward (ragged sizes, rows with nothing to draft)
    emit plain decoding's tokens; the padding each row took is counted."""
    flat_profile(monkeypatch, 0.002)
    greedy = SamplingParams(temperature=0)
    plain = [generate(tiny_qwen2, None, p, method="ar", sampling=greedy, max_new_tokens=30, eos_token_ids=[]).tokens
             for p in PROMPTS]
    method, sizing = Method.parse("stand", "dynamic-auto-12", tiny_qwen2, batch=6), SizingSession.for_model(tiny_qwen2)
    rows = generate_batch(tiny_qwen2, None, PROMPTS, n=2, method=method, sampling=greedy, max_new_tokens=30,
                          eos_token_ids=[], sizing=sizing)
    assert [r.tokens for r in rows] == [plain[0], plain[0], plain[1], plain[1], plain[2], plain[2]]
    batches = sizing.last_rule.batches
    assert sizing.last_rule.batch_allocated
    assert any(len(set(sizes)) > 1 and max(sizes) > 0 for sizes in batches), batches
    assert sum(max(sizes) > 0 for sizes in batches) >= 3, batches
    assert sum(sum(r.stats.drafted_per_step) for r in rows) > 0
    assert sum(sum(r.stats.accepted_per_step) for r in rows) > 0  # drafts were accepted
    assert 0.0 < padding_waste(r.stats for r in rows) < 1.0
    assert all(r.stats.forwarded_tokens >= r.stats.target_forwards for r in rows)


def test_a_batch_allocated_sampled_row_keeps_the_exact_law(tiny_qwen2, monkeypatch):
    """Deterministic value-sized drafts in a batch of 4 rows (2 prompts, 2 rows each sharing a
    store online, warmed by earlier runs; budgets 3, 2, 3, 1, so rows leave or have nothing to draft
    while others draft: ragged allocations): row 0 samples, the others decode greedily, so its
    verification draws are the batch's only randomness; enumerating them (conftest.draw_law) gives
    its exact 3-token law, which must be the target's."""
    from conftest import draw_law
    from test_engine import exact_continuations

    flat_profile(monkeypatch, 0.01)
    params, greedy = SamplingParams(temperature=0.8, top_p=0.95), SamplingParams(temperature=0)
    prompts = PROMPTS[:2]
    warm = [NGramStore(max_n=8) for _ in prompts]
    generate_batch(tiny_qwen2, None, prompts, n=2, method=Method.parse("stand-det", "dynamic-auto-6", tiny_qwen2, batch=4),
                   sampling=params, max_new_tokens=8, seed=1, store=warm, eos_token_ids=[])
    allocations = []

    def run():
        method = Method.parse("stand-det", "dynamic-auto-6", tiny_qwen2, batch=4, verification="rejection")
        stores = copy.deepcopy(warm)
        rows = [RowSpec(prompts[0], params, 7, 3, stores[0], (), ()), RowSpec(prompts[0], greedy, 7, 2, stores[0], (), ()),
                RowSpec(prompts[1], greedy, 7, 3, stores[1], (), ()), RowSpec(prompts[1], greedy, 7, 1, stores[1], (), ())]
        sizing = SizingSession.for_model(tiny_qwen2)
        results = decode_rows(tiny_qwen2, None, rows, method=method, sizing=sizing)
        allocations.extend(sizing.last_rule.batches)
        return tuple(results[0].tokens), results[0].stats.new_tokens - results[0].stats.target_forwards

    law = draw_law(run)
    tokens: dict = {}
    for (key, _), prob in law.items():
        tokens[key] = tokens.get(key, 0.0) + prob
    exact = exact_continuations(tiny_qwen2, prompts[0], params, 3)
    assert set(tokens) == set(exact)
    assert max(abs(tokens[key] - exact[key]) for key in exact) < 1e-5
    assert sum(prob * accepted for (_, accepted), prob in law.items()) >= 0.25, "drafts were rarely accepted"
    assert any(len(set(sizes)) > 1 and max(sizes) > 0 for sizes in allocations), allocations
