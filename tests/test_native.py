"""The native drafting core (stand_runtime._native) against the Python reference: the same store after
long random update sequences, the same lookups and blends, the same dynamic-tree drafts (stochastic
and deterministic, with and without a copy chain) and the same greedy trace replay.

Inputs are random but seeded; ties in probabilities are frequent on purpose (values from a small
set), so the sort orders and heap tie-breaks are exercised, not only the arithmetic.
"""

import numpy as np
import pytest

from stand_runtime import DynamicTree, Method, NGramStore, SamplingParams, StandError, replay_trace
from stand_runtime.drafters import best_first_draft, new_memory
from stand_runtime.randomness import RandomStream
from stand_runtime.store.native_store import NATIVE_ENV, NativeNGramStore, native_available, store_class

pytestmark = pytest.mark.skipif(not native_available(), reason="stand_runtime._native is not built (pip install -e .)")

VALUES = np.array([0.05, 0.1, 0.1, 0.2, 0.25, 0.3, 0.5, 1.0, 0.0])


def random_sequence(rng, length: int, vocab: int = 24) -> list[int]:
    """A sequence that repeats itself (a random walk over a few successors per token)."""
    successors = {t: rng.choice(vocab, size=3) for t in range(vocab)}
    sequence = [int(rng.integers(vocab))]
    for _ in range(length - 1):
        sequence.append(int(rng.choice(successors[sequence[-1]])) if rng.random() < 0.85 else int(rng.integers(vocab)))
    return sequence


def random_rows(rng, rows: int, width: int, vocab: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """``[rows, width]`` distinct ids per row and probabilities from :data:`VALUES` (ties, zeros,
    unsorted rows; zero-probability columns may repeat ids, as padded feeds do)."""
    ids = np.stack([rng.choice(vocab, size=width, replace=False) for _ in range(rows)]).astype(np.int64)
    probs = rng.choice(VALUES, size=(rows, width)) * rng.choice([1.0, 0.5, 0.3], size=(rows, 1))
    if rng.random() < 0.5:
        probs = -np.sort(-probs, axis=1)
    ids[probs == 0] = 0  # padding: a repeated id 0 at probability 0
    return ids, probs


def feed_both(rng, stores, steps: int) -> None:
    """Drive every store with the same updates: single updates and update_sequence calls."""
    sequence = random_sequence(rng, 400)
    for _ in range(steps):
        if rng.random() < 0.3:
            end = int(rng.integers(1, len(sequence)))
            context = sequence[max(0, end - int(rng.integers(1, 12))) : end]
            ids, probs = random_rows(rng, 1, int(rng.integers(1, 15)))
            row = (ids[0].tolist(), probs[0].tolist()) if rng.random() < 0.5 else (ids[0], probs[0])
            for store in stores:
                store.update(context, *row)
        else:
            start = int(rng.integers(0, len(sequence) - 20))
            positions = list(range(start, start + int(rng.integers(1, 12))))
            ids, probs = random_rows(rng, len(positions), int(rng.integers(1, 15)))
            for store in stores:
                store.update_sequence(sequence, positions, ids, probs)


def assert_same_store(reference: NGramStore, native: NativeNGramStore) -> None:
    for n in range(reference.max_n, 0, -1):
        expected = list(reference._tables[n].items())
        got = native.table(n)
        assert [key for key, _ in expected] == [row[0] for row in got], f"table {n}: contexts or their order differ"
        for (key, entry), (_, ids, probs, count, reserve) in zip(expected, got):
            assert entry.id_list == ids and entry.count == count, key
            np.testing.assert_allclose(probs, entry.prob_list, rtol=0, atol=1e-6)
            assert probs == entry.prob_list, f"{key}: not bit-identical"
            assert list(entry.reserve[0]) == list(reserve[0]) and list(entry.reserve[1]) == list(reserve[1]), key
    a, b = reference.stats(), native.stats()
    assert a.dropped_mass == pytest.approx(b.dropped_mass, abs=1e-9)
    assert {**vars(a), "dropped_mass": 0} == {**vars(b), "dropped_mass": 0}
    assert reference.max_token_id == native.max_token_id and len(reference) == len(native)
    assert reference.contexts() == native.contexts()


@pytest.mark.parametrize("top_k, max_n, max_entries, reserve", [(10, 3, 500_000, 10), (4, 8, 60, 3), (10, 8, 25, 0),
                                                                  (2, 1, 5, 1)])
def test_long_random_updates_leave_identical_stores(top_k, max_n, max_entries, reserve):
    rng = np.random.default_rng(top_k * 100 + max_n)
    stores = [cls(top_k=top_k, max_n=max_n, max_entries_per_n=max_entries, reserve=reserve)
              for cls in (NGramStore, NativeNGramStore)]
    for _ in range(3):
        feed_both(rng, stores, 300)
        assert_same_store(*stores)
    if max_entries < 100:
        assert stores[0].stats().evictions > 0  # the eviction order was exercised


def test_lookups_and_blends_are_identical():
    rng = np.random.default_rng(7)
    reference, native = NGramStore(max_n=8, reserve=4), NativeNGramStore(max_n=8, reserve=4)
    assert reference.blend([1, 2]) is None and native.blend([1, 2]) is None  # empty store
    feed_both(rng, (reference, native), 400)
    sequence = random_sequence(rng, 200)
    for i in range(300):
        context = sequence[max(0, i % 190 - int(rng.integers(0, 10))) : i % 190 + 1] + ([99] if i % 17 == 0 else [])
        for method in ("lookup", "match"):
            a, b = getattr(reference, method)(context), getattr(native, method)(context)
            assert (a is None) == (b is None)
            if a is not None:
                ea, eb = (a[1], b[1]) if method == "match" else (a, b)
                assert (method == "lookup" or a[0] == b[0]) and ea.id_list == eb.id_list and ea.prob_list == eb.prob_list
                assert ea.count == eb.count and np.array_equal(ea.q, eb.q)
        beta, width = [(1.0, 16), (0.0, 16), (0.3, 5), (3, 16)][i % 4]
        a, b = reference.blend(context, beta, width), native.blend(context, beta, width)
        assert a.id_list == b.id_list and a.count == b.count
        np.testing.assert_allclose(a.prob_list, b.prob_list, rtol=0, atol=1e-6)
        assert a.prob_list == b.prob_list
    assert reference.stats() == native.stats()


def test_bad_observations_raise_the_same_errors_and_leave_the_same_store():
    bad = [([1, 2], [0.5]), ([1, 1], [0.5, 0.2]), ([-1], [0.5]), ([1], [1.5]), ([1], [float("nan")]), ([True], [0.5]),
           ([1.5], [0.5])]
    for ids, probs in bad:
        messages = []
        for store in (NGramStore(), NativeNGramStore()):
            with pytest.raises(StandError) as error:
                store.update([3, 4], ids, probs)
            messages.append(str(error.value))
        assert messages[0] == messages[1]
    stores = (NGramStore(max_n=2), NativeNGramStore(max_n=2))
    for bad_ids, bad_probs in (([3, 3], [0.4, 0.3]), ([3, -4], [0.4, 0.3]), ([3, 4], [0.4, np.nan]),
                               ([3, 4], [1.5, 0.1])):
        ids = np.array([[1, 2], bad_ids, [5, 6]])
        probs = np.array([[0.5, 0.2], bad_probs, [0.6, 0.1]])
        messages = []
        for store in stores:
            with pytest.raises(StandError) as error:
                store.update_sequence([7, 8, 9, 10], [0, 1, 2], ids, probs)
            messages.append(str(error.value))
        assert messages[0] == messages[1]
        assert_same_store(*stores)  # the row before the bad one was merged, the one after was not
    ids32, probs32 = np.array([[1, 2]], dtype=np.int32), np.array([[0.7, 0.2]], dtype=np.float32)
    for store in stores:
        store.update_sequence([7, 8, 9, 10], [3], ids32, probs32)
        store.update_sequence((7, 8, 9, 10), [1, 2], [[1, 2], [3, 4]], [[0.5, 0.5], [0.9, 0.1]])  # lists: Python checks
    assert_same_store(*stores)


def assert_same_draft(a, b) -> None:
    assert a.tokens == b.tokens and a.slots == b.slots and a.children == b.children
    assert np.array_equal(a.parents, b.parents) and np.array_equal(a.depths, b.depths)
    assert a.copied == b.copied and a.stochastic == b.stochastic and b.nodes is None
    for ids_a, ids_b, q_a, q_b in zip(a.draft_ids, b.draft_ids, a.draft_probs, b.draft_probs):
        assert (ids_a is None) == (ids_b is None)
        if ids_a is not None:
            assert np.array_equal(ids_a, ids_b) and ids_b.dtype == np.int64
            np.testing.assert_allclose(q_b, q_a, rtol=0, atol=1e-6)


@pytest.mark.parametrize("stochastic", [False, True])
def test_dynamic_tree_drafts_are_identical(stochastic):
    rng = np.random.default_rng(11 + stochastic)
    reference, native = NGramStore(max_n=8), NativeNGramStore(max_n=8)
    feed_both(rng, (reference, native), 500)
    sequence = random_sequence(rng, 300)
    streams = [RandomStream.seeded(5, block=97) for _ in range(2)]  # small blocks: refills mid-draft
    for i in range(120):
        end = int(rng.integers(1, len(sequence)))
        context = sequence[max(0, end - 20) : end]
        tree = DynamicTree(int(rng.choice([1, 5, 20, 80, 200])), confidence=[1.0, 0.0, 2.0][i % 3],
                           beta=[1.0, 0.5][i % 2])
        chain = sequence[end : end + int(rng.integers(0, 12))] if i % 2 else None
        if chain and i % 4 == 1:
            chain = chain[:2] + [int(rng.integers(40, 60))] + chain[2:]  # leaves the drafted path
        max_depth = [None, 3, 1][i % 3]
        drafts = [best_first_draft(tree, store, context, stream if stochastic else None, max_depth, chain)
                  for store, stream in zip((reference, native), streams)]
        assert_same_draft(*drafts)
    assert streams[0].gumbel(7).tolist() == streams[1].gumbel(7).tolist()  # the same noise was consumed
    assert streams[0].uniform() == streams[1].uniform()
    assert reference.stats() == native.stats()  # the blends were counted alike


def test_an_empty_native_store_drafts_nothing():
    for randomness in (None, RandomStream.seeded(0)):
        assert best_first_draft(DynamicTree(5), NativeNGramStore(max_n=8), [0, 1], randomness).num_nodes == 0


@pytest.mark.parametrize("tree", ["dynamic-80", "stand-smollm2-humaneval-80"])
def test_greedy_trace_replay_is_identical(tree):
    rng = np.random.default_rng(3)
    method = Method.parse("stand", tree)
    greedy = SamplingParams(temperature=0.0)
    traces = [random_sequence(np.random.default_rng(s), 600, vocab=50) for s in range(3)]
    prompt = random_sequence(rng, 40, vocab=50)
    results = []
    for cls in (NGramStore, NativeNGramStore):
        store = cls(max_n=8 if tree.startswith("dynamic") else 3)
        runs = []
        for t, trace in enumerate(traces):
            drafter = method.drafter(store, RandomStream.seeded(t), greedy, 64)
            stats = replay_trace(drafter, prompt, trace).stats
            runs.append((stats.target_forwards, stats.tokens_per_step, stats.drafted_per_step, stats.accepted_per_step))
        results.append((runs, store.stats()))
    assert results[0] == results[1]
    assert sum(results[0][0][-1][3]) > 0  # drafts were accepted


def test_stand_native_selects_the_native_store(monkeypatch):
    monkeypatch.delenv(NATIVE_ENV, raising=False)
    assert store_class() is NGramStore and type(new_memory("stand", 100, "dynamic-80")) is NGramStore
    assert type(new_memory("stand", 100)) is NGramStore
    monkeypatch.setenv(NATIVE_ENV, "1")
    store = new_memory("stand", 100, "dynamic-80")
    assert type(store) is NativeNGramStore and store.max_n == 8 and isinstance(store, NGramStore)
    assert type(new_memory("stand", 100)) is NativeNGramStore  # a static tree is filled natively too
    assert type(new_memory("stand", 100, "dynamic-auto")) is NGramStore  # value-sized: the Python draft's scores
    assert type(Method.parse("stand-det", "dynamic-20").new_memory(100)) is NativeNGramStore
    assert new_memory("recycle", 100) is not None
    with pytest.raises(StandError, match="top_k"):
        NativeNGramStore(top_k=0)
