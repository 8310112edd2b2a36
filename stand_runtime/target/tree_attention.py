"""Attention for tree steps on grouped-query models, without copying the KV cache.

A tree step has several query tokens and an explicit 4D mask. transformers' SDPA path then expands
the key/value heads of a grouped-query model (``repeat_kv``: a copy of the whole cached K and V,
every layer, every step, growing with the context). Instead, the query heads that share a key/value head are packed into one
head with ``groups x n`` query rows, and the mask (the same for every head) repeated to match:
SDPA then reads the cache as it is. This is the packing transformers applies to a single query
token (``pack_gqa``), extended to n tokens; the result is the same attention.

:func:`use_tree_attention` registers it (``"stand_sdpa"``) and switches a model to it; everything
else (one-token steps, masks made by the model itself) goes through transformers' own SDPA.
"""

from __future__ import annotations

import torch

NAME = "stand_sdpa"


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
    """``mask.repeat(1, 1, groups, 1)``, made once per forward rather than once per layer (the one
    entry kept holds its mask alive, so a later mask cannot be mistaken for it)."""
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
    AttentionInterface.register(NAME, tree_sdpa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
