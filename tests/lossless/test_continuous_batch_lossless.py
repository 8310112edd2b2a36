"""Lossless with continuous batching (slots refilled): rows decode as plain decoding and sample the exact law."""

from __future__ import annotations

import pytest

from stand_runtime import Method, RowSpec, SamplingParams, decode_rows
from stand_runtime.target.model_facts import vocab_size
from test_batch import PROMPTS
from test_engine import chi_square_against, exact_continuations
from test_continuous_batch import GREEDY, LONG_PROMPT, _parse, _plain, _widths


@pytest.mark.parametrize("method,tree", [("stand", "dynamic-auto"), ("stand", "heuristic-80"), ("pld", None),
                                         ("ar", None)])
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_waiting_rows_take_finished_rows_places_and_decode_as_plain(tiny_qwen2, monkeypatch, method, tree, slots):
    """Ragged budgets so rows finish at different steps; a one-token prompt, prompts sharing a store,
    and a prompt longer than every running row admitted last: greedy rows equal plain decoding, no
    forward runs more than ``slots`` rows, and the batch stays full while rows wait."""
    widths = _widths(monkeypatch)
    parsed = _parse(tiny_qwen2, method, tree, slots, monkeypatch)
    store = parsed.new_memory(vocab_size(tiny_qwen2))  # shared by every row (None for ar and pld)
    prompts = PROMPTS + [PROMPTS[0], LONG_PROMPT]
    budgets = (5, 30, 9, 1, 17, 12)
    rows = [RowSpec(list(p), GREEDY, None, budget, store, (), [])
            for p, budget in zip(prompts, budgets)]
    order = []
    results = decode_rows(tiny_qwen2, None, rows, method=parsed,
                          slots=slots, on_finish=lambda index, result: order.append(index))
    assert sorted(order) == list(range(len(rows)))
    for spec, result in zip(rows, results):
        assert result.tokens == _plain(tiny_qwen2, spec) and result.finish_reason == "length"
    accepted = sum(r.stats.new_tokens - r.stats.target_forwards for r in results)
    assert method == "ar" or accepted >= 15, f"{method}: drafts were rarely accepted ({accepted})"
    assert widths[0] == max(widths) == slots
    shrunk = next(i for i, width in enumerate(widths + [0]) if width < slots)
    assert widths[shrunk:] == sorted(widths[shrunk:], reverse=True)  # below full only once no row waits


@pytest.mark.parametrize("method,tree", [("ar", None), ("stand", "heuristic-80"), ("stand-det", "heuristic-80")])
def test_a_row_with_its_own_memory_decodes_the_same_tokens_in_any_slot_count(tiny_qwen2, method, tree):
    """A seeded sampled row whose drafter memory is its own draws the same uniforms whatever rows
    share its forwards, so its tokens do not depend on the slots (the batched rows' law is then the
    single row's, tests/runtime/engine/test_batch.py)."""
    params = [SamplingParams(0.8, 0.95), SamplingParams(1.0, 1.0), SamplingParams(0.6, 0.9, 5), GREEDY] * 2
    runs = []
    for slots in (None, 3, 1):
        model_method = Method.parse(method, tree, tiny_qwen2, batch=slots or len(params))
        rows = [RowSpec(list(PROMPTS[r % len(PROMPTS)]), params[r], 100 + r, 12 + 3 * r, None, (), [])
                for r in range(len(params))]  # memory None: each row its own
        runs.append([r.tokens for r in decode_rows(tiny_qwen2, None, rows, method=model_method, slots=slots)])
    assert runs[0] == runs[1] == runs[2]


def test_rows_sharing_a_store_sample_the_exact_law_with_slots(tiny_qwen2):
    """Six rows (3 prompts x 2 sharing a store online) through 2 slots with ragged budgets, seeded and
    unseeded rows: each prompt's 3-token continuations follow its exact p (chi-square, 600 runs)."""
    prompts = PROMPTS[:3]
    params = [SamplingParams(temperature=0.8, top_p=0.95), SamplingParams(temperature=1.0, top_p=1.0),
              SamplingParams(temperature=0.6, top_p=0.9)]
    runs = 600
    counts = [dict() for _ in prompts]
    accepted = 0
    method = Method.parse("stand", "heuristic-80", tiny_qwen2, batch=2)
    for call in range(runs):
        stores = [method.new_memory(vocab_size(tiny_qwen2)) for _ in prompts]
        rows = [RowSpec(list(prompts[r // 2]), params[r // 2], 10_000 * call + r if r % 2 == 0 else None, 3 + r % 2,
                        stores[r // 2], (), []) for r in range(6)]
        results = decode_rows(tiny_qwen2, None, rows, method=method, slots=2)
        for row, result in enumerate(results):
            key = tuple(result.tokens[:3])  # rows of 4 tokens too (ragged budgets): their first 3
            counts[row // 2][key] = counts[row // 2].get(key, 0) + 1
            accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= runs // 2, f"drafts were rarely accepted ({accepted} in {runs} runs)"
    for prompt, param, count in zip(prompts, params, counts):
        outcome = chi_square_against(count, exact_continuations(tiny_qwen2, prompt, param, 3), 2 * runs)
        assert outcome.pvalue > 1e-4, (prompt, param, outcome)
