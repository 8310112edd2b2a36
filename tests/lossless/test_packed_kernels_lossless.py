"""Lossless with the packed bfloat16 kernels: greedy decoding equals plain decoding."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_model
from stand_runtime.target.fast_linear import prepack_linears


def test_a_packed_bfloat16_model_decodes_greedy_as_plain_decoding():
    """The packed bfloat16 target, greedy: STAND (value-sized tree) and prompt lookup emit plain
    decoding's tokens, one token after another, with drafts accepted (native bfloat16 CPUs only)."""
    from stand_runtime import Method, SamplingParams, generate
    from stand_runtime.target.fast_linear import native_bf16

    if not native_bf16():
        pytest.skip("this CPU has no native bfloat16")
    model = tiny_model("llama", vocab=16, seed=1).to(torch.bfloat16)
    assert prepack_linears(model) == 2 * 7 + 1
    prompt = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    greedy = SamplingParams(temperature=0)
    plain = generate(model, None, prompt, method="ar", sampling=greedy, eos_token_ids=[], max_new_tokens=40)
    for name, tree in (("stand", "dynamic-auto"), ("pld", None)):
        fast = generate(model, None, prompt, method=Method.parse(name, tree, model), sampling=greedy,
                        eos_token_ids=[], max_new_tokens=40)
        assert fast.tokens == plain.tokens and len(fast.tokens) == 40, name
        assert fast.stats.target_forwards < 40, name
