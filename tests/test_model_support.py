"""Models whose attention or positions depend on a window or on the sequence length: every tree step
reproduces token-by-token decoding exactly, or the run is refused up front with a one-line error."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from conftest import assert_tree_logits_match_paths
from stand_runtime import Method, SamplingParams, StandError, generate, load_tree

TINY = dict(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=None)
PROMPT = [3, 5, 7] * 3 + [3, 5]


def build(config):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval().requires_grad_(False)


def full_forward_greedy(model, prompt, steps):
    """Token-by-token greedy decoding by full forwards (the model's own masks, no cache)."""
    sequence = list(prompt)
    for _ in range(steps):
        with torch.inference_mode():
            sequence.append(int(model(input_ids=torch.tensor([sequence])).logits[0, -1].argmax()))
    return sequence[len(prompt):]


SLIDING = {
    "mistral-window-4": lambda: MistralConfig(**TINY, sliding_window=4),
    "mistral-window-16": lambda: MistralConfig(**TINY, sliding_window=16),
    "qwen2-full-and-sliding-layers": lambda: Qwen2Config(**TINY, use_sliding_window=True, sliding_window=4, max_window_layers=1),
}


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


HALF = 4  # rotary frequencies of a head of 8
ROPE = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0] * HALF, "long_factor": [4.0] * HALF,
                 "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    "proportional": {"rope_type": "proportional", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
}


def test_every_rope_type_of_transformers_is_covered():
    assert set(ROPE_INIT_FUNCTIONS) | {"default"} <= set(ROPE), "a new rope type: add it to ROPE"


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


def test_unsupported_attention_is_refused():
    config = LlamaConfig(**TINY, max_position_embeddings=64)
    model = build(config)
    model.config.layer_types = ["full_attention", "linear_attention"]
    with pytest.raises(StandError, match="linear_attention layers") as info:
        generate(model, None, PROMPT, sampling=SamplingParams(temperature=0), method="stand", max_new_tokens=4)
    assert "\n" not in str(info.value)
