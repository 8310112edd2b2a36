"""Continuous batching: rows wait for a slot and take a finished row's place; every row stays
lossless against plain decoding of that row alone (greedy: token for token; sampling: its exact law)."""

import pytest
import torch

from stand_runtime import Method, RowSpec, SamplingParams, SizingSession, StandError, decode_rows, generate
from stand_runtime.engine import loop as engine_loop
from stand_runtime.target.latency import LatencyProfile
from stand_runtime.target.kv_cache import BatchedCache
from stand_runtime.target.model_facts import vocab_size

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
        monkeypatch.setattr("stand_runtime.engine.row.default_session", lambda model: steady)
    return Method.parse(method, tree, model, batch=batch)


def _plain(model, spec: RowSpec) -> list[int]:
    return generate(model, None, spec.prompt, sampling=GREEDY, method="ar", max_new_tokens=spec.max_new_tokens,
                    eos_token_ids=[]).tokens




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
    from stand_runtime.target.kv_cache import PrefixCache, copied_cache

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
    from stand_runtime.target.kv_cache import PrefixCache

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
    from stand_runtime.target.kv_cache import PrefixCache

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
