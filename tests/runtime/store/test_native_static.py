"""The native static tree fill and copy index (stand_runtime._native) against the Python reference:
the same drafts (tokens, parents, depths, children, slots, static nodes, copied nodes, q bit for bit),
the same noise consumed and the same store statistics, for stochastic (stand) and deterministic
(stand-det) drafts, the bundled static tree and small trees, with and without copy chains and the
extension; the same continuation from the copy index; and, with STAND_NATIVE=1, generate()'s greedy
output equal to plain decoding and a seeded sampling run equal step for step to the Python one.
"""

import numpy as np
import pytest

from stand_runtime import DraftTree, Method, NGramStore, SamplingParams, generate
from stand_runtime.drafters import Extension, draft_tree, new_memory
from stand_runtime.store import drafting
from stand_runtime.store.native_draft import native_fill_tree
from stand_runtime.drafters.suffix_index import NativeSuffixIndex, SuffixIndex
from stand_runtime.randomness import RandomStream
from stand_runtime.store.native_store import NATIVE_ENV, NativeNGramStore, native_available
from stand_runtime.trees.tree_io import resolve_tree

from test_engine import REPEAT_PROMPT
from test_native import assert_same_store, feed_both, random_sequence

pytestmark = pytest.mark.skipif(not native_available(), reason="stand_runtime._native is not built (pip install -e .)")

BUNDLED = "stand-smollm2-humaneval-80"
SMALL_TREES = {
    "root-only": [],
    "chain-6": [(0,) * d for d in range(1, 7)],
    "wide": [(r,) for r in range(10)] + [(0, 0), (0, 1), (1, 0)],
    "narrow": [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)],
}


def static_tree(name: str) -> DraftTree:
    return resolve_tree(name) if name == BUNDLED else DraftTree.from_paths(SMALL_TREES[name])


def assert_same_static_draft(a, b) -> None:
    """Node for node: tokens, structure, slots, static nodes, copied nodes and q (exact)."""
    assert a.tokens == b.tokens and a.slots == b.slots and a.children == b.children
    assert np.array_equal(a.parents, b.parents) and np.array_equal(a.depths, b.depths)
    assert a.parents.dtype == b.parents.dtype == np.int64 and b.nodes.dtype == np.int64
    assert np.array_equal(a.nodes, b.nodes) and a.copied == b.copied and a.stochastic == b.stochastic
    assert a.scores is None and b.scores is None
    for ids_a, ids_b, q_a, q_b in zip(a.draft_ids, b.draft_ids, a.draft_probs, b.draft_probs, strict=True):
        assert (ids_a is None) == (ids_b is None) and (q_a is None) == (q_b is None)
        if ids_a is not None:
            assert np.array_equal(ids_a, ids_b) and ids_b.dtype == np.int64 and q_b.dtype == np.float64
            np.testing.assert_allclose(q_b, q_a, rtol=0, atol=1e-6)
            assert q_a.tolist() == q_b.tolist()  # bit for bit


@pytest.mark.parametrize("tree_name", [BUNDLED, *SMALL_TREES])
@pytest.mark.parametrize("stochastic", [False, True])
def test_static_fills_are_identical(tree_name, stochastic):
    """Many contexts and settings on stores with ties, reserves and misses: identical drafts, noise
    consumed (pools refilled mid-draft: blocks of 97) and lookups counted."""
    tree = static_tree(tree_name)
    rng = np.random.default_rng(5 + stochastic + 10 * len(tree_name))
    reference, native = NGramStore(), NativeNGramStore()
    feed_both(rng, (reference, native), 400)
    sequence = random_sequence(rng, 300)
    seed = int(rng.integers(1000))
    streams = [RandomStream.seeded(seed, block=97) for _ in range(2)]
    copied = extended = 0
    for i in range(80):
        end = int(rng.integers(1, len(sequence)))
        context = sequence[max(0, end - int(rng.integers(1, 20))) : end]
        chain = sequence[end : end + int(rng.integers(0, 12))] if i % 2 else None
        if chain and i % 4 == 1:
            chain = chain[:2] + [int(rng.integers(40, 60))] + chain[2:]  # leaves the drafted path
        extend = [None, Extension(tree.num_nodes or 8), Extension(30, min_score=0.01, max_depth=5)][i % 3]
        max_depth = [None, 4, 1, 12, 0][i % 5]
        drafts = [draft_tree(tree, store, context, stream if stochastic else None, max_depth, extend, chain)
                  for store, stream in zip((reference, native), streams)]
        assert_same_static_draft(*drafts)
        copied += len(drafts[0].copied)
        extended += int(np.sum(drafts[0].nodes < 0)) - len(drafts[0].copied)
    assert streams[0].gumbel(7).tolist() == streams[1].gumbel(7).tolist()  # the same noise was consumed
    assert streams[0].uniform() == streams[1].uniform()
    assert reference.stats() == native.stats()  # the lookups were counted alike
    assert copied > 0 and extended > 0  # the copy graft and the extension were exercised


def test_a_store_with_one_successor_per_context_fills_long_chains_alike():
    """One-hot observations (greedy decoding's feed shape): every hit has one id, the static tree
    collapses and the extension spends the budget on long chains."""
    rng = np.random.default_rng(2)
    sequence = random_sequence(rng, 1500, vocab=30)
    ids = np.asarray(sequence[1:])[:, None]
    stores = (NGramStore(), NativeNGramStore())
    for store in stores:
        store.update_sequence(sequence, list(range(len(sequence) - 1)), ids, np.ones_like(ids, dtype=np.float64))
    tree = resolve_tree(BUNDLED)
    for end in range(50, 1500, 97):
        for randomness in (None, RandomStream.seeded(end)):
            drafts = [draft_tree(tree, store, sequence[:end], randomness and RandomStream.seeded(end), 64,
                                 Extension(80), sequence[end : end + 10]) for store in stores]
            assert_same_static_draft(*drafts)
            assert drafts[0].num_nodes >= 40
    assert stores[0].stats() == stores[1].stats()


def test_an_empty_native_store_drafts_only_the_copy_chain():
    tree = resolve_tree(BUNDLED)
    for randomness in (None, RandomStream.seeded(0)):
        drafts = [draft_tree(tree, store, [0, 1], randomness, 8, Extension(80), [4, 5, 6])
                  for store in (NGramStore(), NativeNGramStore())]
        assert_same_static_draft(*drafts)
        assert drafts[1].tokens == [1, 4, 5, 6] and drafts[1].copied == {1, 2, 3}


def test_the_native_copy_index_continues_like_the_python_one():
    """Growing, restarted, shortened and edited sequences; every suffix length and limit; the length of
    the suffix matched too (every other check), measured beyond the index's n-grams in every third trial."""
    rng = np.random.default_rng(9)
    matched = set()
    for trial in range(60):
        max_ngram = int(rng.integers(1, 9))
        longest = max_ngram + int(rng.integers(1, 12)) if trial % 3 == 0 else None
        reference, native = SuffixIndex(max_ngram, longest), NativeSuffixIndex(max_ngram, longest)
        alphabet = 2 if longest else 6  # two tokens: long repeated spans
        sequence: list[int] = []
        for _ in range(50):
            roll = rng.random()
            if roll < 0.05:
                sequence = []
            elif roll < 0.1 and sequence:
                sequence = sequence[: int(rng.integers(0, len(sequence)))]
            elif roll < 0.15 and sequence:
                sequence[int(rng.integers(len(sequence)))] = int(rng.integers(alphabet))  # edited in place
            else:
                sequence += rng.integers(0, alphabet, int(rng.integers(0, 4))).tolist()
            limit = int(rng.integers(-1, 12))
            given = tuple(sequence) if trial % 7 == 0 else sequence
            if trial % 2:
                expected = reference.match(list(given), limit)
                assert expected == native.match(given, limit)
                matched.add(expected[1])
            else:
                assert reference.continuation(list(given), limit) == native.continuation(given, limit)
    assert len(matched) >= 5 and max(matched) > 8  # no match, several suffix lengths, and measured ones were met


def test_stand_native_drafts_static_trees_natively(monkeypatch):
    monkeypatch.setenv(NATIVE_ENV, "1")
    assert type(new_memory("stand", 100)) is NativeNGramStore and new_memory("stand", 100).max_n == 3
    assert type(new_memory("stand-det", 100, "heuristic-80")) is NativeNGramStore
    assert type(new_memory("stand", 100, "dynamic-auto")) is NativeNGramStore  # value-sized: native scores
    drafter = Method.parse("stand", "heuristic-80").drafter(None, RandomStream.seeded(0), SamplingParams(), 100)
    assert type(drafter.store) is NativeNGramStore and type(drafter._index) is NativeSuffixIndex


def run_generate(model, monkeypatch, native: bool, method: str, tree: str, sampling: SamplingParams, seed=None):
    """generate() under STAND_NATIVE=1 or 0: the result, each step's (tokens, draft tokens, accepted)
    and the store (the method's fresh memory, as generate makes it)."""
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    fills = []
    monkeypatch.setattr(drafting, "native_fill_tree", lambda *args: fills.append(1) or native_fill_tree(*args))
    steps = []
    method = Method.parse(method, tree, model)
    store = method.new_memory(model.config.vocab_size)
    assert (type(store) is NativeNGramStore) == (native and store is not None)
    result = generate(model, None, REPEAT_PROMPT, method=method, sampling=sampling, max_new_tokens=40, seed=seed,
                      store=store, eos_token_ids=[],
                      on_step=lambda s: steps.append((s.tokens, s.draft.tokens, s.verification.accepted)))
    assert bool(fills) == (store is not None and native)  # the native fill drafted the steps, or none did
    return result, steps, store




@pytest.mark.parametrize("method", ["stand", "stand-det"])
def test_native_seeded_sampling_is_the_python_run(tiny_qwen2, monkeypatch, method):
    """Same seed, same tokens, drafts and verification outcomes step for step, native or Python."""
    sampling = SamplingParams(temperature=0.8)
    for seed in (0, 1):
        native, steps, native_store = run_generate(tiny_qwen2, monkeypatch, True, method, BUNDLED, sampling, seed)
        python, python_steps, python_store = run_generate(tiny_qwen2, monkeypatch, False, method, BUNDLED, sampling, seed)
        assert native.tokens == python.tokens and steps == python_steps
        assert_same_store(python_store, native_store)
        assert sum(len(accepted) for _, _, accepted in steps) > 0  # drafts were accepted


def test_the_extension_takes_a_leaf_whose_path_probability_equals_min_score():
    """"At least min_score" at equality, in both stores: leaves whose path probability is exactly
    0.5 x 0.2 = 0.1 (the default min_score) still get their child; the one below it (0.05) does not,
    though the store has a successor for it."""
    for store in (NGramStore(max_n=2), NativeNGramStore(max_n=2)):
        store.update([0, 1], [2, 3], [0.5, 0.5])
        store.update([1, 2], [10, 11, 12, 13, 14], [0.2] * 5)  # q's mode 0.2: the path reaches 0.1
        store.update([2, 10], [20], [1.0])  # 0.1 x 1.0: still exactly 0.1
        store.update([10, 20], [30, 31], [0.5, 0.5])  # 0.1 x 0.5 = 0.05
        store.update([20, 30], [40], [1.0])  # the 0.05 leaf's successor: below min_score, not taken
        draft = draft_tree(DraftTree.from_paths([]), store, [0, 1], None, None, Extension(10))
        assert draft.tokens == [1, 2, 10, 20, 30], type(store).__name__
