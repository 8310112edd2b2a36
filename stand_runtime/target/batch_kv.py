"""A batched KV cache whose rows hold different numbers of tokens (holes masked), on DynamicCache.

Rows of a batched tree step keep different numbers of entries (their accepted paths differ in
length). Re-aligning every row after every step would copy the whole cache; instead each row keeps
its accepted entries at the front of the step's block and the rest of the block becomes *holes*: a
``[B, S]`` validity mask records which cache slots hold a row's tokens, and the attention mask hides
the holes (docs/algorithms.md §5.2: per-row compaction on the stock cache, exact).
Positions are explicit per row (``position_ids``), so a hole never shifts a token's position. When
holes take more than a quarter of the cache, :meth:`BatchedCache.repack` right-aligns the rows.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from .growing_cache import grow_in_place

REPACK_HOLES = 0.25
"""Re-align the cache (one copy) once re-aligning would drop this fraction of its columns."""


class BatchedCache:
    """A transformers ``DynamicCache`` of B rows plus each row's validity mask.

    Attributes:
        cache: the ``DynamicCache`` (layers ``[B, kv_heads, S, head_dim]``).
        valid: ``[B, S]`` bool, True where a slot holds one of the row's tokens.
    """

    def __init__(self, cache: DynamicCache, valid: torch.Tensor) -> None:
        self.cache = cache
        self.valid = valid

    @classmethod
    def from_rows(cls, caches: Sequence[DynamicCache], config) -> "BatchedCache":
        """Stack single-row caches (each ``[1, H, L_b, D]``) left-padded to the longest row.

        The same cache object may appear several times (samples of one prompt share its prefill).
        """
        length = max(c.get_seq_length() for c in caches)
        valid = torch.zeros(len(caches), length, dtype=torch.bool)
        for b, c in enumerate(caches):
            valid[b, length - c.get_seq_length():] = True
        batched = grow_in_place(DynamicCache(config=config))
        if length == 0:
            return cls(batched, valid)
        reference = next(c for c in caches if c.get_seq_length() == length)
        for layer_index, like in enumerate(reference.layers):
            keys, values = [], []
            for c in caches:
                layer = c.layers[layer_index] if c.get_seq_length() else None
                for out, states, template in ((keys, getattr(layer, "keys", None), like.keys),
                                              (values, getattr(layer, "values", None), like.values)):
                    if states is None:  # a one-token prompt caches nothing
                        states = template[:, :, :0]
                    out.append(torch.nn.functional.pad(states, (0, 0, length - states.shape[2], 0)))
            batched.update(torch.cat(keys), torch.cat(values), layer_index)
        return cls(batched, valid)

    def extend(self, other: "BatchedCache") -> None:
        """Append ``other``'s rows after this cache's (rows admitted into a running batch): both are
        left-padded with holes to the longer of the two, then stacked (one copy of each layer).

        This cache must hold states in every layer (it ran a forward); ``other`` may hold none (one-token
        prompts cache nothing)."""
        length = max(self.length, other.length)
        added = other.valid.shape[0]
        for index, layer in enumerate(self.cache.layers):
            theirs = other.cache.layers[index] if index < len(other.cache.layers) else None
            for name in ("keys", "values"):
                mine = getattr(layer, name)
                states = getattr(theirs, name, None)
                if states is None or states.dim() != 4:
                    states = mine.new_zeros((added, mine.shape[1], 0, mine.shape[3]))
                setattr(layer, name, torch.cat([_left_pad(mine, length), _left_pad(states.to(mine.dtype), length)]))
        self.valid = torch.cat([_left_pad_mask(self.valid, length), _left_pad_mask(other.valid, length)])

    @property
    def length(self) -> int:
        """Slots per row (S)."""
        return self.valid.shape[1]

    def attention_mask(self, ancestors: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
        """The additive ``[B, 1, N, S + N]`` mask of a batched tree step.

        Args:
            ancestors: ``[B, N, N]`` bool per row (padding nodes see only themselves).
        """
        batch, n = ancestors.shape[0], ancestors.shape[1]
        prefix = self.valid[:, None, :].expand(batch, n, self.length)
        allowed = torch.cat([prefix, ancestors], dim=2).to(device)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def keep(self, block_start: int, keep: Sequence[Sequence[int]], block_len: int) -> None:
        """After a step appended ``block_len`` slots per row at ``block_start``: row b keeps
        ``keep[b]`` (offsets inside the block, increasing) at the block's front; the block shrinks to
        the longest kept list and the remaining slots become holes.

        Only the columns from the first one some row moves are gathered: a row whose accepted path
        runs along the block's front (offsets ``0, 1, 2, ...``: a chain, or the first branch of a
        tree) is already in place, and when every row is (about half the steps of a batched
        dynamic tree at 8 rows), no KV entry is copied."""
        kept = max((len(k) for k in keep), default=0)
        batch = len(keep)
        index = np.zeros((batch, kept), dtype=np.int64)
        valid = np.zeros((batch, kept), dtype=bool)
        for b, offsets in enumerate(keep):
            index[b, : len(offsets)] = offsets
            valid[b, : len(offsets)] = True
        moved = ((index != np.arange(kept)) & valid).any(axis=0)  # [kept] some row's entry moves into the column
        first = int(moved.argmax()) if moved.any() else kept  # columns before it stay as they are
        if first < kept:
            gather = torch.from_numpy(index[:, first:] + block_start)
            with torch.inference_mode():
                for layer in self.cache.layers:
                    for name in ("keys", "values"):
                        states = getattr(layer, name)
                        states[:, :, block_start + first: block_start + kept] = _gather(states, gather)
        if block_len > kept:
            self.cache.crop(-(block_len - kept))
        self.valid = torch.cat([self.valid, torch.from_numpy(valid)], dim=1)
        if self.spare() > REPACK_HOLES:
            self.repack()

    def spare(self) -> float:
        """Fraction of columns :meth:`repack` would drop (the longest row's holes)."""
        if not self.valid.numel():
            return 0.0
        return 1.0 - int(self.valid.sum(dim=1).max()) / self.length

    def repack(self) -> None:
        """Right-align every row's tokens (left padding only), dropping all-hole columns."""
        counts = self.valid.sum(dim=1)
        length = int(counts.max()) if counts.numel() else 0
        batch = self.valid.shape[0]
        index = torch.zeros(batch, length, dtype=torch.long)
        valid = torch.zeros(batch, length, dtype=torch.bool)
        for b in range(batch):
            slots = torch.nonzero(self.valid[b]).flatten()
            index[b, length - len(slots):] = slots
            valid[b, length - len(slots):] = True
        with torch.inference_mode():
            for layer in self.cache.layers:
                for name in ("keys", "values"):
                    setattr(layer, name, _gather(getattr(layer, name), index))
        self.valid = valid

    def select(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (batch indices, in order), then drop columns no remaining row uses."""
        indices = torch.as_tensor(list(rows), dtype=torch.long)
        self.cache.batch_select_indices(indices)
        self.valid = self.valid[indices]
        used = torch.nonzero(self.valid.any(dim=0)).flatten()
        first = int(used[0]) if used.numel() else self.length
        if first > 0:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]
            self.valid = self.valid[:, first:]



def _left_pad(states: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, H, S, D]`` states left-padded with zeros to ``length`` slots."""
    return torch.nn.functional.pad(states, (0, 0, length - states.shape[2], 0))


def _left_pad_mask(valid: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, S]`` validity left-padded with False (holes) to ``length`` slots."""
    return torch.nn.functional.pad(valid, (length - valid.shape[1], 0), value=False)


def _gather(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``states[b, :, index[b, j]]`` for ``states`` ``[B, H, S, D]`` and ``index`` ``[B, K]`` → ``[B, H, K, D]``."""
    expanded = index.to(states.device)[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
    return torch.gather(states, 2, expanded)
