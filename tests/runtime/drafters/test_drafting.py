"""Gumbel-Top-K drafting (STAND §3.2): exact without-replacement frequencies, noise never reused."""

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from stand_runtime import DraftTree, NGramStore
from stand_runtime.drafters import draft_tree
from stand_runtime.store.gumbel import gumbel_top_k
from stand_runtime.randomness import RandomStream


def test_gumbel_top_k_pairs_match_sequential_sampling_without_replacement():
    q = np.array([0.4, 0.25, 0.2, 0.1, 0.05])
    draws = 60_000
    stream = RandomStream.seeded(1)
    noise = stream.gumbel(draws * len(q)).reshape(draws, len(q))
    picks = gumbel_top_k(np.log(q)[None].repeat(draws, 0), 2, noise)
    assert picks.shape == (draws, 2)
    assert (picks[:, 0] != picks[:, 1]).all()
    pairs = list(itertools.permutations(range(len(q)), 2))
    expected = np.array([q[i] * q[j] / (1 - q[i]) for i, j in pairs])
    assert expected.sum() == pytest.approx(1.0)
    codes = picks[:, 0] * len(q) + picks[:, 1]
    observed = np.array([(codes == i * len(q) + j).sum() for i, j in pairs])
    result = stats.chisquare(observed, expected * draws)
    assert result.pvalue > 0.001, result


def test_impossible_entries_are_never_drawn():
    with np.errstate(divide="ignore"):
        log_q = np.log(np.array([0.5, 0.5, 0.0]))
    stream = RandomStream.seeded(0)
    for _ in range(200):
        assert sorted(gumbel_top_k(log_q, 2, stream.gumbel(3)).tolist()) == [0, 1]


def test_same_seed_same_draws_and_consecutive_calls_never_share_noise():
    a, b = RandomStream.seeded(7, block=64), RandomStream.seeded(7, block=64)
    first, second = a.gumbel(50).copy(), a.gumbel(50).copy()
    assert np.array_equal(np.concatenate([first, second]), b.gumbel(100))
    assert not np.intersect1d(first, second).size
    # across refills of the pool too (block 64 < 3 * 50), and for uniforms
    third = a.gumbel(50)
    assert not np.intersect1d(third, np.concatenate([first, second])).size
    u1, u2 = np.array([a.uniform() for _ in range(40)]), np.array([a.uniform() for _ in range(40)])
    assert not np.intersect1d(u1, u2).size
    assert ((u1 >= 0) & (u1 < 1)).all()
    c = RandomStream.seeded(8, block=64)
    assert not np.array_equal(c.gumbel(50), first)


def test_generator_passed_in_drives_everything():
    """Gumbel noise and uniforms are blocks drawn in turn from the generator given: exactly the
    values a copy of it yields, and nothing more is drawn."""
    gen = torch.Generator().manual_seed(3)
    stream = RandomStream(gen, block=16)
    gumbels = stream.gumbel(10).copy()
    uniforms = [stream.uniform() for _ in range(3)]
    copy = torch.Generator().manual_seed(3)
    first = torch.rand(16, generator=copy, dtype=torch.float64).numpy()
    second = torch.rand(16, generator=copy, dtype=torch.float64).numpy()
    assert np.array_equal(gumbels, -np.log(-np.log(np.maximum(first, np.finfo(np.float64).tiny)))[:10])
    assert uniforms == second[:3].tolist()
    assert torch.equal(gen.get_state(), copy.get_state())


def _store_with(context_to_dist, max_n=1):
    store = NGramStore(max_n=max_n)
    for context, dist in context_to_dist.items():
        ids, probs = zip(*dist.items())
        store.update(list(context), list(ids), list(probs))
    return store


def test_draft_tree_fills_static_slots_and_drops_misses():
    tree = DraftTree.from_paths([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    # token 5 -> {6: .6, 7: .4}; 6 -> {8: 1}; 7 -> miss; 8 -> miss
    store = _store_with({(5,): {6: 0.6, 7: 0.4}, (6,): {8: 1.0}})
    draft = draft_tree(tree, store, [1, 5], None)
    # root has 3 static children but q has only 2 tokens: rank 2 is dropped
    assert draft.tokens == [5, 6, 7, 8]
    assert draft.nodes.tolist() == [0, 1, 2, 4]  # static [0], [1], [0, 0]
    assert draft.parents.tolist() == [-1, 0, 0, 1]
    assert draft.depths.tolist() == [0, 1, 1, 2]
    assert draft.children == [[1, 2], [3], [], []]
    assert draft.draft_ids[0].tolist() == [6, 7] and draft.draft_probs[0].tolist() == pytest.approx([0.6, 0.4])
    assert draft.draft_ids[2] is None and not draft.stochastic
    # the kept nodes are closed under ancestors, so their mask is the sub-matrix of the static one
    sub = tree.ancestor_mask[draft.nodes][:, draft.nodes]
    assert sub.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]


def test_draft_tree_max_depth_and_miss_at_root():
    tree = DraftTree.chain(4)
    store = _store_with({(1,): {1: 1.0}})
    assert draft_tree(tree, store, [1], None, max_depth=2).tokens == [1, 1, 1]
    assert draft_tree(tree, store, [2], RandomStream.seeded(0)).num_nodes == 0


def test_stochastic_draft_children_are_distinct_and_follow_q():
    tree = DraftTree.from_paths([[0], [1]])
    store = _store_with({(5,): {6: 0.7, 7: 0.2, 8: 0.1}})
    stream = RandomStream.seeded(0)
    firsts = []
    for _ in range(2000):
        draft = draft_tree(tree, store, [5], stream)
        assert draft.stochastic and len(set(draft.tokens[1:])) == 2
        firsts.append(draft.tokens[1])
    freq = np.mean(np.array(firsts) == 6)
    assert abs(freq - 0.7) < 0.04


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
def test_replay_calibration_chooses_the_children_drafting_chooses(stochastic):
    """Replay calibration must estimate what drafting does: with the same store and noise, the
    children it walks at a node are the tokens the engine's drafter puts there, in the same order."""
    from stand_runtime.store.gumbel import choose_children
    from stand_runtime.engine.batch_sampling import RecordedDistributions
    from treeopt.optimize.replay import replay_trajectory

    tree = DraftTree.from_paths([[0], [1], [2], [0, 0]])
    store = NGramStore(max_n=1)
    store.update([4], [7, 8, 9, 3], [0.4, 0.3, 0.2, 0.1])
    drafted = draft_tree(tree, store, [1, 4], RandomStream.seeded(3) if stochastic else None)
    entry = store.lookup([4])
    slots = choose_children(entry.log_q, 3, RandomStream.seeded(3) if stochastic else None, 0, entry.ids)
    assert [drafted.tokens[c] for c in drafted.children[0]] == [entry.id_list[s] for s in slots]
    # the replay itself, on a trajectory whose next token is the second drafted child: it must
    # credit exactly the static node the engine would have placed that token in
    second = drafted.tokens[drafted.children[0][1]]
    recorded = RecordedDistributions(
        store_ids=np.array([[7, 8, 9, 3, 0, 1, 2, 5, 6, 10]] * 3), store_probs=np.full((3, 10), 0.1),
        target_ids=[np.array([3, 7, 8, 9]), np.array([5])], target_probs=[np.array([0.5, 0.2, 0.2, 0.1]), np.array([1.0])])
    alpha = np.zeros(tree.num_nodes + 1)
    replay_trajectory([1, 4], [second, 5], recorded, tree, store, RandomStream.seeded(3), alpha,
                      stochastic=stochastic, segmentations=1)
    from stand_runtime.verify import acceptance_chain

    target = {3: 0.5, 7: 0.2, 8: 0.2, 9: 0.1}
    chain = acceptance_chain([target.get(t, 0.0) for t in entry.id_list], entry.q.tolist() if stochastic else None,
                             slots, stochastic)
    np.testing.assert_allclose(alpha[1:4], chain.accept)  # static node 1 + r credited with child r's chance
    assert alpha[1:4].sum() > 0


def test_extension_spends_the_budget_misses_leave_on_the_most_probable_chain():
    from stand_runtime.drafters import Extension

    tree = DraftTree.from_paths([[0], [1], [2], [3]])  # four root children: a budget of 4 nodes
    store = NGramStore(max_n=1)
    store.update([1], [2, 9], [0.9, 0.1])  # after 1: 2 (0.9) or 9; then a sharp chain 2 → 3 → 4 → 5
    store.update([2], [3], [1.0])
    store.update([3], [4], [1.0])
    store.update([4], [5], [1.0])
    static = draft_tree(tree, store, [7, 1], None)
    assert static.num_nodes == 2 and list(static.nodes) == [0, 1, 2]  # q has 2 ids: 2 of 4 slots used
    extended = draft_tree(tree, store, [7, 1], None, extend=Extension(budget=4))
    assert extended.num_nodes == 4
    assert extended.path(4) == [2, 3, 4] and list(extended.nodes) == [0, 1, 2, -1, -1]  # a chain past the tree
    assert extended.draft_ids[1] is not None and extended.slots[3] == 0  # each step drawn from its own q
    assert draft_tree(tree, store, [7, 1], None, max_depth=2, extend=Extension(budget=4)).num_nodes == 3
    assert draft_tree(tree, store, [7, 1], None, extend=Extension(budget=4, min_score=0.95)).num_nodes == 2
    store.update([9], [8], [1.0])  # equal budget, but the 0.9 path is preferred over the 0.1 one
    assert draft_tree(tree, store, [7, 1], None, extend=Extension(budget=3)).path(3) == [2, 3]


def test_copy_chain_follows_matching_children_and_hangs_below_the_path():
    """The copy path (prompt lookup's chain inside STAND's draft) walks down drafted children equal
    to its tokens; from the first node whose children lack its next token the rest hangs as copied
    nodes: after the drawn siblings, their token in the parent's support with q = 0 when q lacked
    it, one copied child per copied node."""
    from stand_runtime.drafters import Extension

    tree = DraftTree.from_paths([[0], [1], [0, 0]])
    store = _store_with({(5,): {6: 0.6, 7: 0.4}, (6,): {8: 1.0}})
    draft = draft_tree(tree, store, [1, 5], None, graft=[6, 8, 2, 3])
    assert draft.tokens == [5, 6, 7, 8, 2, 3]  # 6 → 8 were drafted; 2 → 3 hang below 8
    assert draft.path(5) == [6, 8, 2, 3] and list(draft.nodes[4:]) == [-1, -1]
    assert draft.copied == {4, 5} and draft.children[3] == [4] and draft.children[4] == [5]
    assert draft.draft_ids[4] is None and draft.slots[5] == -1  # below a copied node: no q
    beside = draft_tree(tree, store, [1, 5], None, graft=[9, 2])  # 9 is not among the drawn children
    assert beside.tokens == [5, 6, 7, 8, 9, 2] and beside.children[0] == [1, 2, 4] and beside.copied == {4, 5}
    assert beside.draft_ids[0].tolist() == [6, 7, 9] and beside.draft_probs[0].tolist() == pytest.approx([0.6, 0.4, 0])
    assert beside.slots[4] == 2
    assert draft_tree(tree, store, [1, 5], None, graft=[6, 8, 2, 3], max_depth=3).tokens == [5, 6, 7, 8, 2]
    miss = draft_tree(tree, store, [1, 4], None, graft=[2, 3])  # a store miss at the root: the chain alone
    assert miss.tokens == [4, 2, 3] and miss.parents.tolist() == [-1, 0, 1] and miss.draft_ids[0] is None
    # copied nodes do not count against the extension's budget, and it never adds drawn children
    # beside a copied one
    extended = draft_tree(tree, store, [1, 4], None, graft=[2, 3], extend=Extension(budget=3))
    assert extended.tokens[:3] == [4, 2, 3] and extended.children[0] == [1]
