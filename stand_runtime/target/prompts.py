"""Prompt encoding: text through the tokenizer's chat template, token ids checked and used as they are."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import StandError


def check_prompt_text(text: str) -> str:
    """``text`` if it can be a prompt: not blank, and valid UTF-8 (no lone surrogate, as a command line
    of undecodable bytes gives).

    Raises:
        StandError: an empty prompt, or text that is not valid UTF-8 (naming the character).
    """
    if not text.strip():
        raise StandError("empty prompt")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise StandError(f"the prompt is not valid UTF-8 text (character {error.start}: {text[error.start]!r})") from None
    return text


def check_prompt(prompt_or_ids) -> None:
    """Check a prompt's form before any tokenizer or model is at hand, as :func:`encode_prompt` does
    (StandError; the vocabulary is checked later, against the model)."""
    if isinstance(prompt_or_ids, str):
        check_prompt_text(prompt_or_ids)
    else:
        encode_prompt(None, prompt_or_ids)


def encode_prompt(tokenizer, prompt_or_ids, vocab: int | None = None) -> list[int]:
    """Token ids of a prompt: text through the chat template (if any), ids as they are.

    Args:
        tokenizer: the target's tokenizer (None is allowed for token ids).
        prompt_or_ids: text, or token ids (a flat int sequence, a ``[1, n]`` list or a tensor).
        vocab: the target's vocabulary size; ids must lie below it.

    Returns:
        The prompt's token ids (Python ints).

    Raises:
        StandError: empty prompt, text without a tokenizer, ids that are not a flat sequence of
            non-negative ints, or an id outside the vocabulary.
    """
    if isinstance(prompt_or_ids, str):
        check_prompt_text(prompt_or_ids)
        if tokenizer is None:
            raise StandError("a text prompt needs a tokenizer (or pass token ids)")
        if getattr(tokenizer, "chat_template", None):
            encoded = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt_or_ids}], add_generation_prompt=True, tokenize=True
            )
            ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        elif callable(tokenizer):
            ids = tokenizer(prompt_or_ids)["input_ids"]
        else:
            raise StandError(f"a tokenizer of type {type(tokenizer).__name__} cannot encode a text prompt here: pass token ids, "
                             f"or a transformers tokenizer")
    elif isinstance(prompt_or_ids, torch.Tensor):
        if prompt_or_ids.dim() not in (1, 2):
            raise StandError(f"prompt ids must be a [n] or [1, n] tensor, got shape {list(prompt_or_ids.shape)}")
        ids = prompt_or_ids.tolist()
    elif isinstance(prompt_or_ids, np.ndarray):
        if prompt_or_ids.ndim not in (1, 2):
            raise StandError(f"prompt ids must be a [n] or [1, n] array, got shape {list(prompt_or_ids.shape)}")
        ids = prompt_or_ids.tolist()
    elif isinstance(prompt_or_ids, (list, tuple)):
        ids = list(prompt_or_ids)
    else:
        raise StandError(f"a prompt is text or token ids, not {type(prompt_or_ids).__name__}")
    if ids and isinstance(ids[0], list):
        if len(ids) != 1:
            raise StandError(f"expected one sequence of token ids, got {len(ids)}")
        ids = ids[0]
    if not ids:
        raise StandError("empty prompt")
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise StandError("prompt ids must be non-negative integers")
    ids = [int(t) for t in ids]
    if vocab is not None and max(ids) >= vocab:
        raise StandError(f"prompt token id {max(ids)} is outside the model's vocabulary ({vocab} tokens)")
    return ids
