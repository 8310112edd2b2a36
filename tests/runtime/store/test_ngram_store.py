"""The logit-based n-gram store (STAND §3.1): merge, truncation, longest-match lookup, bounds."""

import numpy as np
import pytest

from stand_runtime import NGramStore, StandError

A, B, C, D = 11, 22, 33, 44


def entry_dict(entry):
    return dict(zip(entry.id_list, entry.prob_list))


def test_worked_example_running_average_over_union():
    store = NGramStore()
    store.update([1, 2, 3], [A, B, C], [0.7, 0.2, 0.05])
    store.update([1, 2, 3], [A, B, D], [0.3, 0.6, 0.05])
    got = entry_dict(store.lookup([1, 2, 3]))
    assert got == pytest.approx({A: 0.5, B: 0.4, C: 0.025, D: 0.025})
    entry = store.lookup([1, 2, 3])
    assert entry.count == 2
    assert entry.id_list[:2] == [A, B]  # sorted by decreasing probability
    assert entry.q.sum() == pytest.approx(1.0)
    assert entry.q[0] == pytest.approx(0.5 / 0.95)


def test_count_weights_third_observation():
    store = NGramStore()
    for probs in ([1.0, 0.0], [1.0, 0.0], [0.0, 1.0]):
        store.update([5], [A, B], probs)
    assert entry_dict(store.lookup([5])) == pytest.approx({A: 2 / 3, B: 1 / 3})


def test_truncation_keeps_ten_largest_and_reports_dropped_mass():
    store = NGramStore(top_k=10)
    first_ids = list(range(100, 110))
    store.update([7], first_ids, [0.1] * 10)
    new_ids = list(range(200, 205))
    store.update([7], new_ids, [0.12, 0.11, 0.02, 0.01, 0.005])
    entry = store.lookup([7])
    assert len(entry.id_list) == 10
    merged = {i: 0.05 for i in first_ids}
    merged.update({200: 0.06, 201: 0.055, 202: 0.01, 203: 0.005, 204: 0.0025})
    expected = sorted(merged.items(), key=lambda kv: -kv[1])[:10]
    assert entry_dict(entry) == pytest.approx(dict(expected))
    dropped = sum(sorted(merged.values(), reverse=True)[10:])
    assert store.stats().dropped_mass == pytest.approx(dropped)
    # a fresh observation with more than k ids is truncated too
    store.update([8], list(range(300, 315)), np.linspace(0.15, 0.01, 15))
    assert store.lookup([8]).id_list == list(range(300, 310))


def test_lookup_longest_match_first_then_fallback_and_miss():
    store = NGramStore()
    store.update([1, 2, 3], [A], [1.0])  # keys (1,2,3), (2,3), (3,)
    store.update([9, 2, 3], [B], [1.0])  # keys (9,2,3), (2,3), (3,)
    store.update([4], [C], [1.0])
    assert store.lookup([1, 2, 3]).id_list == [A]  # the 3-token context wins
    assert store.lookup([9, 2, 3]).id_list == [B]
    assert set(store.lookup([0, 2, 3]).id_list) == {A, B}  # falls back to (2, 3)
    assert set(store.lookup([0, 0, 3]).id_list) == {A, B}  # falls back to (3,)
    assert store.lookup([0, 0, 4]).id_list == [C]
    assert store.lookup([5, 6, 7]) is None
    stats = store.stats()
    assert stats.hits_by_n == {3: 2, 2: 1, 1: 2}
    assert stats.misses == 1 and stats.lookups == 6
    assert stats.hit_rate == pytest.approx(5 / 6)
    assert stats.entries_by_n == {3: 2, 2: 1, 1: 2}


def test_short_context_uses_the_tables_it_can():
    store = NGramStore()
    store.update([3], [A], [1.0])
    assert store.stats().entries_by_n == {3: 0, 2: 0, 1: 1}
    assert store.lookup([3]).id_list == [A]


def test_update_sequence_keys_each_position_by_its_context():
    store = NGramStore(max_n=2)
    tokens = [5, 6, 7, 8]
    ids = np.array([[6], [7], [8]])
    store.update_sequence(tokens, [0, 1, 2], ids, np.ones((3, 1)))
    assert store.lookup([5, 6]).id_list == [7]
    assert store.lookup([6, 7]).id_list == [8]
    assert store.lookup([5]).id_list == [6]


def test_memory_bound_evicts_least_recently_updated():
    store = NGramStore(max_n=1, max_entries_per_n=3)
    for token in range(5):
        store.update([token], [A], [1.0])
    assert len(store) == 3
    assert store.lookup([0]) is None and store.lookup([1]) is None
    assert store.lookup([4]).id_list == [A]
    store.update([2], [B], [1.0])  # touch 2: now 3 is the oldest
    store.update([9], [C], [1.0])
    assert store.lookup([3]) is None and store.lookup([2]) is not None
    stats = store.stats()
    assert stats.evictions == 3
    assert stats.approx_bytes > 0


def test_bad_parameters_raise_one_line_error():
    with pytest.raises(StandError, match="NGramStore: top_k"):
        NGramStore(top_k=0)


def test_match_reports_n_and_counts_nothing():
    store = NGramStore(top_k=10)
    store.update([5, 6, 7], [1, 2], [0.6, 0.4])
    n, entry = store.match([9, 6, 7])
    assert n == 2 and entry.id_list == [1, 2]
    assert store.match([9, 9, 9]) is None
    assert store.stats().lookups == 0


def test_a_new_successor_of_sharp_p_enters_a_full_entry():
    """Ten one-hot successors seen once fill the entry; a new one seen again and again must get in
    at its second observation (its mass waits in the reserve), not only by float rounding."""
    store = NGramStore(max_n=1)
    for token in range(10):
        store.update([5], [token], [1.0])
    store.update([5], [99], [1.0])
    assert 99 not in store.lookup([5]).id_list  # a tie at 1/11: not (yet) among the top 10
    store.update([5], [99], [1.0])
    entry = store.lookup([5])
    assert entry.id_list[0] == 99 and entry.prob_list[0] == pytest.approx(2 / 12)
    for _ in range(98):
        store.update([5], [99], [1.0])
    entry = store.lookup([5])
    assert entry.prob_list[0] == pytest.approx(100 / 110)  # the exact running average
    assert len(entry.id_list) == 10 and 9 in entry.reserve[0]  # the evicted one waits in the reserve
    plain = NGramStore(max_n=1, reserve=0)  # the paper's plain truncation, for contrast
    for token in range(10):
        plain.update([5], [token], [1.0])
    for _ in range(5):
        plain.update([5], [99], [1.0])
    assert 99 not in plain.lookup([5]).id_list


def test_blend_interpolates_from_the_0_gram_table_up_to_the_longest_context():
    """Witten-Bell interpolation: each level n mixes its q with weight c / (c + u) into the blend below."""
    store = NGramStore(max_n=2)
    assert store.blend([1]) is None  # nothing observed yet
    store.update([1], [5, 6], [0.6, 0.4])
    store.update([2, 1], [7], [1.0])  # (1,) now holds {5: .3, 6: .2, 7: .5} with c = 2; (2, 1) {7: 1} with c = 1
    entry = store.blend([2, 1])
    # 0-gram {5: .3, 6: .2, 7: .5}; n = 1: λ = 2 / (2 + 3) keeps it; n = 2: λ = 1 / (1 + 1) adds half of {7: 1}
    assert entry.id_list == [7, 5, 6] and entry.count == 1
    assert entry.q == pytest.approx([0.75, 0.15, 0.10])
    unseen = store.blend([9])  # no context: the 0-gram table alone, count 0
    assert unseen.id_list == [7, 5, 6] and unseen.q == pytest.approx([0.5, 0.3, 0.2]) and unseen.count == 0
    shorter = store.blend([3, 1])  # (3, 1) never seen: the blend stops at (1,)
    assert shorter.q == pytest.approx([0.5, 0.3, 0.2]) and shorter.count == 2
    sharp = store.blend([2, 1], beta=0.0)  # beta 0: the longest context alone
    assert sharp.id_list == [7] and sharp.q == pytest.approx([1.0])
    assert len(store.blend([2, 1], width=2).id_list) == 2
    stats = store.stats()  # each blend counts as a lookup answered by its longest context
    assert stats.lookups == 5 and stats.hits_by_n == {2: 3, 1: 1} and stats.misses == 1
