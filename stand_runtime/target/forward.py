"""Target forwards: chunked prefill and one tree forward with tree attention (docs/algorithms.md §5.1).

A tree forward runs the root (the last committed token, not yet in the KV cache) and the drafted
nodes in one pass on top of the cached prefix, with explicit positions ``prefix_len + depth`` and a
4D mask in which a node sees the prefix, itself and its ancestors (transformers does not validate a
4D mask, and without explicit positions logits are silently wrong: docs/algorithms.md §5.1). Sliding
layers get the same mask with their window applied (:mod:`stand_runtime.target.model_facts`).

Tree attention on grouped-query models without copying the KV cache: for several query tokens and an
explicit 4D mask, transformers' SDPA path expands the key/value heads (``repeat_kv``: a copy of the
whole cached K and V, every layer, every step). :func:`tree_sdpa_attention` packs the query heads that
share a key/value head into one head of ``groups x n`` query rows, the mask repeated to match, so SDPA
reads the cache as it is: transformers' packing of a single query token (``pack_gqa``) extended to n
tokens, the same attention. :func:`use_tree_attention` switches a model to it (``"stand_sdpa"``);
one-token steps and masks the model makes itself go through transformers' own SDPA.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..trees.draft import Draft
from ..trees.tree import tree_attention_mask, tree_position_ids
from .model_facts import FULL, SLIDING, attention_layout

PREFILL_CHUNK = 512
"""Prompt tokens per prefill forward: a chunk's logits (~100 MB for a 49k vocabulary) are handed to
the drafter and dropped before the next chunk, so a long prompt's peak memory stays bounded."""


def model_device(model) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device


_CACHE_NAMES: dict[type, str] = {}


def with_cache(model, cache) -> dict:
    """The keyword argument that hands ``cache`` to ``model``'s forward: ``{"cache": cache}`` where the
    forward takes ``cache`` (transformers >= 5.21), else ``{"past_key_values": cache}`` (a model would
    silently ignore the wrong name and build a cache of its own)."""
    kind = type(model)
    if kind not in _CACHE_NAMES:
        import inspect

        parameters = inspect.signature(model.forward).parameters
        _CACHE_NAMES[kind] = "cache" if "cache" in parameters else "past_key_values"
    return {_CACHE_NAMES[kind]: cache}


def prefill(model, cache, tokens: Sequence[int], *, on_logits: Callable[[torch.Tensor, range], None] | None = None,
            chunk: int | None = None, offset: int = 0) -> None:
    """Run ``tokens`` through the model into ``cache``, ``chunk`` tokens per forward.

    Args:
        model: the target model.
        cache: an empty transformers cache; it holds ``len(tokens)`` entries afterwards.
        tokens: the prompt tokens to cache (the prompt minus its last token, which is the first root).
        on_logits: called per chunk with its ``[len(positions), vocab]`` logits (model dtype) and the
            ``positions`` they belong to (row r predicts the token after ``tokens[: positions[r] + 1]``);
            None computes no logits at all.
        chunk: tokens per forward (>= 1); None = :data:`PREFILL_CHUNK`.
        offset: tokens the cache already holds (a kept prefix, :class:`.kv_cache.PrefixCache`): ``tokens``
            take positions from there, and ``on_logits`` is given positions in the whole prompt.
    """
    device = model_device(model)
    chunk = chunk or PREFILL_CHUNK
    with torch.inference_mode():
        for start in range(0, len(tokens), chunk):
            stop = min(start + chunk, len(tokens))
            ids = torch.tensor([list(tokens[start:stop])], device=device)
            positions = torch.arange(offset + start, offset + stop, device=device)[None]
            out = model(input_ids=ids, position_ids=positions, **with_cache(model, cache), use_cache=True,
                        logits_to_keep=0 if on_logits is not None else 1)
            if on_logits is not None:
                on_logits(out.logits[0], range(offset + start, offset + stop))
            del out


def tree_forward(model, cache, tokens: Sequence[int], depths, ancestors: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """One target forward over a token tree on top of the cached prefix (tree attention).

    Args:
        model: the target model.
        cache: its KV cache holding ``prefix_len`` tokens; the ``n`` tree entries are appended.
        tokens: ``[n]`` token ids, root first, parents before children.
        depths: ``[n]`` depth of each token (root 0); positions are ``prefix_len + depth``.
        ancestors: ``[n, n]`` bool, ``[i, j]`` True iff j is i or an ancestor of i.
        prefix_len: tokens already in the cache.

    Returns:
        ``[n, vocab]`` logits (model dtype): row i predicts the token after the path to node i.

    Raises:
        StandError: the model has attention layers a tree mask cannot express.
    """
    device = model_device(model)
    layout = attention_layout(model)
    if len(tokens) == 1 and layout.window is None:
        mask = None  # a lone root attends to the whole prefix: no mask, and SDPA's fast path
    else:
        dtype = next(model.parameters()).dtype
        ancestors = ancestors.to(device)
        full = tree_attention_mask(ancestors, prefix_len, dtype)
        windowed = full if layout.window is None else tree_attention_mask(
            ancestors, prefix_len, dtype, depths=depths, window=layout.window)
        if layout.mask_keys is not None:
            mask = {key: windowed if key == SLIDING else full for key in layout.mask_keys}
            mask.setdefault(FULL, full)
        else:
            mask = windowed if layout.windowed_single_mask else full
    ids = torch.tensor([list(tokens)], device=device)
    positions = tree_position_ids(depths, prefix_len).to(device)
    with torch.inference_mode():
        out = model(input_ids=ids, position_ids=positions, attention_mask=mask, **with_cache(model, cache), use_cache=True)
    return out.logits[0]


def draft_forward(model, cache, draft: Draft, prefix_len: int) -> torch.Tensor:
    """:func:`tree_forward` over a :class:`Draft`: ``[n, vocab]`` logits, row i after the path to node i."""
    return tree_forward(model, cache, draft.tokens, draft.depths, draft.ancestor_mask(), prefix_len)


TREE_ATTENTION = "stand_sdpa"
"""The name :func:`use_tree_attention` registers :func:`tree_sdpa_attention` under."""


def tree_sdpa_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                        is_causal: bool | None = None, **kwargs):
    """transformers' attention-function interface.

    Args:
        query: ``[batch, heads, n, head_dim]``; key, value: ``[batch, kv_heads, length, head_dim]``.
        attention_mask: ``[batch or 1, 1, n, length]`` (shared by the heads) or None.

    Returns:
        ``([batch, n, heads, head_dim], None)``, as transformers' SDPA returns.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, n, dim = query.shape
    packable = (groups > 1 and n > 1 and attention_mask is not None and attention_mask.dim() == 4
                and attention_mask.shape[1] == 1 and dropout == 0.0 and kwargs.get("softcap") is None
                and kwargs.get("position_bias") is None and key.shape[1] * groups == heads)
    if not packable:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    packed = query.reshape(batch, heads // groups, groups * n, dim)  # row g * n + i = head (kv, g), token i
    mask = _repeated(attention_mask, groups)
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, n, dim).transpose(1, 2).contiguous(), None


_LAST_MASK: tuple = (None, 0, None)
"""The last ``(mask, groups, repeated mask)``: every layer of a forward gets the same mask object."""


def _repeated(mask: torch.Tensor, groups: int) -> torch.Tensor:
    """``mask.repeat(1, 1, groups, 1)``, made once per forward (the entry kept holds its mask alive, so
    a later mask cannot be mistaken for it)."""
    global _LAST_MASK
    last, last_groups, repeated = _LAST_MASK
    if last is not mask or last_groups != groups:
        repeated = mask.repeat(1, 1, groups, 1)
        _LAST_MASK = (mask, groups, repeated)
    return repeated


def use_tree_attention(model) -> bool:
    """Switch a model that uses transformers' SDPA attention to :func:`tree_sdpa_attention`.

    Returns:
        True when switched (the model used ``"sdpa"``), False when left as it was.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(TREE_ATTENTION, tree_sdpa_attention)
    AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)
    model.set_attn_implementation(TREE_ATTENTION)
    return True
