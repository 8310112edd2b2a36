"""Models whose attention or positions depend on a window or on the sequence length: every tree step
reproduces token-by-token decoding exactly, or the run is refused up front with a one-line error."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from stand_runtime import SamplingParams, StandError, generate

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




def test_unsupported_attention_is_refused():
    config = LlamaConfig(**TINY, max_position_embeddings=64)
    model = build(config)
    model.config.layer_types = ["full_attention", "linear_attention"]
    with pytest.raises(StandError, match="linear_attention layers") as info:
        generate(model, None, PROMPT, sampling=SamplingParams(temperature=0), method="stand", max_new_tokens=4)
    assert "\n" not in str(info.value)
