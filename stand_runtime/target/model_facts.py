"""What the decoding loop must know about a target model before decoding with it.

- EOS ids, vocabulary size and context limit;
- the attention layout: tree attention passes its own 4D mask, so every kind of attention layer
  must be one the mask can express exactly. Full causal attention and sliding windows are (a
  sliding layer's mask also hides keys ``window`` or more positions behind the query, as
  transformers' ``sliding_window_overlay`` does); anything else (chunked attention, linear or
  state-space layers) is refused with a one-line error;
- rotary position embeddings whose frequencies depend on the sequence length of the forward
  (transformers' ``dynamic`` NTK and ``longrope``) would give a tree step's shallow nodes other
  frequencies than token-by-token decoding once a step straddles the threshold; such a run is
  refused up front (the types that depend only on the position are exact: default, linear, yarn,
  llama3, proportional).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import StandError

FULL = "full_attention"
SLIDING = "sliding_attention"
_EXACT_LAYER_TYPES = (FULL, SLIDING)


def folder_context(folder) -> int | None:
    """The context length (tokens, ``max_position_embeddings``) in a model folder's ``config.json``; None
    when the file or the field is missing or not a positive integer."""
    import json
    from pathlib import Path

    try:
        value = json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_model(model) -> None:
    """Raises StandError unless ``model`` looks like a transformers causal LM (a config, callable)."""
    if not callable(model) or not hasattr(getattr(model, "config", None), "vocab_size"):
        raise StandError(f"model must be a transformers causal LM (from load_model), not {type(model).__name__}")


def check_tokenizer(tokenizer) -> None:
    """Raises StandError unless ``tokenizer`` is None (token-id prompts only) or has ``decode`` (a
    transformers tokenizer; a raw ``tokenizers.Tokenizer`` decodes too, for token-id prompts)."""
    if tokenizer is not None and not callable(getattr(tokenizer, "decode", None)):
        raise StandError(f"tokenizer must be a transformers tokenizer (from load_model) or None, "
                         f"not {type(tokenizer).__name__}")


def default_eos_ids(model, tokenizer) -> list[int]:
    """EOS ids of the tokenizer and of the model's generation config (sorted, distinct)."""
    ids: set[int] = set()
    for value in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return sorted(ids)


def vocab_size(model) -> int:
    """Rows of the target's output distribution (tokens)."""
    return int(model.config.vocab_size)


def context_limit(model) -> int | None:
    """The longest sequence (tokens) the model's positions cover, if the config says."""
    return getattr(model.config, "max_position_embeddings", None)


@dataclass(frozen=True)
class AttentionLayout:
    """How a tree forward must pass its attention mask to the model.

    Attributes:
        window: the sliding window (tokens) of the model's sliding layers, or None.
        mask_keys: the layer types of a model that takes one mask per layer type (a dict, as
            transformers' ``causal_mask_mapping``), or None for a model that takes one mask.
        windowed_single_mask: one mask for every layer, with the window applied (Mistral style:
            ``sliding_window`` set and no ``layer_types``).
    """

    window: int | None = None
    mask_keys: tuple[str, ...] | None = None
    windowed_single_mask: bool = False


def attention_layout(model) -> AttentionLayout:
    """The attention layout of ``model`` (see :class:`AttentionLayout`).

    Raises:
        StandError: the model has attention layers a tree mask cannot express exactly.
    """
    config = model.config
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    name = getattr(config, "model_type", type(model).__name__)
    if getattr(config, "attention_chunk_size", None) is not None:
        raise StandError(f"model {name!r} uses chunked attention, which tree decoding cannot verify exactly")
    if layer_types:
        unknown = sorted(set(layer_types) - set(_EXACT_LAYER_TYPES))
        if unknown:
            raise StandError(f"model {name!r} has {', '.join(unknown)} layers, which tree decoding cannot verify exactly")
        if SLIDING not in layer_types:
            return AttentionLayout()
        if not isinstance(window, int) or window < 1:
            raise StandError(f"model {name!r} has sliding-attention layers but no sliding_window size")
        return AttentionLayout(window, tuple(sorted(set(layer_types))))
    if window is not None and getattr(config, "use_sliding_window", True) is not False:
        if not isinstance(window, int) or window < 1:
            raise StandError(f"model {name!r} has a bad sliding_window {window!r}")
        return AttentionLayout(window, None, True)
    return AttentionLayout()


def _rope_parameters(config) -> list[dict]:
    """The rope parameter sets of a config (one, or one per layer type)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not isinstance(params, dict):
        return []
    if "rope_type" in params or "type" in params:
        return [params]
    return [p for p in params.values() if isinstance(p, dict)]


def check_positions(model, prompt_len: int, max_new_tokens: int) -> None:
    """Refuse a run whose tree steps would not match token-by-token decoding (module docstring): a run
    forwards positions up to ``prompt_len + max_new_tokens - 2``.

    Raises:
        StandError: the prompt plus ``max_new_tokens`` exceeds the model's context, or the run would
            cross the threshold of a sequence-length-dependent rope scaling.
    """
    limit = context_limit(model)
    if limit is not None and prompt_len + max_new_tokens > limit:
        raise StandError(
            f"context too long: prompt {prompt_len} + max_new_tokens {max_new_tokens} tokens > model context {limit}"
        )
    last_len = prompt_len + max_new_tokens - 1  # sequence length of the last possible tree step
    for params in _rope_parameters(model.config):
        kind = params.get("rope_type", params.get("type", "default"))
        original = params.get("original_max_position_embeddings") or limit
        if original is None:
            continue
        if "dynamic" in kind and last_len > original:
            raise StandError(
                f"rope scaling {kind!r} changes its frequencies with the sequence length beyond {original} tokens, "
                f"so tree steps up to {last_len} tokens would not match token-by-token decoding; "
                f"keep prompt + max_new_tokens <= {original + 1}"
            )
        if kind == "longrope" and prompt_len <= original < last_len:
            raise StandError(
                f"rope scaling 'longrope' switches frequencies at {original} tokens, and this run "
                f"({prompt_len} prompt + {max_new_tokens} new tokens) would cross it inside a tree step"
            )
