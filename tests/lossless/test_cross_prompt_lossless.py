"""Lossless with a cross-prompt memory (``NGramStore(base=...)``): the memory feeds drafts (q) only, so
greedy decoding is plain decoding token for token, alone and in a batch, and sampled tokens follow the
target's exact law (chi-square), with drafts accepted."""

from __future__ import annotations

import pytest

from stand_runtime import DecodeRequest, HFBackend, Method, NGramStore, SamplingParams, StandError, generate, generate_batch
from test_engine import REPEAT_PROMPT, chi_square_against, exact_continuations

GREEDY = SamplingParams(temperature=0)


def memory_after(model, prompts, sampling, tokens=24):
    """A cross-prompt memory fed by decoding ``prompts`` with STAND's dynamic tree, one store each."""
    base = NGramStore(max_n=8)
    for seed, prompt in enumerate(prompts):
        generate(model, None, prompt, method="stand", sampling=sampling, max_new_tokens=tokens, seed=seed,
                 eos_token_ids=[], store=NGramStore(max_n=8, base=base))
    return base


def test_greedy_decoding_over_a_cross_prompt_memory_is_plain_decoding(tiny_qwen2):
    base = memory_after(tiny_qwen2, [REPEAT_PROMPT, [5, 9, 5, 9, 5, 9, 2]], GREEDY)
    read = base.stats().lookups
    for tree in ("dynamic-6", "dynamic-auto"):
        for prompt in ([1, 2, 3], REPEAT_PROMPT[:7], [0]):
            plain = generate(tiny_qwen2, None, prompt, method="ar", sampling=GREEDY, max_new_tokens=24,
                             eos_token_ids=[])
            fast = generate(tiny_qwen2, None, prompt, method=Method.parse("stand", tree), sampling=GREEDY,
                            max_new_tokens=24, eos_token_ids=[], store=NGramStore(max_n=8, base=base))
            assert fast.tokens == plain.tokens
            assert fast.stats.target_forwards < plain.stats.target_forwards  # drafts were accepted
    assert base.stats().lookups > read  # the memory was read below each fresh store
    method = Method.parse("stand", "dynamic-auto", batch=3)
    prompts = [[1, 2, 3], [5, 9, 5, 9, 5, 9], [4]]
    rows = generate_batch(tiny_qwen2, None, prompts, n=1, method=method, sampling=GREEDY, max_new_tokens=20,
                          eos_token_ids=[], store=NGramStore(max_n=8, base=base))
    for prompt, row in zip(prompts, rows):
        assert row.tokens == generate(tiny_qwen2, None, prompt, method="ar", sampling=GREEDY, max_new_tokens=20,
                                      eos_token_ids=[]).tokens


def test_sampling_over_a_cross_prompt_memory_keeps_the_targets_law(tiny_qwen2):
    """1500 runs of 3 tokens, each over a fresh store on one memory that every run also feeds (so q
    changes from run to run, as across a dataset's problems): chi-square against the exact law (seeds
    fixed, threshold 1e-3 as tests/runtime/engine/test_engine.py's)."""
    sampling = SamplingParams(temperature=0.8, top_p=0.95)
    prompt = REPEAT_PROMPT[:9]
    base = memory_after(tiny_qwen2, [REPEAT_PROMPT, REPEAT_PROMPT[3:]], sampling, tokens=32)
    exact = exact_continuations(tiny_qwen2, prompt, sampling, 3)
    counts: dict = {}
    accepted, samples = 0, 1500
    method = Method.parse("stand", "dynamic-6")
    for seed in range(3_000_000, 3_000_000 + samples):
        result = generate(tiny_qwen2, None, prompt, method=method, sampling=sampling, max_new_tokens=3, seed=seed,
                          eos_token_ids=[], store=NGramStore(max_n=8, base=base))
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= samples // 4, f"drafts were rarely accepted ({accepted} in {samples} runs)"
    assert chi_square_against(counts, exact, samples).pvalue > 0.001


def test_a_backend_keeps_one_cross_prompt_memory_under_every_request(tiny_qwen2):
    """``HFBackend(cross_prompt=True)``: each request's fresh store drafts over the one memory every
    request feeds; greedy completions are plain decoding's; another method shares its one memory."""
    backend = HFBackend(tiny_qwen2, None, Method.parse("stand", "dynamic-6"), cross_prompt=True)
    prompts = [REPEAT_PROMPT[:12], REPEAT_PROMPT[2:14]]
    done = [backend.generate([DecodeRequest(p, max_new_tokens=16, sampling=GREEDY, ignore_eos=True)])[0][0]
            for p in prompts]
    for prompt, completion in zip(prompts, done):
        assert completion.tokens == generate(tiny_qwen2, None, prompt, method="ar", sampling=GREEDY,
                                             max_new_tokens=16, eos_token_ids=[]).tokens
    first, second = (backend.memory_for(DecodeRequest(p)) for p in prompts)
    assert first is not second and first.base is second.base is backend.cross_memory and len(backend.cross_memory) > 0
    suffixless = HFBackend(tiny_qwen2, None, "recycle", cross_prompt=True)
    assert suffixless.memory_for(DecodeRequest(prompts[0])) is suffixless.memory_for(DecodeRequest(prompts[1]))
    with pytest.raises(StandError, match="share_memory and cross_prompt both share a memory"):
        HFBackend(tiny_qwen2, None, "stand", share_memory=True, cross_prompt=True)
