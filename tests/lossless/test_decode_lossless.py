"""Lossless, one sequence (generate): greedy token for token and the sampled output law against plain decoding,
for every method and tree."""

from __future__ import annotations

# ruff: noqa: F811 (test parameters named as the fixtures imported from their module)

import pytest

from conftest import draw_law, tiny_model
from stand_runtime import Method, NGramStore, SamplingParams, generate
from stand_runtime.engine.stopping import StopRule
from test_engine import REPEAT_PROMPT, SAMPLING, chi_square_against, exact_continuations, needs_arctic
from test_engine import loop_prompt  # noqa: F401 (fixtures)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("method, feed_rejected, tree", [("stand", False, None), ("stand", True, None), ("pld", False, None),
                                                         ("recycle", False, None), ("stand", False, "dynamic-16"),
                                                         pytest.param("suffix", False, None, marks=needs_arctic)],
                         ids=["stand", "stand+rejected", "pld", "recycle", "stand[dynamic-16]", "suffix"])
def test_greedy_equals_plain_decoding_on_humaneval(default_model, plain_humaneval, method, feed_rejected, tree):
    model, tokenizer = default_model
    problems, plain_runs = plain_humaneval
    accepted_total = 0
    for problem, plain in zip(problems, plain_runs):
        fast = generate(model, tokenizer, problem["prompt"], method=Method.parse(method, tree, model, feed_rejected=feed_rejected), sampling=SamplingParams(temperature=0), max_new_tokens=64)
        assert fast.tokens == plain.tokens, (method, problem["task_id"])
        accepted_total += fast.stats.new_tokens - fast.stats.target_forwards
    assert accepted_total >= 20, f"{method}: no drafts were accepted, the comparison proves nothing"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["stand", "stand+rejected", "stand[dynamic-6]"])
def test_sampling_distribution_of_three_tokens_matches_exact(tiny_qwen2, loop_prompt, method):
    """Stochastic drafts (Gumbel noise cannot be enumerated): chi-square of 3000 runs. For
    "stand+rejected" one store, fed at rejected nodes too, is shared by all runs (so q keeps
    changing between runs, as in best-of-N): each run must still sample from p. So is the store of
    the dynamic tree (6 nodes: siblings and deeper nodes compete for the budget). Deterministic
    drafts get the exact law below.

    Seeds are fixed (1_000_000 + run) so the test is reproducible; a p-value threshold of 1e-3 fails
    one fixed seed set in a thousand by chance (seeds 0-2999 gave pld p = 1.6e-4, and 15,000 runs
    from other seeds p = 0.12)."""
    model = tiny_qwen2
    exact = exact_continuations(model, loop_prompt, SAMPLING, 3)
    samples = 3000
    counts: dict = {}
    accepted = 0
    feed_rejected = method == "stand+rejected"
    dynamic = method.endswith("[dynamic-6]")
    shared = NGramStore() if feed_rejected else NGramStore(max_n=8) if dynamic else None
    tree = "dynamic-6" if dynamic else "heuristic-80"
    for seed in range(1_000_000, 1_000_000 + samples):
        result = generate(model, None, loop_prompt, method=Method.parse(method.removesuffix("+rejected").removesuffix("[dynamic-6]"), tree, model, feed_rejected=feed_rejected, verification="rejection"), sampling=SamplingParams(temperature=0.8, top_p=0.95), max_new_tokens=3, seed=seed, eos_token_ids=[], store=shared)
        assert len(result.tokens) == 3
        key = tuple(result.tokens)
        counts[key] = counts.get(key, 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= samples // 4, f"drafts were rarely accepted ({accepted} in {samples} runs)"
    result = chi_square_against(counts, exact, samples)
    assert result.pvalue > 0.001, result


@pytest.mark.parametrize("method", ["stand-det", "pld", "recycle", "stand-det[dynamic-6]",
                                    pytest.param("suffix", marks=needs_arctic)])
def test_deterministic_drafts_sample_three_tokens_with_the_exact_law(tiny_qwen2, loop_prompt, method):
    """Deterministic drafts leave verification's draws as the only randomness: enumerating them
    (conftest.draw_law) gives the exact law of generate's 3-token output, which must be the target's
    (up to float32 noise between tree-step and plain logits). The dynamic tree drafts from a store
    that other runs fed (copied per run, so every run starts from the same q)."""
    import copy

    model = tiny_qwen2
    minimum = 0.25
    if method == "suffix":  # SuffixDecoding prefers long prompt matches: a longer loop gets ~10% accepted
        loop_prompt = REPEAT_PROMPT + generate(model, None, REPEAT_PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=60, eos_token_ids=[]).tokens
        minimum = 0.05
    exact = exact_continuations(model, loop_prompt, SAMPLING, 3)
    dynamic = method.endswith("[dynamic-6]")
    warm = NGramStore(max_n=8) if dynamic else None
    if dynamic:
        for seed in range(3):
            generate(model, None, loop_prompt, method=Method.parse("stand-det", "dynamic-6", model), sampling=SamplingParams(temperature=0.8, top_p=0.95), max_new_tokens=6, seed=seed, eos_token_ids=[], store=warm)
    tree = None if method in ("pld", "suffix") else "dynamic-6" if dynamic else "heuristic-80"

    def run():
        result = generate(model, None, loop_prompt, method=Method.parse(method.removesuffix("[dynamic-6]"), tree, model, verification="rejection"), sampling=SamplingParams(temperature=0.8, top_p=0.95), max_new_tokens=3, seed=0, eos_token_ids=[], store=copy.deepcopy(warm))
        return tuple(result.tokens), result.stats.new_tokens - result.stats.target_forwards

    law = draw_law(run)
    tokens: dict = {}
    for (key, _), prob in law.items():
        tokens[key] = tokens.get(key, 0.0) + prob
    assert set(tokens) == set(exact)
    worst = max(abs(tokens[key] - exact[key]) for key in exact)
    assert worst < 1e-5, worst
    accepted = sum(prob * count for (_, count), prob in law.items())
    assert accepted >= minimum, f"drafts were rarely accepted ({accepted:.3f} tokens per run)"


@pytest.mark.parametrize("method", ["stand", "pld", "recycle", pytest.param("suffix", marks=needs_arctic)])
def test_greedy_tiny_llama_and_one_token_prompt(method):
    model = tiny_model("llama", vocab=16, seed=1)
    for prompt in (REPEAT_PROMPT, [5]):
        plain = generate(model, None, prompt, sampling=SamplingParams(temperature=0), method="ar", eos_token_ids=[], max_new_tokens=40)
        fast = generate(model, None, prompt, method=Method.parse(method, None if method in ("pld", "suffix") else "heuristic-80", model), sampling=SamplingParams(temperature=0), eos_token_ids=[], max_new_tokens=40)
        assert fast.tokens == plain.tokens and len(fast.tokens) == 40
        assert fast.stats.target_forwards < 40  # drafts were accepted
    assert fast.stats.prompt_tokens == 1


def test_max_new_tokens_reached_mid_run_gives_plain_length_and_content(tiny_qwen2):
    plain = generate(tiny_qwen2, None, REPEAT_PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=30, eos_token_ids=[])
    multi_token_steps = 0
    for limit in range(1, 31):
        fast = generate(tiny_qwen2, None, REPEAT_PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=limit, eos_token_ids=[])
        assert fast.tokens == plain.tokens[:limit], limit
        multi_token_steps += fast.stats.tokens_per_step[-1] > 1
    assert multi_token_steps > 10  # the limit was often reached inside an accepted run
    assert StopRule([], 2).cut([], [4, 5, 6, 7]) == ([4, 5], "length")
    assert StopRule([6], 9).cut([], [4, 5, 6, 7]) == ([4, 5, 6], "eos")
    assert StopRule([6], 9).cut([1], [4, 5]) == ([4, 5], None)
