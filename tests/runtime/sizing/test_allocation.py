"""One node budget per batch forward (engine/allocation.py): its arithmetic, its stopping rule (no
row's node is chosen by anything drawn at or after it), the rank-rule scores it reads, its latency
correction, and lossless batched decoding with it."""

from __future__ import annotations


import numpy as np
import pytest

from stand_runtime import (Method, NGramStore, SamplingParams, SizingSession, StandError, generate_batch)
from stand_runtime.store.drafting import DynamicTree, best_first_draft
from stand_runtime.sizing.latency_model import LatencyModel
from stand_runtime.sizing.value import AcceptanceMap, ValueRule, first_peak
from stand_runtime.sizing.allocation import BatchAllocator, padded_allocation, packed_allocation
from stand_runtime.randomness import RandomStream
from stand_runtime.trees.draft import Draft, DraftBuilder

SIZES = (1, 2, 4, 8, 16, 32, 64)


def linear(a: float, b: float):
    return lambda tokens: a + b * tokens


def test_padded_allocation_fills_rows_up_to_the_common_width_for_free():
    """t(tokens) = 1 + 0.1 tokens, two rows. Width 1..5 gives expected tokens per second
    2/1.2, 2.91/1.4, 3.82/1.6, 4.72/1.8, then no row has more: width 4. The weak row (P = 0.01) is
    drafted to its end since the confident row's width pays for its slots anyway."""
    chosen = padded_allocation([np.array([0.9, 0.9, 0.9]), np.array([0.01, 0.01])], linear(1.0, 0.1))
    assert chosen.sizes == (3, 2) and chosen.tokens == 8
    assert chosen.expected == pytest.approx(4.72) and chosen.seconds == pytest.approx(1.8)
    assert chosen.rate == pytest.approx(4.72 / 1.8)
    # a row with nothing to draft gets nothing; the others' width is chosen as before (3 rows now)
    # widths: 3/1.3, (3 + 0.9 + 0.5)/1.6 = 2.75, (4.4 + 0.8)/1.9 = 2.74: width 2
    ragged = padded_allocation([np.array([0.9, 0.8, 0.7]), np.zeros(0), np.array([0.5])], linear(1.0, 0.1))
    assert ragged.sizes == (1, 0, 1) and ragged.tokens == 6 and ragged.expected == pytest.approx(4.4)
    # a forward whose cost doubles per token: nothing pays, every row drafts nothing
    assert padded_allocation([np.array([0.9, 0.9]), np.array([0.5])], linear(0.0, 1.0)).sizes == (0, 0)
    with pytest.raises(StandError, match="at least one row"):
        padded_allocation([], linear(1.0, 0.1))


def test_packed_allocation_spends_the_budget_best_first_over_the_rows():
    """Packed, tokens are the rows' own: 2/1.2, 2.9/1.3, 3.8/1.4, 4.7/1.5, then the best head is the
    weak row's 0.01 (4.71/1.6 is less): the confident row gets its chain, the weak row nothing."""
    rows = [np.array([0.9, 0.9, 0.9]), np.array([0.01, 0.01])]
    packed = packed_allocation(rows, linear(1.0, 0.1))
    assert packed.sizes == (3, 0) and packed.tokens == 5 and packed.expected == pytest.approx(4.7)
    assert packed.rate / padded_allocation(rows, linear(1.0, 0.1)).rate == pytest.approx((4.7 / 1.5) / (4.72 / 1.8))
    # best first across rows: the 0.6 of row 1 comes before row 0's 0.5
    mixed = packed_allocation([np.array([0.7, 0.5, 0.5]), np.array([0.6, 0.1])], linear(1.0, 0.15))
    # 2/1.3, 2.7/1.45, 3.3/1.6, then row 0's 0.5: 3.8/1.75 = 2.171 > 2.0625, row 0's next 0.5: 4.3/1.9 = 2.263,
    # then row 1's 0.1: 4.4/2.05 = 2.146 is less
    assert mixed.sizes == (3, 1) and mixed.tokens == 6


def test_no_row_is_sized_by_its_nodes_after_the_one_decided():
    """Whether row r drafts its node k may depend on its first k candidates' P and on other rows,
    never on its later candidates (whose scores read node k's drawn token): changing them leaves
    the event "n_r >= k" as it was, for the padded, the packed and the one-row rule, on non-monotone
    P and a non-convex cost (where the argmax of the whole curve would look ahead)."""
    rng = np.random.default_rng(3)
    steps = np.array([0.0, 0.05, 0.05, 0.4, 0.4, 0.45, 1.2, 1.2, 1.3] + [1.3 + 0.1 * i for i in range(1, 60)])
    cost = lambda tokens: 1.0 + float(np.interp(tokens, np.arange(len(steps)) * 2.0, steps))
    checked = 0
    for _ in range(60):
        rows = [rng.random(rng.integers(0, 8)) ** 2 for _ in range(3)]
        for rule in (padded_allocation, packed_allocation):
            sizes = rule(rows, cost).sizes
            for r, p in enumerate(rows):
                for k in range(1, len(p) + 1):
                    changed = [q.copy() for q in rows]
                    changed[r][k:] = rng.random(len(p) - k)
                    assert (rule(changed, cost).sizes[r] >= k) == (sizes[r] >= k)
                    checked += 1
        single = np.concatenate([[1.0], 1.0 + np.cumsum(rows[0])])
        n = first_peak(single.__getitem__, cost, len(rows[0]))
        assert 0 <= n <= len(rows[0])
    assert checked > 200


def test_the_dynamic_tree_scores_each_node_by_q_at_its_rank_not_its_drawn_token():
    """A stochastic dynamic tree's root children are drawn in Gumbel order (not q's); each child's
    score is the confidence times q *at its rank*, so the scores follow q's sorted values whatever
    token each draw gave."""
    store = NGramStore(max_n=2)
    for _ in range(3):
        store.update((5,), np.array([1, 2, 3, 4]), np.array([0.4, 0.3, 0.2, 0.1]))
    shuffled = 0
    for seed in range(20):
        draft = best_first_draft(DynamicTree(4, confidence=0.0), store, [5], RandomStream.seeded(seed))
        kids = draft.children[0]
        q = draft.draft_probs[0]
        ranked = np.sort(q)[::-1][: len(kids)] / np.sort(q)[::-1][0]
        assert np.allclose(draft.scores[kids] / draft.scores[kids[0]], ranked)
        shuffled += any(q[draft.slots[c]] != ranked_q for c, ranked_q in zip(kids, np.sort(q)[::-1]))
    assert shuffled > 0, "no draw left q's order: the test proves nothing"


class ScoreIsAcceptance(AcceptanceMap):
    """An acceptance map whose P is the node's score (to drive the allocator with given P)."""

    def estimate(self, scores, copied, table=None):
        return np.asarray(scores, dtype=float)


def chain(root: int, probabilities) -> Draft:
    builder = DraftBuilder(root)
    for i, _ in enumerate(probabilities):
        builder.add(i, 100 + i)
    return builder.build(False, [1.0, *probabilities])


def test_the_value_rule_and_the_allocator_size_by_the_stopping_rule_at_their_call_sites():
    """The stopping property of :func:`test_no_row_is_sized_by_its_nodes_after_the_one_decided`
    through the rule's own entry points (``ValueRule.size_p`` for one sequence, ``BatchAllocator.allocate``
    for a batch of chains), on a real latency model over a stepped profile: whether node k is taken
    never changes when the P after it change. A call site that took the argmax of the whole curve
    instead (reading node k's children, whose scores read node k's draw) breaks it."""
    steps = np.array([0.0, 0.05, 0.05, 0.4, 0.4, 0.45, 1.2, 1.2, 1.3] + [1.3 + 0.1 * i for i in range(1, 80)])
    profile = lambda tokens: 1.0 + float(np.interp(tokens, np.arange(len(steps)), steps))  # noqa: E731

    def one_row(p):
        return ValueRule(LatencyModel(profile, SIZES, observing=False)).size_p(p)

    def batch(rows):
        value = ValueRule(LatencyModel(profile, SIZES, rows=1, observing=False), ScoreIsAcceptance(), batch_allocated=True)
        BatchAllocator(value).allocate([chain(7, p) for p in rows])
        return value.batches[-1]

    rng = np.random.default_rng(21)
    checked = taken = 0
    for _ in range(40):
        rows = [rng.random(int(rng.integers(1, 8))) ** rng.choice([0.5, 1.0, 3.0]) for _ in range(2)]
        n, sizes = one_row(rows[0]), batch(rows)
        taken += n + sum(sizes)
        for r, p in enumerate(rows):
            for k in range(1, len(p) + 1):
                tail = rng.random(int(rng.integers(0, 6)))
                if r == 0:
                    assert (one_row(np.concatenate([p[:k], tail])) >= k) == (n >= k)
                changed = [q.copy() for q in rows]
                changed[r] = np.concatenate([p[:k], tail])
                assert (batch(changed)[r] >= k) == (sizes[r] >= k)
                checked += 1
    assert checked > 150 and taken > 0, "nothing was drafted: the test proves nothing"


def test_a_profile_measured_under_load_is_corrected_within_20_batch_forwards():
    """The profile says 1.13 s for any batch forward and nearly no cost per token (measured under load);
    the machine takes 74 ms + 2 ms per token. Four rows (one with nothing to draft): the first
    allocation drafts far too wide, and after 20 forwards observed at their padded size the width is
    the one the true latency makes best (within 0.5% of its rate)."""
    rows = [0.9 ** np.arange(1, 41), 0.7 ** np.arange(1, 41), 0.4 ** np.arange(1, 11), np.zeros(0)]
    true = linear(0.074, 0.002)
    value = ValueRule(LatencyModel(linear(1.1345, 0.0005), SIZES), ScoreIsAcceptance(), batch_allocated=True)
    value.packing = []
    allocator = BatchAllocator(value)
    drafts = [chain(7, p) for p in rows]
    for _ in range(20):
        sized = allocator.allocate(drafts)
        tokens = len(sized) * max(len(d.tokens) for d in sized)
        value.latency.observe(tokens, true(tokens))

    def true_rate(width):
        return sum(1 + p[: width - 1].sum() for p in rows) / true(len(rows) * width)

    best = max(range(1, 42), key=true_rate)
    widths = [1 + max(sizes) for sizes in value.batches]
    wrong = next(w for w, sizes in zip(widths, value.batches) if any(sizes))
    assert wrong > best + 5 and true_rate(wrong) < 0.97 * true_rate(best)  # steered wrong by the profile
    assert all(true_rate(w) > 0.995 * true_rate(best) for w in widths[-4:]), (widths, best)
    assert value.batches[0] == (0, 0, 0, 0)  # the roots-only forward explored first
    assert all(sizes[3] == 0 for sizes in value.batches) and len(value.packing) >= 15  # recorded when asked


def flat_profile(monkeypatch, slope: float):
    """The latency profile 1 + slope·tokens, and no correction from this machine's forward times and
    no exploring steps (the sizes, and so what these tests enumerate, must not depend on the
    machine's load)."""
    from stand_runtime.target import latency

    monkeypatch.setattr("stand_runtime.sizing.latency_model.LatencyModel.observe", lambda self, tokens, seconds: None)
    monkeypatch.setattr("stand_runtime.sizing.latency_model.LatencyModel.explore", lambda self, tokens=None: False)

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, tuple(1 + slope * s for s in sizes)))


PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4, [5]]




def test_the_first_forward_of_a_decode_is_not_observed(tiny_qwen2, monkeypatch):
    """The latency model learns from every forward of a decode but its first (cold: it made the
    roots-only forward look twice its cost); single sequence and batch alike."""
    seen = []
    monkeypatch.setattr("stand_runtime.sizing.latency_model.LatencyModel.observe",
                        lambda self, tokens, seconds: seen.append(tokens))
    greedy = SamplingParams(temperature=0)
    for batch in (1, 2):
        seen.clear()
        method = Method.parse("stand", "dynamic-auto-6", tiny_qwen2, batch=batch)
        rows = generate_batch(tiny_qwen2, None, PROMPTS[:1], n=batch, method=method, sampling=greedy,
                              max_new_tokens=12, eos_token_ids=[])
        forwards = max(r.stats.target_forwards for r in rows)
        assert forwards > 2 and len(seen) == forwards - 1


def test_the_latency_model_learns_the_whole_step_not_the_forward_alone(tiny_qwen2, monkeypatch):
    """What a step costs in wall time is what the rule trades against its tokens: the time it
    observes includes the host work after the forward (here each row's settle made 20 ms slower)."""
    from stand_runtime.engine.row import DecodeRow
    import time

    seen = []
    monkeypatch.setattr("stand_runtime.sizing.latency_model.LatencyModel.observe",
                        lambda self, tokens, seconds: seen.append(seconds))
    settle = DecodeRow.settle
    monkeypatch.setattr(DecodeRow, "settle", lambda self, *args: (time.sleep(0.02), settle(self, *args))[1])
    method = Method.parse("stand", "dynamic-auto-6", tiny_qwen2, batch=2)
    generate_batch(tiny_qwen2, None, PROMPTS[:1], n=2, method=method, sampling=SamplingParams(temperature=0),
                   max_new_tokens=8, eos_token_ids=[])
    assert seen and min(seen) >= 0.04  # two rows settled in every observed step


def test_batch_allocation_option_is_checked_and_labelled(tiny_qwen2):
    with pytest.raises(StandError, match="allocation must be one of"):
        Method.parse("stand", "dynamic-auto-8").ablated(allocation="rows")
    assert Method.parse("stand", "dynamic-auto-8", tiny_qwen2, batch=2).label == "stand [dynamic-auto-8]"
    assert not SizingSession.for_model(tiny_qwen2).rule(8, 2, batch_allocated=False).batch_allocated
    assert Method.parse("stand", "dynamic-8").label == "stand [dynamic-8]"

