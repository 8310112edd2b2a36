"""Value-sized dynamic trees: the expected-value rule, its calibrated acceptance and its latency model."""

from __future__ import annotations

import numpy as np
import pytest

from stand_runtime import DynamicTree, Method, NGramStore, SamplingParams, StandError, generate
from stand_runtime.drafters.best_first import parse_dynamic
from stand_runtime.drafters.value import AcceptanceMap, LatencyModel, ValueRule

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


def test_the_rule_drafts_the_prefix_with_the_most_expected_tokens_per_second():
    acceptance = FixedAcceptance([0.9, 0.5, 0.1, 0.05])
    scores, copied = np.ones(4), np.zeros(4, dtype=bool)
    # t(1 + n) = 1 + 0.1 n: tokens per second 1, 1.9/1.1, 2.4/1.2, 2.5/1.3, 2.55/1.4 -> 2 nodes
    flat = ValueRule(LatencyModel(linear(0.9, 0.1), SIZES), acceptance)
    flat.latency.observe(1, 1.0), flat.latency.observe(1, 1.0)  # the root-only forward seen: no exploring
    assert flat.size(scores, copied) == 2
    # t(1 + n) = 1 + n: no node pays for itself (1.9 / 2 < 1): zero nodes
    steep = ValueRule(LatencyModel(linear(0.0, 1.0), SIZES), acceptance)
    steep.latency.observe(1, 1.0), steep.latency.observe(1, 1.0)
    assert steep.size(scores, copied) == 0
    assert steep.size(np.ones(0), np.zeros(0, dtype=bool)) == 0


def test_the_acceptance_map_learns_the_observed_rate_and_stays_monotone():
    rng = np.random.default_rng(0)
    learned = AcceptanceMap()
    assert learned.estimate(np.array([0.5]), np.array([False]))[0] == pytest.approx(10 ** -0.375, rel=1e-9)  # its bin's centre
    for _ in range(200):
        scores = np.full(10, 0.5)
        learned.observe(scores, np.zeros(10, dtype=bool), rng.random(10) < 0.2)
    assert learned.estimate(np.array([0.5]), np.array([False]))[0] == pytest.approx(0.2, abs=0.03)
    table = learned.table()
    assert np.all(np.diff(table, axis=1) >= 0)  # a higher score never gets a lower estimate
    assert learned.estimate(np.array([0.5]), np.array([True]))[0] == pytest.approx(10 ** -0.375)  # copied: apart


def test_a_latency_profile_measured_under_load_is_corrected_within_20_steps():
    """The profile said 1135 ms for one token and a flat curve (measured under load); the machine
    takes 76 ms + 2.6% per token. The rule first drafts every node, then, having observed the
    root-only forward and its own, the size plain arithmetic on the true latency gives."""
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
    before, after = loaded.sizes[1], loaded.sizes[-4:]
    assert before > best + 5 and rate[before] < 0.97 * rate[best]  # steered wrong by the loaded profile
    assert all(rate[n] > 0.995 * rate[best] for n in after), (loaded.sizes, best)  # then right


def test_dynamic_auto_specs_parse_and_need_the_model():
    assert parse_dynamic("dynamic-auto") == DynamicTree(80, sized=True)
    assert parse_dynamic("dynamic-auto-24") == DynamicTree(24, sized=True)
    assert DynamicTree(24, sized=True).name == "dynamic-auto-24"
    with pytest.raises(StandError, match="write dynamic"):
        parse_dynamic("dynamic-auto-x")
    with pytest.raises(StandError, match="sized from the target's latency"):
        Method.parse("stand", "dynamic-auto")
    with pytest.raises(StandError, match="a value rule goes with"):
        Method("stand", DynamicTree(8, sized=True))


def test_value_sized_drafts_are_lossless_greedy_and_learn(tiny_qwen2, monkeypatch):
    """Greedy decoding with the value-sized tree equals plain decoding token for token; the rule
    keeps its sizes and its acceptance map learns from every verified step."""
    from stand_runtime.target import latency

    flat = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), (1.0,) * 8)
    monkeypatch.setattr("stand_runtime.method.cached_latency", lambda model, name: flat)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    greedy = SamplingParams(temperature=0)
    plain = generate(tiny_qwen2, None, prompt, method="ar", sampling=greedy, max_new_tokens=40, eos_token_ids=[])
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2)
    fast = generate(tiny_qwen2, None, prompt, method=method, sampling=greedy, max_new_tokens=40, eos_token_ids=[],
                    store=NGramStore(max_n=8))
    assert fast.tokens == plain.tokens
    assert fast.stats.target_forwards < 40 and len(method.value.sizes) >= fast.stats.target_forwards - 1
    assert method.value.acceptance._drafted.sum() == sum(fast.stats.drafted_per_step)


@pytest.mark.parametrize("profile", ["sloped", "steep"])
def test_value_sized_sampling_keeps_the_exact_three_token_law(tiny_qwen2, monkeypatch, profile):
    """Stochastic drafts, sizes chosen by the rule from earlier outcomes and this step's scores:
    the 3-token output law is the target's (chi-square against the exact law)."""
    from stand_runtime.target import latency
    from test_engine import chi_square_against, exact_continuations

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    seconds = tuple(1 + 0.1 * (s - 1) if profile == "sloped" else float(s) for s in sizes)
    monkeypatch.setattr("stand_runtime.method.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, seconds))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    params = SamplingParams(temperature=0.8, top_p=0.95)
    exact = exact_continuations(tiny_qwen2, prompt, params, 3)
    method, store, counts, samples = Method.parse("stand", "dynamic-auto-6", tiny_qwen2), NGramStore(max_n=8), {}, 1500
    accepted = 0
    for seed in range(samples):
        result = generate(tiny_qwen2, None, prompt, method=method, sampling=params, max_new_tokens=3, seed=seed,
                          eos_token_ids=[], store=store)
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
    assert chi_square_against(counts, exact, samples).pvalue > 0.001
    if profile == "sloped":
        assert len(set(method.value.sizes)) >= 3  # sizes varied with what the store knew
        assert accepted >= samples // 10, f"drafts were rarely accepted ({accepted} in {samples} runs)"
    else:
        assert set(method.value.sizes) == {0}  # nothing pays for itself when each token doubles the cost


def test_value_sized_rows_of_a_batch_equal_plain_decoding(tiny_qwen2, monkeypatch):
    """In a batch each row sizes its own draft (t at B rows per forward); greedy rows stay plain decoding's."""
    from stand_runtime import generate_batch
    from stand_runtime.target import latency

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    monkeypatch.setattr("stand_runtime.method.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, tuple(1 + 0.02 * s for s in sizes)))
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4]
    greedy = SamplingParams(temperature=0)
    plain = [generate(tiny_qwen2, None, p, method="ar", sampling=greedy, max_new_tokens=30, eos_token_ids=[]).tokens
             for p in prompts]
    method = Method.parse("stand", "dynamic-auto-12", tiny_qwen2, batch=4)
    rows = generate_batch(tiny_qwen2, None, prompts, n=2, method=method, sampling=greedy, max_new_tokens=30,
                          eos_token_ids=[])
    assert [r.tokens for r in rows] == [plain[0], plain[0], plain[1], plain[1]]
    assert method.value.latency.rows == 4 and sum(sum(r.stats.drafted_per_step) for r in rows) > 0
