"""Lossless when STAND drafts from the successor prior: greedy identity, alone and in a batch, and the output law."""

from __future__ import annotations

# ruff: noqa: F811 (test parameters named as the fixtures imported from their module)

import pytest

from stand_runtime import Method, SamplingParams, generate
from stand_runtime.drafters.prior import measure_prior
from test_engine import chi_square_against, exact_continuations
from test_prior import SAMPLING, VOCAB
from test_prior import model, prior  # noqa: F401 (fixtures)


@pytest.mark.parametrize("tree", ["dynamic-6", "heuristic-80"])
def test_greedy_stand_from_the_prior_equals_plain_decoding(model, tree):
    greedy = SamplingParams(temperature=0)
    seeded = measure_prior(model, [], greedy, VOCAB)
    method = Method.parse("stand", tree, model, prior=seeded)
    for prompt in ([1, 2, 3], [5, 9, 5, 9, 5], [0]):
        plain = generate(model, None, prompt, method="ar", sampling=greedy, max_new_tokens=24, eos_token_ids=[])
        fast = generate(model, None, prompt, method=method, sampling=greedy, max_new_tokens=24, eos_token_ids=[])
        assert fast.tokens == plain.tokens
        assert fast.stats.target_forwards < plain.stats.target_forwards  # the prior's drafts were accepted


def test_sampling_from_the_prior_keeps_the_targets_distribution(model, prior):
    """Every run drafts from a fresh store filled from the prior (chi-square of 2000 runs of 3 tokens
    against the exact law; seeds fixed, threshold 1e-3 as tests/runtime/engine/test_engine.py's)."""
    prompt = [2, 7, 2, 7, 2]
    exact = exact_continuations(model, prompt, SAMPLING, 3)
    method = Method.parse("stand", "dynamic-6", model, prior=prior)
    counts: dict = {}
    accepted = 0
    samples = 2000
    for seed in range(2_000_000, 2_000_000 + samples):
        result = generate(model, None, prompt, method=method, sampling=SAMPLING, max_new_tokens=3, seed=seed,
                          eos_token_ids=[])
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= samples // 4, f"drafts were rarely accepted ({accepted} in {samples} runs)"
    assert chi_square_against(counts, exact, samples).pvalue > 0.001


def test_batched_greedy_from_the_prior_equals_plain_decoding(model):
    from stand_runtime import generate_batch

    greedy = SamplingParams(temperature=0)
    method = Method.parse("stand", "dynamic-auto", model, batch=3, prior=measure_prior(model, [], greedy, VOCAB))
    prompts = [[1, 2, 3], [5, 9, 5, 9, 5, 9], [4]]
    rows = generate_batch(model, None, prompts, n=1, method=method, sampling=greedy, max_new_tokens=20, eos_token_ids=[])
    for prompt, row in zip(prompts, rows):
        plain = generate(model, None, prompt, method="ar", sampling=greedy, max_new_tokens=20, eos_token_ids=[])
        assert row.tokens == plain.tokens
