"""Lossless verification (docs/design.md §4.3, §9): emitted tokens are distributed exactly as plain sampling.

Each case simulates >= 100k verifications and compares the first emitted token's frequencies with p
by a chi-square test (p-value > 0.001). Tokens with p = 0 must never be emitted.
"""

import zlib

import numpy as np
import pytest
from scipy import stats

from stand_runtime import (
    Draft,
    DraftTree,
    DynamicTree,
    NGramStore,
    RandomStream,
    draft_tree,
    gumbel_top_k,
    verify_greedy,
    verify_sampling,
)
from stand_runtime.drafters import best_first_draft

TRIALS = 100_000


def one_level_draft(q_ids, q_probs, order, stochastic):
    """A root whose children are ``q_ids[order]`` (drawing order) drawn from q; they are leaves."""
    n = len(order)
    children = [int(q_ids[i]) for i in order]
    slots = [-1, *order]
    return Draft(
        nodes=np.arange(n + 1),
        tokens=[0, *children],
        parents=np.array([-1] + [0] * n),
        depths=np.array([0] + [1] * n),
        children=[list(range(1, n + 1))] + [[] for _ in range(n)],
        slots=slots,
        draft_ids=[np.asarray(q_ids)] + [None] * n,
        draft_probs=[np.asarray(q_probs, dtype=np.float64)] + [None] * n,
        stochastic=stochastic,
    )


def first_token_counts(p, q, m, stochastic, seed):
    """Simulate drafting m children from q and verifying against p; count the first emitted token."""
    vocab = len(p)
    rng = RandomStream.seeded(seed)
    support = np.flatnonzero(q)
    q_support = q[support] / q[support].sum()
    with np.errstate(divide="ignore"):
        log_q = np.log(q_support)
    m = min(m, len(support))
    counts = np.zeros(vocab, dtype=np.int64)
    target = lambda node: p  # noqa: E731 - the children are leaves; only the root's p matters first
    top_m = np.argsort(-q_support, kind="stable")[:m]
    for _ in range(TRIALS):
        order = gumbel_top_k(log_q, m, rng.gumbel(len(support))) if stochastic else top_m
        draft = one_level_draft(support, q_support, order.tolist(), stochastic)
        result = verify_sampling(draft, target, rng)
        first = draft.tokens[result.accepted[0]] if result.accepted else result.token
        counts[first] += 1
    return counts


def assert_matches(counts, p):
    assert counts[p == 0].sum() == 0, "emitted a token the target can never sample"
    support = p > 0
    if support.sum() == 1:
        return
    result = stats.chisquare(counts[support], p[support] / p[support].sum() * counts.sum())
    assert result.pvalue > 0.001, (result, counts, p)


def normalised(x):
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


rng_cases = np.random.default_rng(1234)
CASES = {
    "random-1": (normalised(rng_cases.random(6)), normalised(rng_cases.random(6)), 2),
    "random-2": (normalised(rng_cases.random(8) ** 3), normalised(rng_cases.random(8) ** 3), 3),
    "q-support-smaller-than-children": (normalised([0.1, 0.2, 0.3, 0.4, 0.0]), normalised([0.5, 0.5, 0, 0, 0]), 4),
    "p-equals-q": (normalised([0.5, 0.3, 0.2, 0.0]), normalised([0.5, 0.3, 0.2, 0.0]), 2),
    "disjoint": (normalised([0.6, 0.4, 0, 0, 0]), normalised([0, 0, 0.2, 0.3, 0.5]), 3),
    "p-one-hot": (normalised([0, 0, 1.0, 0, 0]), normalised([0.3, 0.3, 0.2, 0.1, 0.1]), 3),
    "q-one-hot": (normalised([0.2, 0.5, 0.3, 0, 0]), normalised([0, 1.0, 0, 0, 0]), 2),
    "many-children": (normalised(rng_cases.random(12)), normalised(rng_cases.random(12) ** 2), 10),
}


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
@pytest.mark.parametrize("case", list(CASES))
def test_first_emitted_token_is_distributed_as_p(case, stochastic):
    p, q, m = CASES[case]
    counts = first_token_counts(p, q, m, stochastic, seed=zlib.crc32(case.encode()))
    assert counts.sum() == TRIALS
    assert_matches(counts, p)


def markov_joint(p_matrix, root):
    return p_matrix[root][:, None] * p_matrix


def markov_case(seed: int, vocab: int, power: float, impossible: tuple, q_share_of_p: float):
    """A Markov target (rows of p, one transition impossible) and draft rows q mixing p with noise."""
    gen = np.random.default_rng(seed)
    p_matrix = gen.random((vocab, vocab)) ** power
    p_matrix[impossible] = 0.0
    p_matrix /= p_matrix.sum(1, keepdims=True)
    q_matrix = q_share_of_p * p_matrix + (1 - q_share_of_p) * gen.dirichlet(np.ones(vocab), size=vocab)
    return p_matrix, q_matrix


def assert_markov_joint(counts, p_matrix, trials):
    """The first two emitted tokens follow the Markov target's joint law (chi-square, p > 0.001)."""
    joint = markov_joint(p_matrix, 0).ravel()
    observed = counts.ravel()
    assert observed[joint == 0].sum() == 0
    result = stats.chisquare(observed[joint > 0], joint[joint > 0] * trials)
    assert result.pvalue > 0.001, result


def two_token_counts(p_matrix, q_matrix, stochastic, trials, seed, tree=None, extend=None, graft=None, dynamic=None,
                     observations=1):
    """Run full steps on a two-level tree with a Markov target; count the first two emitted tokens
    (and how many drafted nodes outside the static tree, an extension's or a copy chain's
    (``graft(context)``), were accepted). ``dynamic``: draft that :class:`DynamicTree` instead of
    ``tree``; ``observations``: times the store sees each q row."""
    vocab = len(p_matrix)
    tree = tree or DraftTree.from_paths([[0], [1], [0, 0], [0, 1], [1, 0], [1, 1]])
    store = NGramStore(max_n=1)
    for token in range(vocab):
        support = np.flatnonzero(q_matrix[token])
        for _ in range(observations):
            store.update([token], support, q_matrix[token][support])
    rng = RandomStream.seeded(seed)
    counts = np.zeros((vocab, vocab), dtype=np.int64)
    accepted_total = accepted_extension = 0
    root = 0
    for _ in range(trials):
        emitted, context = [], [root]
        while len(emitted) < 2:
            if dynamic is not None:
                draft = best_first_draft(dynamic, store, context, rng if stochastic else None,
                                         chain=graft(context) if graft else None)
            else:
                draft = draft_tree(tree, store, context, rng if stochastic else None, extend=extend,
                                   graft=graft(context) if graft else None)
            result = verify_sampling(draft, lambda node: p_matrix[draft.tokens[node]], rng)
            accepted_total += len(result.accepted)
            accepted_extension += sum(int(draft.nodes is None or draft.nodes[i] < 0) for i in result.accepted)
            step = [draft.tokens[i] for i in result.accepted] + [result.token]
            emitted += step
            context = context + step
        counts[emitted[0], emitted[1]] += 1
    if extend is not None or graft is not None:
        return counts, accepted_total, accepted_extension
    return counts, accepted_total


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
def test_two_level_tree_markov_joint_distribution(stochastic):
    gen = np.random.default_rng(7)
    vocab = 4
    p_matrix = gen.random((vocab, vocab)) ** 2
    p_matrix[1, 3] = 0.0  # a transition the target never takes
    p_matrix /= p_matrix.sum(1, keepdims=True)
    q_matrix = 0.5 * p_matrix + 0.5 * gen.dirichlet(np.ones(vocab), size=vocab)
    trials = 60_000
    counts, accepted = two_token_counts(p_matrix, q_matrix, stochastic, trials, seed=11)
    assert accepted > trials  # drafts were really accepted, at both levels on average
    assert_markov_joint(counts, p_matrix, trials)


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
def test_extension_chains_keep_the_markov_joint_distribution(stochastic):
    """A wide root (4 slots) over q supports of 2 tokens: the unused slots become chains beyond the
    static tree (Extension), drawn from q and verified like static nodes; the output stays p's."""
    from stand_runtime.drafters import Extension

    gen = np.random.default_rng(8)
    vocab = 5
    p_matrix = gen.random((vocab, vocab)) ** 3
    p_matrix /= p_matrix.sum(1, keepdims=True)
    q_matrix = np.zeros((vocab, vocab))
    for token in range(vocab):  # q: p's two most likely successors, a little off
        top = np.argsort(-p_matrix[token])[:2]
        q_matrix[token, top] = p_matrix[token, top] + 0.1 * gen.random(2)
    tree = DraftTree.from_paths([[0], [1], [2], [3]])
    trials = 40_000
    counts, accepted, extension = two_token_counts(p_matrix, q_matrix, stochastic, trials, seed=5, tree=tree,
                                                   extend=Extension(budget=4, min_score=0.0))
    assert extension > trials // 4, extension  # chain nodes beyond the static tree were accepted
    assert_markov_joint(counts, p_matrix, trials)


def test_greedy_accepts_exactly_the_argmax_path():
    tree = DraftTree.from_paths([[0], [1], [0, 0], [1, 0], [1, 1], [1, 1, 0]])
    store = NGramStore(max_n=1)
    store.update([0], [1, 2], [0.6, 0.4])
    store.update([2], [3, 1], [0.5, 0.5])
    store.update([1], [3], [1.0])
    store.update([3], [0], [1.0])
    draft = draft_tree(tree, store, [0], None)
    # target argmax: after 0 -> 2, after 2 -> 1, after 1 -> 3, after 3 -> 2
    argmax_next = {0: 2, 2: 1, 1: 3, 3: 2}

    def target(node):
        p = np.full(4, 0.1)
        p[argmax_next[draft.tokens[node]]] = 0.7
        return p

    result = verify_greedy(draft, lambda node: int(np.argmax(target(node))))
    path = [draft.tokens[i] for i in result.accepted]
    assert path == [2, 1, 3]  # the argmax chain, through rank 1 then rank 1 then rank 0
    assert result.token == 2 and result.bonus
    # a root whose argmax is not drafted emits the argmax and accepts nothing
    miss = verify_greedy(draft, lambda node: 3)
    assert miss.accepted == [] and miss.token == 3 and not miss.bonus


class ForcedStream(RandomStream):
    """A random stream whose uniforms come from a list (the rest from a seeded generator)."""

    def __init__(self, uniforms):
        super().__init__()
        self.forced = list(uniforms)

    def uniform(self):
        return self.forced.pop(0) if self.forced else super().uniform()


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]])
def test_nucleus_fully_drafted_never_draws_an_empty_residual(order):
    """p's whole nucleus (4 tokens, float32 noise) is drafted from a q that covers it: rejecting every
    child leaves an empty residual, so that outcome must have probability exactly 0, even for a
    uniform just above the children's cumulative acceptance (it used to raise IndexError)."""
    vocab = 50
    ids = np.array([5, 9, 17, 30])
    q = np.array([0.4, 0.3, 0.2, 0.1])
    p = np.zeros(vocab)
    p[ids] = (q * (1 - 3e-8)).astype(np.float32)  # a float32 row summing to 1 - 6e-8: p < q on every id
    from stand_runtime import acceptance_chain

    for stochastic in (True, False):
        outside = max(0.0, p.sum() - p[ids].sum())
        chain = acceptance_chain(p[ids].tolist(), q.tolist() if stochastic else None, order, stochastic, outside)
        assert chain.none == 0.0, chain
        cumulative = float(np.cumsum(chain.accept)[-1])
        draft = one_level_draft(ids, q, order, stochastic)
        if not stochastic:
            draft = one_level_draft(ids[order], q[order], list(range(4)), False)
            draft.draft_ids[0] = None
        for u in (np.nextafter(cumulative, 1.0), 1.0 - 1e-17, np.nextafter(1.0, 0.0)):
            result = verify_sampling(draft, lambda node: p, ForcedStream([u]))
            token = draft.tokens[result.accepted[0]] if result.accepted else result.token
            assert token in ids


def test_nan_target_is_an_error_not_an_acceptance():
    from stand_runtime import StandError

    draft = one_level_draft(np.array([1, 2]), np.array([0.5, 0.5]), [0, 1], True)
    p = np.array([0.2, np.nan, 0.3, 0.5])
    with pytest.raises(StandError, match="not finite"):
        verify_sampling(draft, lambda node: p, RandomStream.seeded(0))


def test_duplicate_siblings_are_refused_where_drafts_are_built():
    from stand_runtime import DraftBuilder, StandError

    builder = DraftBuilder(7)
    builder.add(0, 3)
    builder.add(0, 3)
    with pytest.raises(StandError, match="duplicate children"):
        builder.build(stochastic=False)


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
def test_copy_chains_keep_the_markov_joint_distribution(stochastic):
    """STAND's copy path: deterministic chains grafted below drafted nodes and at store misses are
    verified by the deterministic-draft rule next to q-drawn siblings elsewhere; the output stays p's."""
    vocab = 5
    p_matrix, q_matrix = markov_case(21, vocab, 3, (2, 4), 0.5)
    q_matrix[3] = 0.0  # a store miss after token 3: the copy chain is the whole draft there
    copy = {t: [int(np.argmax(p_matrix[t])), int(np.argsort(p_matrix[np.argmax(p_matrix[t])])[-2])] for t in range(vocab)}
    trials = 40_000
    counts, accepted, copied = two_token_counts(p_matrix, q_matrix, stochastic, trials, seed=13,
                                                tree=DraftTree.from_paths([[0], [1]]),
                                                graft=lambda context: copy[context[-1]])
    assert copied > trials // 10, copied  # copied nodes were accepted
    assert_markov_joint(counts, p_matrix, trials)


@pytest.mark.parametrize("stochastic", [True, False], ids=["stochastic", "deterministic"])
@pytest.mark.parametrize("budget", [2, 4])
def test_dynamic_trees_keep_the_markov_joint_distribution(stochastic, budget):
    """STAND's dynamic tree: how many children a node gets depends on a budget that siblings and
    deeper nodes compete for, scored from the store's blended q (with a copy chain inside the
    budget). With the next child scored by q at its rank, never by the token it will be, the output
    stays p's at both levels. (Scoring it by the drawn token's q instead fails here: p ~ 1e-288 at
    budget 2, checked when this test was written.)"""
    vocab = 5
    p_matrix, q_matrix = markov_case(29, vocab, 3, (1, 2), 0.7)
    q_matrix[4] = 0.0  # never a context: the blend drafts the 0-gram table's q there
    copy = {t: [int(np.argsort(p_matrix[t])[-2])] for t in range(vocab)}
    trials = 40_000
    counts, accepted, _ = two_token_counts(p_matrix, q_matrix, stochastic, trials, seed=17,
                                           dynamic=DynamicTree(budget), graft=lambda context: copy[context[-1]],
                                           observations=30)
    assert accepted > trials // 2, accepted
    assert_markov_joint(counts, p_matrix, trials)
