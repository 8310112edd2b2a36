"""Chains for vLLM without vLLM: the blended chain's scores and kinds, the fallback store, the batch-wide
allocation of chain positions, and the exact law of per-request chain lengths cut by the rule."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest

import stand_runtime.drafters.chain as chain_module
import stand_runtime.target.sampling as sampling_module
from stand_runtime import NGramStore, StandError
from stand_runtime.store.drafting import COPY_DECAY
from stand_runtime.sizing.value import match_rate
from stand_runtime.drafters.chain import COPIED, FALLBACK, OWN, ChainCursor
from stand_runtime.drafters.suffix_index import MAX_MATCH, SuffixIndex, repeated
from stand_runtime.drafters.chain_budget import PLAIN_OBSERVED, ChainBudget, profile_function
from stand_runtime.sizing.latency_model import LatencyModel
from stand_runtime.sizing.value import AcceptanceMap
from stand_runtime.randomness import RandomStream
from stand_runtime.trees.draft import DraftBuilder
from stand_runtime.verify import verify_sampling


class ScoreIsP(AcceptanceMap):
    """P(path accepted) = the position's score (to check the allocation's arithmetic)."""

    def estimator(self):
        return lambda score, kind: float(score)


def budget(seconds, rows=(1, 2, 3, 4)):
    """A budget whose forward over T tokens takes ``seconds(T)``, the plain forwards at ``rows`` observed."""
    rule = ChainBudget(LatencyModel(seconds, (1, 2, 4, 8, 16, 32, 64)), ScoreIsP(kinds=3))
    for size in rows:
        for _ in range(PLAIN_OBSERVED):
            rule.observe_forward(size, seconds(size))
    return rule


class Offers:
    """A stand-in chain: fixed scores, offered one at a time."""

    def __init__(self, scores, kind=OWN):
        self.scores, self.kind = list(scores), kind
        self.limit = len(self.scores)
        self.draft = []

    def peek(self):
        return (self.scores[len(self.draft)], self.kind) if len(self.draft) < self.limit else None

    def take(self):
        self.draft.append(self.scores[len(self.draft)])


# --- the blended chain ----------------------------------------------------------------------------

def test_a_position_is_offered_with_q_at_rank_and_the_running_score_takes_the_draw():
    store = NGramStore(top_k=10, max_n=2)
    for _ in range(3):
        store.update([7], [1, 2], [0.6, 0.4])
        store.update([1], [3], [1.0])
        store.update([2], [3, 4], [0.5, 0.5])
    first = store.blend([7])
    w = first.count / (first.count + 1)
    seen = set()
    for seed in range(40):
        cursor = ChainCursor(store, [7], 3, RandomStream.seeded(seed))
        score, kind = cursor.peek()
        assert kind == OWN and score == pytest.approx(w * first.prob_list[0])  # the same whatever is drawn next
        token = cursor.take()
        seen.add(token)
        after = store.blend([7, token])
        drawn = w * first.prob_list[first.id_list.index(token)]
        if after.count == 0:  # a token the blend's 0-gram table offered (3 or 4): no context follows it
            assert cursor.peek() is None
            continue
        score, _ = cursor.peek()
        assert score == pytest.approx(drawn * after.count / (after.count + 1) * after.prob_list[0])
    assert {1, 2} <= seen, "both tokens were drawn: the offer did not depend on the draw"


def test_own_store_then_copy_then_fallback_and_the_end():
    own, shared = NGramStore(max_n=3), NGramStore(max_n=3)
    own.update([5], [6], [1.0])
    shared.update([9], [4], [1.0])
    shared.update([6], [8], [1.0])  # the fallback also knows 6 -> 8: read only where own and copy have nothing
    cursor = ChainCursor(own, [1, 5], 6, None, copy=[6, 7, 9], fallback=shared)
    while cursor.peek() is not None:
        cursor.take()
    draft = cursor.draft
    assert draft.tokens == [6, 7, 9, 4] and draft.kinds == [OWN, COPIED, COPIED, FALLBACK]
    assert draft.support[1] is None and draft.support[3][0].tolist() == [4, 8]
    assert draft.scores[2] == pytest.approx(draft.scores[1] * COPY_DECAY), "a copied position decays the running score"
    # without the fallback store the chain ends where the copy does; an empty store and no copy: no chain
    alone = ChainCursor(own, [1, 5], 6, None, copy=[6, 7, 9])
    while alone.peek() is not None:
        alone.take()
    assert alone.draft.tokens == [6, 7, 9]
    assert ChainCursor(NGramStore(), [3], 4, None).peek() is None
    with pytest.raises(IndexError, match="the chain has ended"):
        ChainCursor(NGramStore(), [3], 4, None).take()


def test_the_surer_of_own_store_and_copy_drafts_a_position_both_cover():
    """With an acceptance estimate, a position the own store and the copy chain both cover is drafted
    by the higher estimated P (fixed before any draw); without one the own store goes first."""
    own = NGramStore(max_n=3)
    own.update([5], [6], [1.0])
    own.update([7], [9], [1.0])
    trust_copy = lambda score, kind: 0.9 if kind == COPIED else 0.2
    trust_own = lambda score, kind: 0.9 if kind == OWN else 0.2
    drafts = []
    for estimate in (trust_copy, trust_own, None):
        cursor = ChainCursor(own, [1, 5], 3, None, copy=[7, 9, 4], estimate=estimate)
        while cursor.peek() is not None:
            cursor.take()
        drafts.append(cursor.draft)
    assert drafts[0].tokens == [7, 9, 4] and drafts[0].kinds == [COPIED, COPIED, COPIED]
    assert drafts[0].scores == pytest.approx([COPY_DECAY, COPY_DECAY ** 2, COPY_DECAY ** 3])
    assert drafts[1].tokens == [6] and drafts[1].kinds == [OWN]  # 6 leaves the copy; nothing knows 5 6
    assert drafts[2].tokens == drafts[1].tokens


def test_a_longer_copy_match_scores_its_copied_positions_higher():
    """The copy index reports the length of the suffix it matched; a chain copied after a longer match
    offers its positions with higher scores (r = 0.8 ** (1 + longest - n))."""
    index = SuffixIndex(8)
    assert index.match([1, 2, 3, 4, 9, 1, 2, 3, 4], 3) == ([9, 1, 2], 4)
    assert index.match([5, 6], 2) == ([], 0) and SuffixIndex(8).match([1, 1], 0) == ([], 0)
    assert match_rate(8, 8) == COPY_DECAY and match_rate(4, 8) == pytest.approx(COPY_DECAY ** 5)
    long, short = (ChainCursor(NGramStore(), [1], 2, None, copy=[7, 8], copy_rate=match_rate(n, 8)) for n in (8, 1))
    for cursor in (long, short):
        while cursor.peek() is not None:
            cursor.take()
    assert long.draft.tokens == short.draft.tokens == [7, 8]
    assert long.draft.scores == pytest.approx([0.8, 0.64]) and short.draft.scores == pytest.approx([0.8 ** 8, 0.8 ** 16])


def test_a_long_repeated_span_is_measured_and_its_copy_continues_as_a_repeat():
    """Asked for (``longest``), the index extends a match of its longest n-gram backward by comparison:
    a span repeated 12 tokens is told from one of 8 and scored with a slower decay; a chain the
    sequence's end cut continues as an overlapping copy of itself."""
    period = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    sequence = [0] + period * 2
    assert SuffixIndex(8).match(sequence, 20) == (period, 8)
    assert SuffixIndex(8, MAX_MATCH).match(sequence, 20) == (period, 12)
    assert SuffixIndex(8, 10).match(sequence, 20)[1] == 10  # at most `longest`
    assert SuffixIndex(8, MAX_MATCH).match([1, 2, 3, 9, 1, 2, 3], 4) == ([9, 1, 2, 3], 3)  # shorter: as before
    assert repeated(period[:3], 7) == [1, 2, 3, 1, 2, 3, 1] and repeated(period, 5) == period and repeated([], 4) == []
    assert match_rate(12, 8) == pytest.approx(COPY_DECAY ** (8 / 12)) and match_rate(64, 8) > match_rate(12, 8)
    assert match_rate(9, 8) > match_rate(8, 8) == COPY_DECAY  # no step down where the measured match begins


def test_a_zero_gram_answer_is_no_match():
    """The blend's 0-gram table answers every context of a non-empty store; a chain treats that as
    nothing matched (count 0: confidence 0) and goes on to the copy chain or ends."""
    store = NGramStore(max_n=3)
    store.update([5], [6], [1.0])
    assert store.blend([2]).count == 0
    assert ChainCursor(store, [2], 3, None).peek() is None
    assert ChainCursor(store, [2], 3, None, copy=[5]).peek() == (COPY_DECAY, COPIED)


# --- the allocation -------------------------------------------------------------------------------

def test_positions_go_best_first_across_requests_while_they_pay():
    """t(T) = 1 + T/4, two requests: A's positions score 0.9, 0.8, 0.7, 0.3, B's 0.65, 0.2. Taking
    the best offer while the rate (2 + Σ P) / t(2 + n) rises drafts A 0.9, 0.8, 0.7, then B 0.65;
    then neither 0.3 nor 0.2 pays (by hand: 2/1.5 = 1.333, 2.9/1.75 = 1.657, 3.7/2 = 1.85,
    4.4/2.25 = 1.956, 5.05/2.5 = 2.02, then 5.35/2.75 = 1.945 and 5.55/3 = 1.85)."""
    rule = budget(lambda t: 1 + t / 4)
    a, b = Offers([0.9, 0.8, 0.7, 0.3]), Offers([0.65, 0.2])
    assert rule.allocate([a, None, b], rows=2) == [3, 0, 1]
    assert a.draft == [0.9, 0.8, 0.7] and b.draft == [0.65]


def test_zero_positions_where_nothing_pays_and_all_where_forwards_are_free():
    steep = budget(lambda t: float(t))  # each token costs a whole plain forward: P < 1 never pays
    chains = [Offers([0.95, 0.9]), Offers([0.99])]
    assert steep.allocate(chains, rows=2) == [0, 0]
    flat = budget(lambda t: 1.0)
    chains = [Offers([0.3, 0.01]), Offers([0.001])]
    assert flat.allocate(chains, rows=2) == [2, 1]
    assert flat.allocate([None, Offers([])], rows=2) == [0, 0]


def test_a_later_cheaper_step_is_looked_ahead_across_requests_only():
    """One position alone does not pay (t jumps at 3 tokens, then stays flat), two offered together
    do: the look-ahead reads the other requests' offers, which are known before any draw."""
    jump = budget(lambda t: 1.0 if t <= 2 else 1.5)
    assert jump.allocate([Offers([0.8]), Offers([0.8])], rows=2) == [1, 1]  # 3.6/1.5 > 2/1 > 2.8/1.5
    assert jump.allocate([Offers([0.8, 0.8]), None], rows=2) == [0, 0]  # its own next position is not known yet


def test_the_plain_and_a_long_forward_are_observed_before_the_rule_alone_drafts():
    """t(T) = T tokens: the rule alone drafts nothing. Until the plain forward (1 token) and one of at
    least twice its tokens are observed (3 times each), every 4th step drafts nothing (phase 0) and
    every 4th step (phase 2) drafts the best offered positions, one per request in all (a forward of
    twice the plain one's tokens: a 16-request batch drafting every position was 8x a plain step), so
    the model sees the curve's shape."""
    rule = ChainBudget(LatencyModel(lambda t: float(t), (1, 2, 4, 8)), ScoreIsP(kinds=3))
    assert [rule.allocate([Offers([0.9, 0.9])], rows=1) for _ in range(4)] == [[0], [0], [1], [0]]
    two = [Offers([0.5, 0.4]), Offers([0.9, 0.8, 0.7]), None]
    explorer = ChainBudget(LatencyModel(lambda t: float(t), (1, 2, 4, 8)), ScoreIsP(kinds=3))
    for _ in range(PLAIN_OBSERVED):
        explorer.observe_forward(2, 2.0)
    assert [explorer.allocate(two, rows=2) for _ in range(3)][-1] == [0, 2, 0], "the best two: 0.9, 0.8"
    assert rule.explored == 2
    for tokens in (1, 1, 1, 3, 3, 3):
        rule.observe_forward(tokens, float(tokens))
    assert all(rule.allocate([Offers([0.9, 0.9])], rows=1) == [0] for _ in range(8))
    assert rule.explored == 2 and rule.stats()["forwards_observed"] == 6


def test_a_rule_that_stopped_drafting_explores_a_longer_forward_again():
    """A rule that drafts nothing (t(T) = T: no position pays) sees only plain forwards; after MAX_AGE
    of them its longer forwards' observations are gone, and a phase-2 step drafts the best position
    again, so a forward that became cheaper (a busy moment passed) can be learned as it is now."""
    from stand_runtime.sizing.latency_model import MAX_AGE

    rule = ChainBudget(LatencyModel(lambda t: float(t), (1, 2, 4, 8)), ScoreIsP(kinds=3))
    for tokens in (1, 1, 1, 3, 3, 3):
        rule.observe_forward(tokens, float(tokens))
    assert all(rule.allocate([Offers([0.9, 0.9])], rows=1) == [0] for _ in range(8))
    for _ in range(MAX_AGE - 3):  # forwards 6 .. 514: the first 3-token one (forward 3) is 512 old at the next
        rule.observe_forward(1, 1.0)
    assert all(rule.allocate([Offers([0.9, 0.9])], rows=1) == [0] for _ in range(4)), "the 3-token forwards count"
    rule.observe_forward(1, 1.0)
    assert [rule.allocate([Offers([0.9, 0.9])], rows=1) for _ in range(4)] == [[0], [0], [1], [0]]


def test_one_slow_plain_forward_is_outvoted_before_the_rule_drafts_alone():
    """The plain forward is seen only while exploring (the rule drafts from then on), so one slow
    one (a cold first forward) must not set its cost: the rule keeps exploring it until a third
    observation, whose median restores the allocation of the true curve."""
    seconds = lambda t: 1 + t / 4  # noqa: E731
    rule = budget(seconds, rows=(3, 4))
    rule.observe_forward(2, 10 * seconds(2))  # cold: 10x
    rule.observe_forward(2, seconds(2))
    assert rule.allocate([Offers([0.9]), None, Offers([0.65])], rows=2) == [0, 0, 0], "still exploring"
    rule.observe_forward(2, seconds(2))
    for _ in range(3):
        rule.allocate([None], rows=2)  # the steps to the next exploring phase draft nothing here
    a, b = Offers([0.9, 0.8, 0.7, 0.3]), Offers([0.65, 0.2])
    assert rule.allocate([a, None, b], rows=2) == [3, 0, 1]


def test_outcomes_teach_the_acceptance_map_per_kind():
    rule = ChainBudget()
    for _ in range(100):
        rule.observe_outcome([0.5, 0.5, 0.5], [OWN, OWN, FALLBACK], accepted=1)
    table = rule.acceptance.table()
    bin_ = int(np.searchsorted(np.logspace(-4, 0, 17), 0.5, side="right") - 1)
    assert table[OWN, bin_] == pytest.approx((100 + 8 * 0.65) / 208, abs=0.02)  # half the own positions accepted
    # the fallback's positions were never accepted: far below its seed (0.65), pooled with the bins below it
    assert table[FALLBACK, bin_] < 0.15 and table[COPIED, bin_] == pytest.approx(10 ** -0.1875)


def test_profile_points_interpolate_and_bad_points_say_one_line():
    at = profile_function([1, 4, 8], [0.1, 0.13, 0.2])
    assert at(2) == pytest.approx(0.11) and at(16) == pytest.approx(0.34)
    for sizes, seconds, message in (([], [], "non-empty"), ([1, 1], [0.1, 0.2], "increasing integers"),
                                    ([1, 2], [0.1, -1.0], "finite and positive"), ([1.5], [0.1], "integers"),
                                    ("ab", [0.1, 0.2], "sizes and seconds")):
        with pytest.raises(StandError, match=message):
            profile_function(sizes, seconds)


# --- losslessness: the exact law with per-request lengths -----------------------------------------

P = {0: [0.4, 0.6], 1: [0.7, 0.3]}
"""The target: p of the next token given the last one (vocabulary 0, 1)."""


def _store(observations):
    store = NGramStore(top_k=10, max_n=1, reserve=0)
    for last, probs, times in observations:
        for _ in range(times):
            store.update([last], [0, 1], probs)
    return store


def _draw_from_q(log_q, m, randomness, depth=0, ids=None):
    """Gumbel-Top-1 in law (one draw from q), through ``sample_index`` so that :func:`draw_law` enumerates it."""
    return [sampling_module.sample_index(np.exp(log_q), 0.5)]


class PeekingCursor(ChainCursor):
    """A wrong chain: its offer reads the token it will draw (q of the draw, not q at rank)."""

    def _look(self):
        found = super()._look()
        if found is None or found[2] is None:
            return found
        _, kind, entry, weight = found
        self._slot = _draw_from_q(entry.log_q, 1, None)[0]
        return self._running * weight * entry.prob_list[self._slot], kind, entry, weight

    def take(self):
        with patch.object(chain_module, "choose_children", lambda log_q, m, *rest: [self._slot]):
            return super().take()


def _one_step(cursor_class, stores, contexts, lengths):
    """Two requests: chains cut by the batch rule (t(T) = 1 + T/10), each verified against P, then
    plain sampling up to two tokens; the result is both requests' first two tokens."""
    rule = budget(lambda t: 1.0 + 0.1 * t)
    cursors = [cursor_class(store, context, 2, RandomStream.seeded(0)) for store, context in zip(stores, contexts)]
    rule.allocate(cursors, rows=2)
    lengths.add(tuple(len(c.draft) for c in cursors))
    out = []
    for cursor, context in zip(cursors, contexts):
        builder, node = DraftBuilder(context[-1]), 0
        for token, (ids, q) in zip(cursor.draft.tokens, cursor.draft.support):
            builder.set_distribution(node, ids, q)
            node = builder.add(node, token, int(np.flatnonzero(ids == token)[0]))
        draft = builder.build(stochastic=True)
        outcome = verify_sampling(draft, lambda n: np.array(P[draft.tokens[n]]), RandomStream.seeded(1))
        tokens = [draft.tokens[n] for n in outcome.accepted] + [outcome.token]
        while len(tokens) < 2:
            tokens.append(sampling_module.sample_index(np.array(P[tokens[-1]]), 0.5))
        out.append(tuple(tokens[:2]))
    return tuple(out)

