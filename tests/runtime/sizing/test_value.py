"""Value-sized dynamic trees: the expected-value rule, its calibrated acceptance and its latency model."""

from __future__ import annotations

import numpy as np
import pytest

from stand_runtime import (DynamicTree, Method, NGramStore, SamplingParams, SizingSession, StandError, generate,
                           generate_batch)
from stand_runtime.store.drafting import parse_dynamic
from stand_runtime.sizing.latency_model import MIN_OBSERVED, LatencyModel
from stand_runtime.sizing.value import AcceptanceMap, ValueRule, first_peak

SIZES = (1, 2, 4, 8, 16, 32)


class FixedAcceptance(AcceptanceMap):
    """An acceptance map that returns given probabilities (to check the rule's arithmetic)."""

    def __init__(self, probabilities):
        super().__init__()
        self.probabilities = np.asarray(probabilities, dtype=float)

    def estimate(self, scores, copied):
        return self.probabilities[: len(scores)]


def linear(a: float, b: float):
    return lambda tokens: a + b * tokens


def observe(model: LatencyModel, tokens: int, seconds: float, times: int = MIN_OBSERVED) -> None:
    """``times`` forwards of ``tokens`` tokens and ``seconds`` each (default: enough for the size to count)."""
    for _ in range(times):
        model.observe(tokens, seconds)


def test_the_rule_drafts_the_prefix_with_the_most_expected_tokens_per_second():
    acceptance = FixedAcceptance([0.9, 0.5, 0.1, 0.05])
    scores, copied = np.ones(4), np.zeros(4, dtype=bool)
    # t(1 + n) = 1 + 0.1 n: tokens per second 1, 1.9/1.1, 2.4/1.2, 2.5/1.3, 2.55/1.4 -> 2 nodes
    flat = ValueRule(LatencyModel(linear(0.9, 0.1), SIZES), acceptance)
    observe(flat.latency, 1, 1.0)  # the root-only forward seen: no exploring
    assert flat.size(scores, copied) == 2
    # t(1 + n) = 1 + n: no node pays for itself (1.9 / 2 < 1): zero nodes
    steep = ValueRule(LatencyModel(linear(0.0, 1.0), SIZES), acceptance)
    observe(steep.latency, 1, 1.0)
    assert steep.size(scores, copied) == 0
    assert steep.size(np.ones(0), np.zeros(0, dtype=bool)) == 0


def test_a_step_in_the_cost_is_crossed_when_the_nodes_past_it_pay():
    """A profile that rises by a step stopped the first peak at no node although five nodes of P 0.08
    pay; the bounded rule reaches them. A kernel step (3 -> 4 tokens costs 33%, then 4% a token, as
    on the Intel Xeon measured): sure nodes cross it, unsure ones stop before it, where a convex
    minorant priced the step as a ramp and took them."""
    from stand_runtime.sizing.value import bounded_peak_of

    stepped = np.array([1.0, 1.1, 1.2, 1.2, 1.21, 1.22, 1.23])
    profile = lambda tokens: float(np.interp(tokens, np.arange(1, 8), stepped))
    rule = ValueRule(LatencyModel(profile, (1, 2, 4, 8)), FixedAcceptance([0.08] * 6))
    observe(rule.latency, 1, 1.0)
    assert first_peak(lambda n: 1 + 0.08 * n, profile, 6) == 0  # stuck at the step
    assert rule.size(np.ones(6), np.zeros(6, dtype=bool)) == 6
    kernel = np.concatenate([[45.0, 46, 48], 64 + 2.0 * np.arange(16)])  # ms, forwards of 1 .. 19 tokens
    sure = 1.0 + np.concatenate([[0.0], np.cumsum([0.9, 0.85, 0.8, 0.8, 0.75, 0.7, 0.7, 0.6, 0.5, 0.4])])
    unsure = 1.0 + np.concatenate([[0.0], np.cumsum([0.6, 0.5, 0.25, 0.2, 0.15, 0.1, 0.05, 0.05, 0.02, 0.01])])
    assert bounded_peak_of(sure, kernel) == int(np.argmax(sure / kernel[:11])) > 2
    assert bounded_peak_of(unsure, kernel) == int(np.argmax(unsure / kernel[:11])) == 2
    with pytest.raises(ValueError, match="seconds of 18 sizes"):
        bounded_peak_of(sure, kernel[:11])


def test_whether_a_node_is_taken_reads_neither_the_nodes_after_it_nor_their_number():
    """The event n >= k is the same when the candidates after k change in P or in number (how many a
    step offers may depend on node k's draw), on non-monotone P and a stepped cost."""
    from stand_runtime.sizing.value import LOOKAHEAD, bounded_peak_of

    rng = np.random.default_rng(11)
    cost = np.concatenate([[1.0, 1.02, 1.05], 1.35 + 0.03 * np.arange(40)])
    checked = 0
    for _ in range(200):
        p = rng.random(int(rng.integers(1, 12))) ** rng.choice([0.5, 1.0, 3.0])
        gains = 1.0 + np.concatenate([[0.0], np.cumsum(p)])
        n = bounded_peak_of(gains, cost[: len(p) + LOOKAHEAD])
        for k in range(1, len(p) + 1):
            for tail in (np.zeros(0), rng.random(int(rng.integers(1, 10)))):
                changed = np.concatenate([p[:k], tail])
                other = bounded_peak_of(1.0 + np.concatenate([[0.0], np.cumsum(changed)]), cost[: len(changed) + LOOKAHEAD])
                assert (other >= k) == (n >= k)
                checked += 1
    assert checked > 500


def test_the_bounded_peak_is_the_first_peak_on_convex_costs():
    """With falling increments and a convex cost the bounded rule stops where the first peak does (the
    best size); with a look-ahead of one it is the first peak on any curve."""
    from stand_runtime.sizing.value import bounded_peak_of

    rng = np.random.default_rng(5)
    for _ in range(300):
        length = int(rng.integers(0, 20))
        p = np.sort(rng.random(length))[::-1]
        gains = 1.0 + np.concatenate([[0.0], np.cumsum(p)])
        convex = 1.0 + np.cumsum(np.sort(rng.random(length + 8) * 0.2))
        best = int(np.argmax(gains / convex[: length + 1]))
        first = first_peak(gains.__getitem__, lambda tokens: convex[tokens - 1], length)
        assert bounded_peak_of(gains, convex) == first == best
        bumpy = 1.0 + np.cumsum(rng.random(length + 1) * 0.3)
        rough = 1.0 + np.concatenate([[0.0], np.cumsum(rng.random(length))])
        assert bounded_peak_of(rough, bumpy, lookahead=1) == first_peak(rough.__getitem__, lambda t: bumpy[t - 1], length)
    with pytest.raises(ValueError, match="lookahead"):
        bounded_peak_of(np.ones(3), np.ones(3), lookahead=0)


def test_the_one_pass_rule_with_a_lookahead_of_one_is_the_first_peak():
    """bounded_peak_of with a look-ahead of one equals :func:`first_peak` on random, non-monotone
    curves (NaN included)."""
    from stand_runtime.sizing.value import bounded_peak_of

    rng = np.random.default_rng(3)
    for _ in range(300):
        length = int(rng.integers(0, 12))
        gains = 1.0 + np.concatenate([[0.0], np.cumsum(rng.random(length) * (rng.random(length) < 0.8))])
        seconds = 1.0 + np.cumsum(rng.random(length + 1) * 0.3)
        if rng.random() < 0.1 and length:
            gains[int(rng.integers(1, length + 1))] = np.nan
        expected = first_peak(gains.__getitem__, lambda tokens: seconds[tokens - 1], length)
        assert bounded_peak_of(gains, seconds, lookahead=1) == expected


def test_the_acceptance_map_learns_the_observed_rate_and_stays_monotone():
    rng = np.random.default_rng(0)
    learned = AcceptanceMap()
    assert learned.estimate(np.array([0.5]), np.array([False]))[0] == pytest.approx(10 ** -0.1875, rel=1e-9)  # root of its bin's centre
    for _ in range(200):
        scores = np.full(10, 0.5)
        learned.observe(scores, np.zeros(10, dtype=bool), rng.random(10) < 0.2)
    assert learned.estimate(np.array([0.5]), np.array([False]))[0] == pytest.approx(0.2, abs=0.03)
    table = learned.table()
    assert np.all(np.diff(table, axis=1) >= 0)  # a higher score never gets a lower estimate
    assert learned.estimate(np.array([0.5]), np.array([True]))[0] == pytest.approx(10 ** -0.1875)  # copied: apart


def test_a_latency_profile_measured_under_load_is_corrected_within_20_steps():
    """The profile said 1135 ms for one token and a flat curve (measured under load); the machine
    takes 76 ms + 2.6% per token. The rule first explores the root-only forward (on consecutive
    steps until it is observed, not every 4th), then drafts every node, then, having observed the root-only forward and its own,
    the size plain arithmetic on the true latency gives."""
    probabilities = 0.8 ** np.arange(1, 41)
    true = linear(0.074, 0.002)
    loaded = ValueRule(LatencyModel(linear(1.1345, 0.0005), SIZES), FixedAcceptance(probabilities))
    scores, copied = np.ones(40), np.zeros(40, dtype=bool)
    gains = 1.0 + np.concatenate([[0.0], np.cumsum(probabilities)])
    best = int(np.argmax(gains / np.array([true(1 + n) for n in range(41)])))
    for _ in range(20):
        n = loaded.size(scores, copied)
        loaded.latency.observe(1 + n, true(1 + n))
    rate = gains / np.array([true(1 + n) for n in range(41)])
    assert loaded.sizes[:MIN_OBSERVED] == [0] * MIN_OBSERVED  # the root-only forward observed first, at once
    wrong = [n for n in loaded.sizes if n > best + 5]
    before, after = loaded.sizes[MIN_OBSERVED], loaded.sizes[-4:]
    assert before > best + 5 and rate[before] < 0.97 * rate[best]  # steered wrong by the loaded profile
    assert len(wrong) <= MIN_OBSERVED, loaded.sizes  # until its own forward is observed enough to count
    assert all(rate[n] > 0.995 * rate[best] for n in after), (loaded.sizes, best)  # then right


def test_timing_noise_within_the_tolerance_leaves_the_profile_as_measured():
    """Forwards 0.7-1.0 times the profile at every size (a quiet run: the machine faster than when the
    profile was measured, and noisy) leave the profile's shape standing exactly, so the rule's sizes do
    not read the noise; a size 3 times dearer than the rest (beyond :data:`TOLERANCE`), or every size 5
    times its profile (beyond :data:`SCALE_TOLERANCE`), corrects it."""
    from stand_runtime.sizing.latency_model import DEPARTURE_OBSERVED, SCALE_TOLERANCE, TOLERANCE

    profile = linear(1.0, 0.05)
    rng = np.random.default_rng(0)
    quiet = LatencyModel(profile, SIZES)
    for tokens in rng.choice([1, 2, 3, 4, 6, 8], size=200):
        quiet.observe(int(tokens), profile(tokens) * rng.uniform(0.7, 1.0))
    assert 1.0 / 0.7 < TOLERANCE and 5.0 > SCALE_TOLERANCE and all(quiet.ratio(t) == 1.0 for t in range(1, 40))
    assert quiet.at(5) == profile(5)
    observe(quiet, 16, 3 * 0.85 * profile(16))  # 3 forwards: too few to tell a departure from pauses
    assert quiet.ratio(16) == 1.0
    observe(quiet, 16, 3 * 0.85 * profile(16), DEPARTURE_OBSERVED)  # beyond the tolerance: the ratios correct it
    assert quiet.ratio(16) == pytest.approx(3 * 0.85, rel=0.01) and quiet.ratio(4) < 1.0
    loaded = LatencyModel(profile, SIZES)  # the right shape, 5 times the cost: not the machine profiled
    for tokens in (1, 4, 8):
        observe(loaded, tokens, 5 * profile(tokens))
    assert loaded.ratio(2) == pytest.approx(5.0)


def test_a_seeded_value_sized_decode_repeats_token_for_token_under_timing_noise(tiny_qwen2, monkeypatch):
    """The same seed gives the same text twice although every step's measured time differs between
    the runs (by up to 30%, within the latency model's tolerance): the sizes read the profile and the
    draws, not the noise. One sequence and a batch of 2 rows."""
    from stand_runtime.target import latency

    profile = latency.LatencyProfile(tuple(range(1, 33)), tuple(1.0 + 0.08 * n for n in range(1, 33)))
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency", lambda model, name: profile)
    observed = LatencyModel.observe
    prompt, params = [3, 1, 4, 1, 5, 9, 2, 6] * 3, SamplingParams(temperature=0.8, top_p=0.95)

    def run(noise: int, batch: int):
        rng = np.random.default_rng(noise)
        monkeypatch.setattr(LatencyModel, "observe", lambda self, tokens, seconds: observed(
            self, tokens, self.profile(tokens) * rng.uniform(0.7, 0.91)))
        method, sizing = Method.parse("stand", "dynamic-auto-16", tiny_qwen2, batch=batch), SizingSession.for_model(tiny_qwen2)
        if batch == 1:
            tokens = [generate(tiny_qwen2, None, prompt, method=method, sampling=params, max_new_tokens=40,
                               eos_token_ids=[], seed=11, sizing=sizing).tokens]
        else:
            tokens = [r.tokens for r in generate_batch(tiny_qwen2, None, [prompt], n=batch, method=method,
                                                       sampling=params, max_new_tokens=40, eos_token_ids=[], seed=11,
                                                       sizing=sizing)]
        return tokens, list(sizing.last_rule.sizes)

    for batch in (1, 2):
        (first, sizes), (second, again) = run(1, batch), run(2, batch)
        assert first == second and sizes == again and max(sizes) > 0


def test_a_root_only_forward_observed_long_ago_is_explored_again():
    """The root-only forward, observed slow at the start (a busy moment), then never again because every
    step drafts, stops pricing the drafts after MAX_AGE forwards: the rule explores it once more and
    learns the cost as it is now (4 drafted tokens dearer than none, not cheaper)."""
    from stand_runtime.sizing.latency_model import MAX_AGE, WINDOW

    model = LatencyModel(lambda tokens: 1.0, SIZES, tolerance=1.0)  # flat: every departure counts
    observe(model, 1, 0.040)  # under load: slower than any later forward
    observe(model, 5, 0.036, MAX_AGE - MIN_OBSERVED)
    assert not model.explore() and model.at(1) > model.at(5)  # drafting looks cheaper than not drafting
    model.observe(5, 0.036)
    assert model.explore() and model.observed(1) < MIN_OBSERVED  # aged out: asks for the root-only forward
    observe(model, 1, 0.032)
    assert not model.explore() and model.at(1) == pytest.approx(0.032) and model.at(5) == pytest.approx(0.036)
    assert model.observed(1) == MIN_OBSERVED and model.observed(5) == WINDOW  # the window per size as before


class ScoreIsAcceptance(AcceptanceMap):
    """P = the node's score (drawn and copied alike), to follow the candidates' order by hand."""

    def estimate(self, scores, copied, table=None):
        return np.asarray(scores, dtype=float)


def test_the_copy_chain_competes_for_the_budget_by_its_value():
    """Drawn nodes (keys 0.9, 0.3, 0.2) and a pending chain 10, 20, 21 (scores 0.5, 0.25, 0.125 with a
    copy rate of 0.5) are taken in one order by P; the chain's first token follows the drawn child that
    equals it, the next hangs under it as a copied node scored by its chain position (the rate kept, so
    the outcome is learned at the score it was sized by)."""
    from stand_runtime.sizing.value import candidates, value_scores
    from stand_runtime.trees.draft import DraftBuilder

    builder = DraftBuilder(7)
    builder.set_distribution(0, np.array([10, 11]), np.array([0.7, 0.3]))
    builder.add(0, 10, 0), builder.add(0, 11, 1)
    builder.set_distribution(1, np.array([12]), np.array([1.0]))
    builder.add(1, 12, 0)
    draft = builder.build(True, [1.0, 0.9, 0.3, 0.2])
    draft = type(draft)(**{**draft.__dict__, "pending_chain": (10, 20, 21), "copy_rate": 0.5, "_mask": []})
    found = candidates(draft, ScoreIsAcceptance())
    assert np.allclose(found.p, [0.9, 0.5, 0.3, 0.25, 0.2, 0.125])
    assert found.from_chain.tolist() == [False, True, False, True, False, True]
    four, predicted = found.realize(4)
    assert four.tokens == [7, 10, 11, 20] and four.parents.tolist() == [-1, 0, 0, 1] and four.copied == {3}
    assert np.allclose(four.scores, [1.0, 0.9, 0.3, 0.5 ** 2]) and np.allclose(predicted, [0.9, 0.3, 0.25])
    assert four.copy_rate == 0.5 and np.allclose(value_scores(four), [0.9, 0.3, 0.25])
    # 12 was cut, so node 1 drew no children: 20 hangs there alone, verified as a deterministic draft
    assert four.children[1] == [3] and four.draft_ids[1] is None and four.slots[3] == -1 and not four.pending_chain
    everything, _ = found.realize(6)
    assert everything.tokens == [7, 10, 11, 12, 20, 21] and everything.children[1] == [3, 4]  # drawn first
    assert everything.draft_ids[1].tolist() == [12, 20] and everything.draft_probs[1].tolist() == [1.0, 0.0]
    one, predicted = found.realize(1)
    assert one.tokens == [7, 10] and not one.copied and not one.pending_chain and np.allclose(predicted, [0.9])
    assert found.realize(0)[0].tokens == [7]
    assert candidates(draft, ScoreIsAcceptance(), limit=3).p.tolist() == [0.9, 0.5, 0.3]


def test_dynamic_auto_specs_parse_and_need_the_model():
    assert parse_dynamic("dynamic-auto") == DynamicTree(80, sized=True)
    assert parse_dynamic("dynamic-auto-24") == DynamicTree(24, sized=True)
    assert DynamicTree(24, sized=True).name == "dynamic-auto-24"
    with pytest.raises(StandError, match="write dynamic"):
        parse_dynamic("dynamic-auto-x")
    assert Method.parse("stand", "dynamic-auto") == Method("stand", DynamicTree(80, sized=True))  # no model read
    with pytest.raises(StandError, match="a value rule goes with"):
        Method("stand", DynamicTree(8, sized=True)).drafter(None, None, SamplingParams(), 16)




def test_a_step_drafts_only_as_far_as_recent_steps_kept():
    """The rule's draft budget: the whole tree before any sized step, then twice the largest size of
    the last 8 sized forwards plus 2 (room to double), never above the tree; exploring steps (which
    draft nothing to observe the root-only forward) are not counted."""
    from stand_runtime.sizing.value import GROWTH, RECENT, SLACK

    rule = ValueRule(LatencyModel(linear(0.9, 0.1), SIZES), FixedAcceptance([0.9, 0.8, 0.7, 0.2, 0.01]))
    assert rule.budget(80) == 80
    assert rule.size(np.ones(5), np.zeros(5, dtype=bool)) == 0 and rule.budget(80) == 80  # explored: not counted
    rule.chose(1), rule.chose(3)
    assert rule.budget(80) == GROWTH * 3 + SLACK and rule.budget(5) == 5
    for _ in range(RECENT):
        rule.chose(0)
    assert rule.budget(80) == SLACK


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("stochastic", [False, True])
def test_a_budgeted_best_first_draft_is_the_prefix_of_the_full_one(native, stochastic):
    """A dynamic tree drafted with a smaller node budget is the first nodes of the full budget's
    best-first order (same tokens, parents, scores, same noise for them): the budget only stops it
    early, so cutting it by past steps' sizes leaves the drafts a lossless prefix."""
    from stand_runtime.store.drafting import best_first_draft
    from stand_runtime.randomness import RandomStream
    from stand_runtime.store.native_store import NativeNGramStore
    from stand_runtime.trees.draft import truncate_draft

    rng = np.random.default_rng(0)
    store = (NativeNGramStore if native else NGramStore)(max_n=8)
    tokens = rng.integers(0, 12, 300).tolist()
    for i in range(3, len(tokens)):
        ids = rng.choice(40, 5, replace=False)
        store.update(tokens[max(0, i - 8): i], ids, np.sort(rng.dirichlet(np.ones(5)))[::-1])
    context = tokens[:40]
    for small in (1, 3, 9):
        full = best_first_draft(DynamicTree(40), store, context, RandomStream.seeded(5) if stochastic else None)
        cut = best_first_draft(DynamicTree(small), store, context, RandomStream.seeded(5) if stochastic else None)
        prefix = truncate_draft(full, cut.num_nodes)
        assert full.num_nodes > small and cut.num_nodes == small
        for field in ("tokens", "parents", "scores", "depths"):
            assert np.array_equal(np.asarray(getattr(cut, field)), np.asarray(getattr(prefix, field))), field


@pytest.mark.parametrize("nodes", [16, 1024])
def test_the_copy_chain_takes_none_of_the_drawn_nodes_budget(nodes):
    """A value-sized tree drafts its budgeted drawn nodes beside the copy chain (cut to the tree's size):
    a chain as long as a small tree leaves it all its drawn nodes, and the largest tree stays within the
    dynamic tree's bound (the rule then keeps the best ``nodes`` of both)."""
    from stand_runtime.store.drafting import MAX_DYNAMIC_NODES, best_first_draft
    from stand_runtime.randomness import RandomStream
    from stand_runtime.target import latency

    flat = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128, 1024, 2048), (1.0,) * 10)
    sequence = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 4
    method = Method.parse("stand", f"dynamic-auto-{nodes}")
    store = method.new_memory(50)
    for i in range(len(sequence) - 1):
        store.update(sequence[max(0, i - 7): i + 1], [sequence[i + 1]], [1.0])
    value = SizingSession(flat, measured_here=False).rule(nodes)
    drafter = method.drafter(store, RandomStream.seeded(0), SamplingParams(), 50, value=value)
    request = drafter.batch_request(list(sequence), 100)
    chain = min(nodes, method.copy_tokens)
    assert request[5] is None and request[0].num_nodes == min(nodes, MAX_DYNAMIC_NODES - chain)  # drawn only
    draft = best_first_draft(*request)
    assert draft.num_nodes == request[0].num_nodes and not draft.copied
    sized = drafter.batch_drafted(draft)
    assert sized.num_nodes <= nodes and len(drafter._chain) == chain  # the chain pending beside the drawn nodes




def vectorised_bounded_peak(gains, seconds, lookahead):
    """The stopping rule of :func:`stand_runtime.sizing.value.bounded_peak_of` over whole arrays (its
    first implementation, kept as the reference): every node's bound over the sizes ahead at once."""
    gains = np.asarray(gains, dtype=np.float64)
    length = len(gains) - 1
    if length <= 0:
        return 0
    cost = np.asarray(seconds, dtype=np.float64)
    best_before = np.maximum.accumulate(gains / cost[: length + 1])[:-1]
    step = np.diff(gains)
    previous = np.concatenate([step[:1], step[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        decay = np.clip(np.where(previous > 0, step / previous, 1.0), 0.0, 1.0)
    ahead = np.arange(lookahead)
    added = step[:, None] * np.cumsum(decay[:, None] ** ahead[None, :], axis=1)
    size = np.arange(1, length + 1)[:, None] + ahead[None, :]
    bound = ((gains[:-1, None] + added) / cost[size]).max(axis=1)
    stops = np.flatnonzero(~(bound > best_before))
    return int(stops[0]) if len(stops) else length


def test_the_node_by_node_rule_equals_the_vectorised_reference():
    """bounded_peak_of (node by node, early exit) equals the whole-array version on random curves:
    falling, rising and non-monotone P, stepped and bumpy costs, NaN gains, look-aheads 1-10."""
    from stand_runtime.sizing.value import bounded_peak_of

    rng = np.random.default_rng(5)
    for trial in range(3000):
        length = int(rng.integers(0, 30))
        lookahead = int(rng.integers(1, 11))
        p = rng.random(length) ** rng.choice([0.3, 1.0, 4.0])
        if trial % 3 == 0:
            p = np.sort(p)[::-1]
        gains = float(rng.integers(1, 9)) + np.concatenate([[0.0], np.cumsum(p)])
        if trial % 50 == 0 and length:
            gains[int(rng.integers(1, length + 1))] = np.nan
        base = np.cumsum(rng.random(length + lookahead) * rng.choice([0.01, 0.1, 1.0])) + 1.0
        if trial % 4 == 0:
            base[int(rng.integers(0, length + lookahead)):] *= 1.3  # a kernel step
        seconds = base if trial % 5 else base + rng.normal(0, 0.05, len(base))  # a bumpy profile
        assert bounded_peak_of(gains, seconds, lookahead) == vectorised_bounded_peak(gains, seconds, lookahead), trial
