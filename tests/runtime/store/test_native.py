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
    assert (a.scores is None) == (b.scores is None)
    if a.scores is not None:  # the best-first scores, multiplied in the reference's order
        np.testing.assert_allclose(b.scores, a.scores, rtol=0, atol=1e-12)
        assert a.scores.tolist() == b.scores.tolist()


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
        rate = [0.8, 1.0, 0.95, 0.3][(i // 2) % 4]  # the chain first (1.0), mixed in, or last (0.3)
        drafts = [best_first_draft(tree, store, context, stream if stochastic else None, max_depth, chain, rate)
                  for store, stream in zip((reference, native), streams)]
        assert_same_draft(*drafts)
    assert streams[0].gumbel(7).tolist() == streams[1].gumbel(7).tolist()  # the same noise was consumed
    assert streams[0].uniform() == streams[1].uniform()
    assert reference.stats() == native.stats()  # the blends were counted alike


def test_one_id_supports_draw_their_noise_as_the_reference_does():
    """A one-hot feed (greedy targets) and beta 0 give blended supports of a single id, where the
    reference still draws a [1] Gumbel block: the native draft consumes the same noise, so the two
    streams stay in step (the next draws equal) and seeded runs repeat across the two stores."""
    rng = np.random.default_rng(3)
    sequence = random_sequence(rng, 600, vocab=30)
    ids = np.asarray(sequence[1:])[:, None]
    stores = (NGramStore(max_n=8), NativeNGramStore(max_n=8))
    for store in stores:
        store.update_sequence(sequence, list(range(len(sequence) - 1)), ids, np.ones_like(ids, dtype=np.float64))
    streams = [RandomStream.seeded(5, block=97) for _ in range(2)]
    for end in range(20, 600, 37):
        for beta in (0.0, 1.0):
            tree = DynamicTree(20, confidence=0.0, beta=beta)
            assert_same_draft(*[best_first_draft(tree, store, sequence[max(0, end - 20):end], stream)
                                for store, stream in zip(stores, streams)])
    assert streams[0].gumbel(7).tolist() == streams[1].gumbel(7).tolist()


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
    monkeypatch.setenv(NATIVE_ENV, "0")  # the Python reference
    assert store_class() is NGramStore and type(new_memory("stand", 100, "dynamic-80")) is NGramStore
    assert type(new_memory("stand", 100)) is NGramStore
    monkeypatch.delenv(NATIVE_ENV)  # the default: native where built (the tests skip where it is not)
    assert store_class() is NativeNGramStore and type(new_memory("stand", 100, "dynamic-auto")) is NativeNGramStore
    monkeypatch.setattr("stand_runtime.store.native_store._native", None)
    assert store_class() is NGramStore  # not built: the Python store, quietly
    monkeypatch.setenv(NATIVE_ENV, "1")
    with pytest.raises(StandError, match="not built"):
        store_class()
    monkeypatch.undo()
    monkeypatch.setenv(NATIVE_ENV, "yes")
    with pytest.raises(StandError, match="must be 0"):
        store_class()
    monkeypatch.setenv(NATIVE_ENV, "1")
    store = new_memory("stand", 100, "dynamic-80")
    assert type(store) is NativeNGramStore and store.max_n == 8 and isinstance(store, NGramStore)
    assert type(new_memory("stand", 100)) is NativeNGramStore  # a static tree is filled natively too
    assert type(new_memory("stand", 100, "dynamic-auto")) is NativeNGramStore  # value-sized: native scores
    assert type(Method.parse("stand-det", "dynamic-20").new_memory(100)) is NativeNGramStore
    assert new_memory("recycle", 100) is not None
    with pytest.raises(StandError, match="top_k"):
        NativeNGramStore(top_k=0)


def test_value_sized_replays_are_identical_on_the_native_store():
    """A value-sized dynamic tree sizes each step from the native draft's node scores: the replay,
    the rule's sizes and its learned acceptance are the Python store's."""
    from stand_runtime.sizing.latency_model import LatencyModel
    from stand_runtime.sizing.value import ValueRule

    method = Method.parse("stand", "dynamic-auto-40")
    greedy = SamplingParams(temperature=0.0)
    traces = [random_sequence(np.random.default_rng(s), 400, vocab=50) for s in range(2)]
    prompt = random_sequence(np.random.default_rng(9), 30, vocab=50)
    results = []
    for cls in (NGramStore, NativeNGramStore):
        store, rule = cls(max_n=8), ValueRule(LatencyModel(lambda tokens: 1.0 + 0.01 * tokens, (1, 2, 4, 8, 16, 32, 64)))
        runs = []
        for t, trace in enumerate(traces):
            drafter = method.drafter(store, RandomStream.seeded(t), greedy, 64, value=rule)
            stats = replay_trace(drafter, prompt, trace, value=rule).stats
            runs.append((stats.drafted_per_step, stats.accepted_per_step))
        results.append((runs, store.stats(), rule.sizes, rule.acceptance.table().tolist()))
    assert results[0] == results[1]
    assert len(set(results[0][2])) >= 3 and sum(results[0][0][-1][1]) > 0  # sizes varied; drafts were accepted
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv(NATIVE_ENV, "1")
    assert type(new_memory("stand", 100, "dynamic-auto-24")) is NativeNGramStore  # value-sized trees go native
    monkeypatch.undo()


def draft_requests(rng, stores, sequence, streams, i):
    """A batch's worth of rows: contexts, budgets, depths, chains and trees varying per row."""
    requests = []
    for r, (store, stream) in enumerate(zip(stores, streams)):
        end = int(rng.integers(1, len(sequence)))
        chain = sequence[end : end + int(rng.integers(0, 12))] if (i + r) % 2 else None
        tree = DynamicTree(int(rng.choice([1, 5, 20, 80])), confidence=[1.0, 0.0, 2.0][(i + r) % 3])
        requests.append((tree, store, sequence[max(0, end - 20) : end], stream, [None, 3, 1][r % 3], chain,
                         [0.8, 1.0, 0.3][(i + r) % 3]))
    return requests


@pytest.mark.parametrize("stochastic", [False, True])
def test_rows_drafted_in_one_call_equal_the_per_row_calls(stochastic):
    """native_best_first_rows over rows with their own or a shared store, contexts, budgets, chains
    and Gumbel pools (two rows on one stream too) == best_first_draft row by row."""
    from stand_runtime.store.native_draft import native_best_first_rows

    rng = np.random.default_rng(21 + stochastic)
    shared, own = NativeNGramStore(max_n=8), NativeNGramStore(max_n=8)
    twins = NativeNGramStore(max_n=8), NativeNGramStore(max_n=8)
    feed_both(rng, (shared, twins[0]), 300)
    feed_both(rng, (own, twins[1]), 300)
    sequence = random_sequence(rng, 300)
    sides = []
    for batched in (False, True):
        streams = [RandomStream.seeded(s, block=61) if stochastic else None for s in (1, 2, 3)]
        streams.append(streams[0])  # a fourth row on the first row's stream: drafted after it
        stores = (shared, own, shared, shared) if batched else (twins[0], twins[1], twins[0], twins[0])
        rows_rng = np.random.default_rng(5)
        drafts = []
        for i in range(40):
            requests = draft_requests(rows_rng, stores, sequence, streams, i)
            drafts += native_best_first_rows(requests) if batched else [best_first_draft(*r) for r in requests]
        sides.append((drafts, [s.gumbel(5).tolist() if s is not None else None for s in streams[:3]]))
    for a, b in zip(sides[0][0], sides[1][0]):
        assert_same_draft(a, b)
    assert sides[0][1] == sides[1][1]  # the same noise consumed per stream
    assert shared.stats() == twins[0].stats() and own.stats() == twins[1].stats()
    assert sum(d.num_nodes for d in sides[0][0]) > 200


def test_rows_fed_in_one_call_equal_the_per_row_calls():
    """update_sequences over rows of a shared and an own store (numeric rows, rows the Python checks
    take, a bad row) == update_sequence row by row: the same stores, statistics and error."""
    from stand_runtime.store.native_store import update_sequences

    rng = np.random.default_rng(4)
    sequence = random_sequence(rng, 300)
    pairs = [(NativeNGramStore(max_n=4, max_entries_per_n=80), NativeNGramStore(max_n=4, max_entries_per_n=80))
             for _ in range(2)]
    for step in range(60):
        rows = []
        for r in range(3):
            start = int(rng.integers(0, len(sequence) - 20))
            positions = list(range(start, start + int(rng.integers(1, 8))))
            ids, probs = random_rows(rng, len(positions), int(rng.integers(1, 12)))
            if step % 7 == 3 and r == 1:
                ids, probs = ids.tolist(), probs.tolist()  # not numeric: the Python checks
            rows.append((r % 2, sequence, positions, ids, probs))
        update_sequences([(pairs[k][1], *args) for k, *args in rows])
        for k, *args in rows:
            pairs[k][0].update_sequence(*args)
    bad = np.array([[1, 2], [3, 3], [5, 6]]), np.array([[0.5, 0.2], [0.4, 0.3], [0.6, 0.1]])
    rows = [(0, [7, 8, 9, 10], [0], *random_rows(rng, 1, 3)), (1, [7, 8, 9, 10], [0, 1, 2], *bad),
            (0, [7, 8, 9, 10], [1], *random_rows(rng, 1, 3))]
    messages = []
    for side, call in ((0, lambda: [pairs[k][0].update_sequence(*args) for k, *args in rows]),
                       (1, lambda: update_sequences([(pairs[k][1], *args) for k, *args in rows]))):
        with pytest.raises(StandError) as error:
            call()
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    for reference, batched in pairs:
        assert reference.stats() == batched.stats()
        for n in range(1, 5):
            assert reference.table(n) == batched.table(n)
    assert pairs[0][0].stats().evictions > 0




def test_batched_native_sampling_equals_the_per_row_path(tiny_qwen2, monkeypatch):
    """Sampled rows (seeded) take the same tokens whether the batch drafts and feeds its native rows
    in one call or row by row (the reference path)."""
    from stand_runtime import generate_batch
    import stand_runtime.engine.loop as loop

    monkeypatch.setenv(NATIVE_ENV, "1")
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4]
    params = SamplingParams(temperature=0.8, top_p=0.95)
    runs = []
    for batched in (True, False):
        if not batched:
            monkeypatch.setattr(loop, "propose_rows", lambda rows, cap: [row.propose(cap) for row in rows])
            monkeypatch.setattr(loop, "defer_feeds", lambda rows: None)
        rows = generate_batch(tiny_qwen2, None, prompts, n=3, method=Method.parse("stand", "dynamic-16", tiny_qwen2,
                              batch=6), sampling=params, max_new_tokens=40, seed=11, eos_token_ids=[])
        runs.append([(r.tokens, r.stats.drafted_per_step, r.stats.accepted_per_step, r.stats.store) for r in rows])
    assert runs[0] == runs[1]
    assert sum(sum(a) for _, _, a, _ in runs[0]) > 0


def test_the_suffix_index_grown_in_place_matches_fresh_sequences():
    """The copy chain's index trusts a list grown in place (the engine's committed tokens) and
    compares any other list: both give the continuations of an index rebuilt from scratch."""
    from stand_runtime.drafters.suffix_index import SuffixIndex

    rng = np.random.default_rng(2)
    sequence = random_sequence(rng, 500, vocab=12)
    grown, fresh, other = SuffixIndex(), SuffixIndex(), [0, 1]
    committed, found = sequence[:5], 0
    for end in range(5, 500, 3):
        committed += sequence[len(committed) : end]
        expected = SuffixIndex().continuation(sequence[:end], 10)
        assert grown.continuation(committed, 10) == expected == fresh.continuation(list(sequence[:end]), 10)
        found += bool(expected)
        if end % 60 == 5:  # another sequence in between starts that index over, then the first one again
            assert fresh.continuation(other, 10) == SuffixIndex().continuation(other, 10)
    assert found > 100  # continuations were found, not only empty ones


def test_a_cross_prompt_memory_feeds_and_blends_alike():
    """A store with a base (cross-prompt memory): every observation also feeds the base, the blend reads
    the base's blend below the store's own tables, and native == Python for the stores, the base, the
    blends and the dynamic-tree drafts over them; a fresh store over a fed base drafts from it."""
    rng = np.random.default_rng(31)
    bases = [cls(max_n=8, reserve=4) for cls in (NGramStore, NativeNGramStore)]
    first = [cls(max_n=8, reserve=4, base=base) for cls, base in zip((NGramStore, NativeNGramStore), bases)]
    feed_both(rng, first, 300)
    assert_same_store(*bases)
    assert_same_store(*first)
    assert len(bases[0]) == len(first[0])  # the base holds what the store was fed
    second = [cls(max_n=8, reserve=4, base=base) for cls, base in zip((NGramStore, NativeNGramStore), bases)]
    sequence = random_sequence(rng, 200)
    unrelated = NGramStore(max_n=8, reserve=4)
    assert unrelated.blend(sequence[:4]) is None  # an empty store has no q; over the memory, the memory answers
    assert all(store.blend(sequence[:4]).count == base.blend(sequence[:4]).count for store, base in zip(second, bases))
    feed_both(rng, second, 100)
    streams = [RandomStream.seeded(3, block=97) for _ in range(2)]
    for i in range(150):
        end = int(rng.integers(1, len(sequence)))
        context = sequence[max(0, end - 12) : end]
        beta, width = [(1.0, 16), (0.3, 5)][i % 2]
        a, b = second[0].blend(context, beta, width), second[1].blend(context, beta, width)
        assert a.id_list == b.id_list and a.prob_list == b.prob_list and a.count == b.count
        tree = DynamicTree(int(rng.choice([5, 40])), confidence=[1.0, 0.25][i % 2])
        drafts = [best_first_draft(tree, store, context, stream, None) for store, stream in zip(second, streams)]
        assert_same_draft(*drafts)
    assert second[0].stats() == second[1].stats() and bases[0].stats() == bases[1].stats()


def test_a_cross_prompt_memory_is_checked():
    base = NGramStore(max_n=8)
    for bad, message in ((NativeNGramStore(max_n=8), "cross-prompt memory \\(base\\) must be a NGramStore"),
                         ("x", "must be a NGramStore, not str"),
                         (NGramStore(max_n=8, base=base), "cannot have a base of its own"),
                         (NGramStore(max_n=3), "must keep the store's max_n and top_k \\(8, 10\\), not \\(3, 10\\)")):
        with pytest.raises(StandError, match=message):
            NGramStore(max_n=8, base=bad)
    with pytest.raises(StandError, match="must be a NativeNGramStore, not NGramStore"):
        NativeNGramStore(max_n=8, base=base)
