"""The native core's boundary (csrc/bindings.cpp): what its memory safety rests on (sizes, ranges,
shapes, a static tree's structure, the Gumbel pool's refills, no draft re-entered from its noise
callback) is checked whoever calls it, raw calls included; through the wrappers the user's errors
are the Python store's. Found by a fuzz run under AddressSanitizer, each case read out of bounds or
crashed before."""

from __future__ import annotations

import numpy as np
import pytest

from stand_runtime import DynamicTree, NGramStore, StandError
from stand_runtime.drafters import best_first_draft
from stand_runtime.store.native_draft import native_best_first_rows
from stand_runtime.drafters.suffix_index import NativeSuffixIndex, SuffixIndex
from stand_runtime.store.native_store import NativeNGramStore, native_available

pytestmark = pytest.mark.skipif(not native_available(), reason="stand_runtime._native is not built (pip install -e .)")


def fed(store):
    for i in range(30):
        store.update([i % 5, (i + 1) % 5, (i + 2) % 5], [(i + 3) % 7, (i + 4) % 7], [0.6, 0.3])
    return store


def raw():
    from stand_runtime.store.native_store import _native

    return _native, fed(NativeNGramStore(max_n=3)).core


NO_CHAIN = np.zeros(0, dtype=np.int64)


@pytest.mark.parametrize("store_class", [NGramStore, NativeNGramStore])
def test_both_stores_refuse_the_same_bad_arguments(store_class):
    """An empty context has no root to draft from; a blend keeps at least one id at a finite beta >= 0;
    a suffix index matches 1 .. 4096 tokens."""
    store = fed(store_class(max_n=3))
    with pytest.raises(StandError, match="at least one token"):
        best_first_draft(DynamicTree(5), store, [], None)
    with pytest.raises(StandError, match="width >= 1"):
        store.blend([1, 2], 1.0, 0)
    for beta in (-0.5, float("nan"), float("inf")):
        with pytest.raises(StandError, match="beta"):
            store.blend([1, 2], beta)
    for index in (SuffixIndex, NativeSuffixIndex):
        for bad in (0, -1, 10**8):
            with pytest.raises(StandError, match="max_ngram"):
                index(bad)


def test_the_wrappers_refuse_what_would_read_out_of_bounds():
    """A table outside 1 .. max_n, and a row of the one-call drafting API with an empty context."""
    store = fed(NativeNGramStore(max_n=3))
    for n in (0, -1, 4):
        with pytest.raises(StandError, match="1 .. 3 tokens"):
            store.table(n)
    assert store.table(3)
    with pytest.raises(StandError, match="at least one token"):
        native_best_first_rows([(DynamicTree(5), store, [], None, None, None, 0.8)])


def test_raw_calls_are_checked_at_the_boundary():
    """Sizes, ranges and shapes the C++ loops trust: ValueError, never a read past an array."""
    native, core = raw()
    context = np.array([1, 2], dtype=np.int64)
    bad_calls = {
        "at least one token": lambda: native.best_first(core, NO_CHAIN, NO_CHAIN, 5, 1.0, 1.0, 8, 16, 0.8, None, None),
        "num_nodes and deepest": lambda: native.best_first(core, context, NO_CHAIN, -1, 1.0, 1.0, 8, 16, 0.8, None, None),
        "Store: top_k": lambda: native.Store(10, 0, 100, 4, False),
        "one length": lambda: core.update([1, 2], [1, 2, 3], [0.5]),
        "1 .. max_n": lambda: core.entries(0),
        "a position": lambda: core.update_rows(context, np.array([5]), np.zeros((1, 2), np.int64), np.zeros((1, 2)), 0),
        "a row per position": lambda: core.update_rows(context, np.array([0, 1]), np.zeros((1, 2), np.int64),
                                                       np.zeros((1, 2)), 0),
        "one shape": lambda: core.update_rows(context, np.array([0]), np.zeros((1, 2), np.int64), np.zeros((1, 1)), 0),
        "first must be": lambda: core.update_rows(context, np.array([0]), np.zeros((1, 2), np.int64), np.zeros((1, 2)), -1),
        "max_ngram": lambda: native.SuffixIndex(0, 0),
    }
    for message, call in bad_calls.items():
        with pytest.raises(ValueError, match=message):
            call()
    # a limit near int64's largest no longer overflows: the whole continuation
    assert native.SuffixIndex(2, 2).continuation([1, 2, 1, 2], 2**63 - 1) == [1, 2]


@pytest.mark.parametrize("child_start, child_list", [
    ([], []), ([0], []),               # no root
    ([0, 2, 2], [7, 9]),               # children outside the tree
    ([3, 0, 0, 0], [1, 2, 3]),         # not from 0 / decreasing
    ([0, 50, 50], [1]),                # past the child list
    ([0, 1, 2], [1, 0]),               # a cycle: a child before its parent
])
def test_a_static_tree_of_bad_structure_is_refused(child_start, child_list):
    native, core = raw()
    with pytest.raises(ValueError, match="static_fill"):
        native.static_fill(core, np.array([1, 2]), np.asarray(child_start, dtype=np.int64),
                           np.asarray(child_list, dtype=np.int64), NO_CHAIN, 5, 5, False, 0, 0.0, None, None)


def test_the_noise_callback_must_refill_and_must_not_reenter():
    """The Gumbel pool's ``more(used, n)`` must return n values or more; while a draft runs it may
    neither draft again (the draft's scratch is shared) nor change a store (the draft holds pointers
    into its entries)."""
    native, core = raw()
    context = np.array([1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="fewer than n values"):
        native.best_first(core, context, NO_CHAIN, 20, 1.0, 1.0, 64, 16, 0.8, np.zeros(1), lambda used, n: None)

    def drafts_again(used, n):
        native.best_first(core, context, NO_CHAIN, 5, 1.0, 1.0, 64, 16, 0.8, None, None)
        return np.zeros(n + 100)

    def changes_the_store(used, n):
        core.update([1, 2, 3], [4], [0.5])
        return np.zeros(n + 100)

    for more in (drafts_again, changes_the_store):
        with pytest.raises(RuntimeError, match="noise callback"):
            native.best_first(core, context, NO_CHAIN, 60, 1.0, 1.0, 64, 16, 0.8, np.zeros(1), more)
        with pytest.raises(RuntimeError, match="noise callback"):
            native.static_fill(core, context, np.array([0, 3, 3, 3, 3]), np.array([1, 2, 3]), NO_CHAIN, 5, 5, False, 0,
                               0.0, np.zeros(1), more)
    # the guard is released after a refused call: drafting works again
    assert native.best_first(core, context, NO_CHAIN, 5, 1.0, 1.0, 64, 16, 0.8, None, None)[0]
