"""Batched decoding: every row is lossless against plain decoding of that row alone."""

import pytest

from stand_runtime import Method, NGramStore, SamplingParams, StandError, generate
from stand_runtime import generate_batch
from test_engine import REPEAT_PROMPT

PROMPTS = [REPEAT_PROMPT, [2, 7, 2, 7, 2, 9], [5], [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2]]
"""Prompts of different lengths (one of a single token: nothing cached, nothing to draft at first)."""

TREES = {"stand": "heuristic-80", "stand-det": "heuristic-80", "recycle": "heuristic-80", "pld": None, "ar": None,
         "suffix": None, "stand[dynamic-16]": "dynamic-16"}




def test_rows_of_one_prompt_share_the_store_online(tiny_qwen2):
    store = NGramStore()
    results = generate_batch(tiny_qwen2, None, [PROMPTS[1]], method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=len([PROMPTS[1]]) * 3), sampling=SamplingParams(temperature=0.8), n=3, max_new_tokens=30, seed=5, store=store, eos_token_ids=[])
    alone = generate(tiny_qwen2, None, PROMPTS[1], method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.8), max_new_tokens=30, seed=5, eos_token_ids=[])
    assert len(store) > 0 and all(len(r.tokens) == 30 for r in results)
    # row 0 samples alone's tokens (the same seed) but drafts from what rows 1 and 2 verified in
    # earlier steps too: more is accepted than alone
    assert results[0].tokens == alone.tokens
    assert results[0].stats.acceptance_length > alone.stats.acceptance_length, \
        (results[0].stats.acceptance_length, alone.stats.acceptance_length)


@pytest.mark.parametrize("kwargs, message", [
    ({"prompts": []}, "non-empty list of prompts"),
    ({"prompts": [[1, 2]], "n": 0}, "n (samples per prompt) must be an integer >= 1"),
    ({"prompts": [[1, 2]], "seed": [1, 2]}, "seed has 2 entries for 1 rows"),
    ({"prompts": [[1, 2]], "sampling": [SamplingParams(), SamplingParams()]}, "sampling has 2 entries"),
    ({"prompts": [[1, 2]], "method": "MAX_NODES"}, "max_nodes must be an integer >= 0"),
    ({"prompts": [[]]}, "empty"),
    ({"prompts": [[1, 2]], "method": "nope"}, "unknown method"),
])
def test_batch_bad_input_is_one_line(tiny_qwen2, kwargs, message):
    with pytest.raises(StandError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        if kwargs.get("method") == "MAX_NODES":
            kwargs["method"] = Method.parse("stand", "heuristic-80", tiny_qwen2, max_nodes=-1)
        generate_batch(tiny_qwen2, None, **kwargs)
    assert "\n" not in str(error.value)


def test_sliding_window_models_are_refused_in_a_batch():
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=8,
                         max_window_layers=0, layer_types=["sliding_attention"] * 2)
    model = AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(StandError, match="sliding-window"):
        generate_batch(model, None, [[1, 2, 3]], method="ar", max_new_tokens=2)




def test_a_stop_string_of_wide_characters_is_found_however_many_tokens_it_takes():
    """The stop check decodes a window of the latest tokens sized by the stop string's UTF-8 bytes:
    sized by its characters, it missed nine emoji (27 byte-level tokens) on every decoding path."""
    from stand_runtime import load_tokenizer
    from stand_runtime.engine.stopping import StopRule

    tokenizer = load_tokenizer()
    fish = "🐟" * 12
    tokens = tokenizer.encode(fish, add_special_tokens=False)
    assert len(tokens) > len(fish) + 16  # a window of characters is too short for this text
    for count in (1, 8, 9, 12):
        rule, generated, reason = StopRule([], 1000, ["🐟" * count], tokenizer), [], None
        for token in tokens:  # one token per step, as plain decoding emits them
            kept, reason = rule.cut(generated, [token])
            generated += kept
            if reason is not None:
                break
        assert reason == "stop" and tokenizer.decode(generated).endswith("🐟" * count), count
        assert len(generated) == 3 * count  # stopped at the token completing it, not later




def seeded_rows_equal_each_alone(model, sampling: list, seed: int) -> list:
    """Rows of one prompt (``PROMPTS[1]``), one per entry of ``sampling``, batched by plain decoding with
    seeds ``seed + r``: each equals that row decoded alone with its seed, token for token. Returns the rows."""
    rows = generate_batch(model, None, [PROMPTS[1]], n=len(sampling), method=Method.parse("ar", None, model, batch=2),
                          sampling=sampling, max_new_tokens=8, seed=seed, eos_token_ids=[])
    for r, row in enumerate(rows):
        alone = generate(model, None, PROMPTS[1], method="ar", sampling=sampling[r], max_new_tokens=8,
                         seed=seed + r, eos_token_ids=[])
        assert row.tokens == alone.tokens, (seed, r)
    return rows
