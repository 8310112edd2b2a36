"""Lossless across model kinds: sliding-window attention and RoPE variants decode as plain decoding."""

from __future__ import annotations

import pytest

from conftest import assert_tree_logits_match_paths
from stand_runtime import Method, SamplingParams, StandError, generate, load_tree
from transformers import LlamaConfig
from test_model_support import PROMPT, ROPE, SLIDING, TINY, build, full_forward_greedy


@pytest.mark.parametrize("name", list(SLIDING))
def test_sliding_window_models_are_exact(name):
    model = build(SLIDING[name]())
    reference = full_forward_greedy(model, PROMPT, 40)
    for method in ("ar", "pld", "stand", "recycle"):
        result = generate(model, None, PROMPT, method=Method.parse(method, "heuristic-80" if method in ("stand", "recycle") else None, model), sampling=SamplingParams(temperature=0), max_new_tokens=40, eos_token_ids=[])
        assert result.tokens == reference, method
        if method != "ar":
            assert result.stats.target_forwards < 40, method  # drafts were accepted
    tree = load_tree("heuristic-80").tree
    assert_tree_logits_match_paths(model, tree, PROMPT * 2, range(tree.num_nodes + 1), tol=1e-4)


@pytest.mark.parametrize("kind", list(ROPE))
def test_rope_types_are_exact_or_refused(kind):
    """Prompt 11 tokens, 14 new: tree steps straddle position 16 (the original length of the scaled
    types) and, with max_position_embeddings 24, the dynamic type's growth threshold."""
    positions = 40 if kind == "longrope" else 24
    model = build(LlamaConfig(**TINY, max_position_embeddings=positions, rope_parameters=ROPE[kind]))
    if kind == "longrope":  # frequencies switch at 16 for the whole forward: a straddling step is inexact
        with pytest.raises(StandError, match="longrope") as info:
            generate(model, None, PROMPT, sampling=SamplingParams(temperature=0), method="stand", max_new_tokens=10, eos_token_ids=[])
        assert "\n" not in str(info.value)
        prompt = PROMPT * 2  # 22 tokens: every step is past the switch, which is exact
    else:
        prompt = PROMPT
    budget = positions - len(prompt)  # >= 13 tokens: room for drafts to be accepted
    plain = generate(model, None, prompt, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=budget, eos_token_ids=[])
    # a fixed tree, not "auto" (sized from this machine's latency, which varies with load): the same
    # drafts every run, so whether they are accepted is no matter of luck
    fast = generate(model, None, prompt, method=Method.parse("stand", "heuristic-80", model), sampling=SamplingParams(temperature=0), max_new_tokens=budget, eos_token_ids=[])
    assert fast.tokens == plain.tokens and fast.stats.target_forwards < budget
    if kind not in ("dynamic", "longrope"):  # position-only types: also equal to full forwards
        assert plain.tokens == full_forward_greedy(model, prompt, budget)
        tree = load_tree("heuristic-80").tree
        assert_tree_logits_match_paths(model, tree, prompt + [4, 2], range(tree.num_nodes + 1), tol=1e-4)
    with pytest.raises(StandError, match="context too long"):  # the dynamic type would grow past its limit
        generate(model, None, prompt, sampling=SamplingParams(temperature=0), method="stand", max_new_tokens=budget + 1, eos_token_ids=[])
