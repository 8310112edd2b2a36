"""Continuous batching: rows wait for a slot and take a finished row's place; every row stays
lossless against plain decoding of that row alone (greedy: token for token; sampling: its exact law)."""

import pytest
import torch

from stand_runtime import Method, RowSpec, SamplingParams, SizingSession, StandError, decode_rows, generate
from stand_runtime.engine import loop as engine_loop
from stand_runtime.target.latency import LatencyProfile
from stand_runtime.target.batch_kv import BatchedCache
from stand_runtime.target.model_facts import vocab_size
from test_batch import PROMPTS
from test_engine import chi_square_against, exact_continuations

LONG_PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9] * 2
"""Longer than every row running when it is admitted: the running rows are left-padded to it."""

GREEDY = SamplingParams(temperature=0)
STEADY = LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), tuple(0.01 * (1 + 0.002 * n) for n in (1, 2, 4, 8, 16, 32, 64, 128)))


def _widths(monkeypatch) -> list[int]:
    """Rows in each batch forward (recorded by wrapping ``BatchCache.forward``)."""
    widths = []
    forward = engine_loop.BatchCache.forward

    def counting(self, model, rows, drafts):
        widths.append(len(rows))
        return forward(self, model, rows, drafts)

    monkeypatch.setattr(engine_loop.BatchCache, "forward", counting)
    return widths


def _parse(model, method: str, tree, batch: int, monkeypatch) -> Method:
    """The method, a value-sized tree sized by a fixed, nearly flat profile that no step time corrects:
    its sizes, and the acceptance these tests count to show the drafts were used, do not depend on
    how loaded the machine is (the greedy identity holds whatever the sizes)."""
    if tree == "dynamic-auto":
        steady = SizingSession(STEADY, measured_here=False)
        monkeypatch.setattr("stand_runtime.engine.rows.default_session", lambda model: steady)
    return Method.parse(method, tree, model, batch=batch)


def _plain(model, spec: RowSpec) -> list[int]:
    return generate(model, None, spec.prompt, sampling=GREEDY, method="ar", max_new_tokens=spec.max_new_tokens,
                    eos_token_ids=[]).tokens


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
    single row's, tests/test_batch.py)."""
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


def test_extend_left_pads_both_caches_to_the_longer():
    """Rows added to a running cache: each side's entries stay right-aligned behind holes."""
    def cache(lengths, fill):
        layer = type("Layer", (), {})()
        longest = max(lengths)
        layer.keys = torch.full((len(lengths), 1, longest, 2), float(fill))
        layer.values = layer.keys + 0.5
        valid = torch.zeros(len(lengths), longest, dtype=torch.bool)
        for b, n in enumerate(lengths):
            valid[b, longest - n:] = True
        return BatchedCache(type("Cache", (), {"layers": [layer]})(), valid)

    running, added = cache([3, 2], 1.0), cache([5], 2.0)
    running.extend(added)
    assert running.valid.tolist() == [[False, False, True, True, True], [False, False, False, True, True],
                                      [True] * 5]
    keys = running.cache.layers[0].keys
    assert keys.shape == (3, 1, 5, 2) and keys[:2, :, :2].eq(0).all() and keys[:2, :, 2:].eq(1).all()
    assert keys[2].eq(2).all() and running.cache.layers[0].values[2].eq(2.5).all()
    running.extend(cache([1], 3.0))  # a shorter one: padded to the running length
    assert running.valid[3].tolist() == [False] * 4 + [True] and running.cache.layers[0].keys[3, :, 4].eq(3).all()


def test_bad_slots_are_one_line(tiny_qwen2):
    rows = [RowSpec([1, 2, 3], GREEDY, None, 4, None, (), [])]
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(StandError, match="slots"):
            decode_rows(tiny_qwen2, None, rows, method="ar", slots=bad)


def test_a_kept_prefix_gives_the_prefill_a_full_prefill_gives(tiny_qwen2):
    """A prompt that extends a kept one is prefilled from a copy of it: the same KV entries (up to
    float rounding), and the kept entry is not changed by the extension."""
    from stand_runtime.target.forward import prefill
    from stand_runtime.target.kv_cache import new_cache
    from stand_runtime.target.prefix_cache import PrefixCache, copied_cache

    prompt = LONG_PROMPT[:40]
    full, kept = new_cache(tiny_qwen2), new_cache(tiny_qwen2)
    prefill(tiny_qwen2, full, prompt)
    prefill(tiny_qwen2, kept, prompt[:25])
    prefixes = PrefixCache()
    prefixes.add(prompt[:25], kept, [])
    length, found = prefixes.longest(prompt, [])
    before = found[0][0].clone()
    extended = copied_cache(tiny_qwen2, found)
    prefill(tiny_qwen2, extended, prompt[length:], offset=length)
    for mine, theirs in zip(extended.layers, full.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-5) and torch.allclose(mine.values, theirs.values, atol=1e-5)
    assert torch.equal(found[0][0], before) and prefixes.hits == 1 and prefixes.reused == 25


def test_prefixes_are_kept_per_memory_fed_and_dropped_least_recently_used():
    from stand_runtime.target.prefix_cache import PrefixCache

    store, other = object(), object()
    def cache(tokens, fill):  # one layer of 1 x 1 x tokens x 2 float32: 16 bytes a token
        layer = type("Layer", (), {"keys": torch.full((1, 1, tokens, 2), float(fill)), "values": torch.zeros(1, 1, tokens, 2)})
        return type("Cache", (), {"layers": [layer]})()

    def kept(found):
        return None if found is None else (found[0], found[1][0][0][0, 0, 0, 0].item())

    prefixes = PrefixCache(max_bytes=16 * 10)
    prefixes.add([1, 2, 3], cache(3, 1), [store])
    prefixes.add([1, 2, 3, 4, 5], cache(5, 2), [])
    assert kept(prefixes.longest([1, 2, 3, 4, 5, 6], [store])) == (3, 1)  # the longer one was not fed to store
    assert kept(prefixes.longest([1, 2, 3, 4, 5, 6], [])) == (5, 2)
    assert prefixes.longest([1, 2, 3], [other]) is None and prefixes.longest([2, 3], []) is None
    prefixes.add([1, 2, 3], cache(3, 9), [other])  # the same states: the entry keeps them, both memories fed
    assert kept(prefixes.longest([1, 2, 3, 9], [store, other])) == (3, 1)
    prefixes.add([7, 8, 9], cache(3, 3), [])  # 11 tokens' bytes: the least recently used goes
    assert len(prefixes) == 2 and kept(prefixes.longest([1, 2, 3, 4, 5], [])) == (3, 1)


@pytest.mark.parametrize("method,tree", [("stand", "dynamic-auto"), ("ar", None), ("pld", None)])
def test_a_search_round_prefills_only_what_extends_the_round_before(tiny_qwen2, monkeypatch, method, tree):
    """Round 2's prompts extend round 1's (a DVTS round): they are prefilled from round 1's kept
    prompt, greedy rows still decode as plain decoding, and a row whose memory was not fed the
    prompt (its own, memory None) is prefilled in full."""
    from stand_runtime.target.prefix_cache import PrefixCache

    parsed = _parse(tiny_qwen2, method, tree, 2, monkeypatch)
    shared = parsed.new_memory(vocab_size(tiny_qwen2))
    prefixes = PrefixCache()
    first = [RowSpec(list(LONG_PROMPT), GREEDY, None, 6, shared, (), [])] * 2
    out = decode_rows(tiny_qwen2, None, first, method=parsed, slots=2, prefixes=prefixes)
    second = [RowSpec(list(LONG_PROMPT) + out[0].tokens, GREEDY, None, 9, shared, (), []),
              RowSpec(list(LONG_PROMPT) + out[0].tokens[:3], GREEDY, None, 9, shared, (), [])]
    results = decode_rows(tiny_qwen2, None, second, method=parsed, slots=2, prefixes=prefixes)
    for spec, result in zip(second, results):
        assert result.tokens == _plain(tiny_qwen2, spec)
    accepted = sum(r.stats.new_tokens - r.stats.target_forwards for r in results)
    assert method == "ar" or accepted >= 4, f"{method}: drafts were rarely accepted ({accepted})"
    assert prefixes.hits == 2 and prefixes.reused == 2 * (len(LONG_PROMPT) - 1)
    own = [RowSpec(list(LONG_PROMPT) + out[0].tokens, GREEDY, None, 4, None, (), [])]
    decode_rows(tiny_qwen2, None, own, method=parsed, prefixes=prefixes)
    assert prefixes.hits == (2 if method == "stand" else 3)  # STAND's own memory learned nothing yet
