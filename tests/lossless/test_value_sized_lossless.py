"""Lossless with value-sized trees (dynamic-auto): greedy identity alone and in batches, the copy chain, the exact law."""

from __future__ import annotations

import pytest

from stand_runtime import Method, NGramStore, SamplingParams, SizingSession, generate


def test_value_sized_drafts_are_lossless_greedy_and_learn(tiny_qwen2, monkeypatch):
    """Greedy decoding with the value-sized tree equals plain decoding token for token; the rule
    keeps its sizes and its acceptance map learns from every verified step."""
    from stand_runtime.target import latency

    flat = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), (1.0,) * 8)
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency", lambda model, name: flat)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    greedy = SamplingParams(temperature=0)
    plain = generate(tiny_qwen2, None, prompt, method="ar", sampling=greedy, max_new_tokens=40, eos_token_ids=[])
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2)
    sizing = SizingSession.for_model(tiny_qwen2)
    fast = generate(tiny_qwen2, None, prompt, method=method, sampling=greedy, max_new_tokens=40, eos_token_ids=[],
                    store=NGramStore(max_n=8), sizing=sizing)
    assert fast.tokens == plain.tokens
    assert fast.stats.target_forwards < 40 and len(sizing.last_rule.sizes) >= fast.stats.target_forwards - 1
    assert sizing.acceptance._drafted.sum() == sum(fast.stats.drafted_per_step)
    assert sizing.acceptance._drafted[1].sum() > 0  # the copy chain competed and was drafted


def test_a_long_repeated_span_is_drafted_past_the_fixed_copy_path(tiny_qwen2):
    """A value-sized tree offers a copy chain of up to 64 tokens (a fixed tree grafts 10): after a prompt
    that repeats a 20-token span (over a 16-token vocabulary), the first step's chain copies the span on (its match
    measured past 8 tokens, 60 here, so scored high), more than 10 tokens are drafted as copies, and greedy decoding still
    equals plain decoding token for token."""
    from stand_runtime.drafters import COPY_TOKENS, VALUE_COPY_TOKENS
    from stand_runtime.target import latency

    flat = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), (1.0,) * 8)  # given: no step explores
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 4
    greedy = SamplingParams(temperature=0)
    plain = generate(tiny_qwen2, None, prompt, method="ar", sampling=greedy, max_new_tokens=24, eos_token_ids=[])
    method = Method.parse("stand", "dynamic-auto", tiny_qwen2)
    assert method.copy_tokens == VALUE_COPY_TOKENS and Method.parse("stand", "dynamic-16").copy_tokens == COPY_TOKENS
    copied = []
    fast = generate(tiny_qwen2, None, prompt, method=method, sampling=greedy, max_new_tokens=24, eos_token_ids=[],
                    on_step=lambda settled: copied.append(len(settled.draft.copied)),
                    sizing=SizingSession.for_model(tiny_qwen2, latency=flat))
    assert fast.tokens == plain.tokens and sum(fast.stats.accepted_per_step) > 0  # drafts were accepted
    assert max(copied) > COPY_TOKENS, copied


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["sloped", "steep"])
def test_value_sized_sampling_keeps_the_exact_three_token_law(tiny_qwen2, monkeypatch, profile):
    """Stochastic drafts, sizes chosen by the rule from earlier outcomes and this step's scores:
    the 3-token output law is the target's (chi-square against the exact law)."""
    from stand_runtime.target import latency
    from test_engine import chi_square_against, exact_continuations

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    seconds = tuple(1 + 0.1 * (s - 1) if profile == "sloped" else float(s) for s in sizes)
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, seconds))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    params = SamplingParams(temperature=0.8, top_p=0.95)
    exact = exact_continuations(tiny_qwen2, prompt, params, 3)
    method, store, counts, samples = Method.parse("stand", "dynamic-auto-6", tiny_qwen2), NGramStore(max_n=8), {}, 1500
    sizing, sizes, accepted = SizingSession.for_model(tiny_qwen2), [], 0
    for seed in range(samples):
        result = generate(tiny_qwen2, None, prompt, method=method, sampling=params, max_new_tokens=3, seed=seed,
                          eos_token_ids=[], store=store, sizing=sizing)
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
        sizes += sizing.last_rule.sizes
    assert chi_square_against(counts, exact, samples).pvalue > 0.001
    if profile == "sloped":
        assert sizing.acceptance._drafted[1].sum() > 0  # copy chains were drafted too
        assert len(set(sizes)) >= 3  # sizes varied with what the store knew
        assert accepted >= samples // 10, f"drafts were rarely accepted ({accepted} in {samples} runs)"
    else:
        assert set(sizes) == {0}  # nothing pays for itself when each token doubles the cost


def test_value_sized_rows_of_a_batch_equal_plain_decoding(tiny_qwen2, monkeypatch):
    """In a batch each row sizes its own draft (t at B rows per forward); greedy rows stay plain decoding's."""
    from stand_runtime import generate_batch
    from stand_runtime.target import latency

    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency",
                        lambda model, name: latency.LatencyProfile(sizes, tuple(1 + 0.02 * s for s in sizes)))
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [2, 7, 1, 8, 2, 8] * 4]
    greedy = SamplingParams(temperature=0)
    plain = [generate(tiny_qwen2, None, p, method="ar", sampling=greedy, max_new_tokens=30, eos_token_ids=[]).tokens
             for p in prompts]
    method = Method.parse("stand", "dynamic-auto-12", tiny_qwen2, batch=4)
    sizing = SizingSession.for_model(tiny_qwen2)
    rows = generate_batch(tiny_qwen2, None, prompts, n=2, method=method, sampling=greedy, max_new_tokens=30,
                          eos_token_ids=[], sizing=sizing)
    assert [r.tokens for r in rows] == [plain[0], plain[0], plain[1], plain[1]]
    assert sizing.last_rule.latency.rows == 4 and sum(sum(r.stats.drafted_per_step) for r in rows) > 0


def test_an_explicit_node_cap_in_a_batch_keeps_the_copy_chain(tiny_qwen2):
    """With ``max_nodes`` a batch's value-sized rows are capped by the allocator, after the copy chain
    competed (cutting the unsized draft first dropped its pending chain): no step drafts more than the
    cap, copied nodes are drafted, and greedy rows stay plain decoding's."""
    from stand_runtime import generate_batch
    from stand_runtime.target import latency

    flat = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), (1.0,) * 8)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 4
    greedy = SamplingParams(temperature=0)
    plain = generate(tiny_qwen2, None, prompt, method="ar", sampling=greedy, max_new_tokens=20, eos_token_ids=[])
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2, batch=2, max_nodes=4)
    sizing = SizingSession.for_model(tiny_qwen2, latency=flat)
    rows = generate_batch(tiny_qwen2, None, [prompt], n=2, method=method, sampling=greedy, max_new_tokens=20,
                          eos_token_ids=[], sizing=sizing)
    assert [r.tokens for r in rows] == [plain.tokens] * 2
    assert all(sum(r.stats.accepted_per_step) > 0 for r in rows)  # drafts were accepted
    assert max(max(r.stats.drafted_per_step) for r in rows) == 4
    assert sizing.acceptance.counts()[0][1].sum() > 0  # copied nodes were drafted (and learned)
