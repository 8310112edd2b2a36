"""The target distribution p of many rows, kept on the logits' device (the batched verifier's p).

:class:`DeviceRows` holds what :func:`stand_runtime.target.sampling.target_rows` returns on the host, row
for row and in the same token order (so an inverse-CDF draw picks the same token for the same uniform),
as tensors: no transfer to the host and no host synchronisation (the nucleus's probe only; rows whose
nucleus is wider than the probe are flagged, not sorted in full).
"""

from __future__ import annotations

import torch

from .sampling import SamplingParams, nucleus, tempered_probs


class DeviceRows:
    """p of every row of ``[R, vocab]`` logits, kept on their device, as
    :func:`stand_runtime.target.sampling.target_rows` holds it on the host (the same
    :func:`stand_runtime.target.sampling.tempered_probs` and :func:`stand_runtime.target.sampling.nucleus`,
    normalised in float64), without reading anything back: the batched verifier's p.

    Args:
        logits: ``[R, vocab]`` raw target logits (any float dtype and device).
        params: the sampling parameters (not greedy).

    Attributes:
        values: ``[R, W]`` p in :class:`stand_runtime.target.sampling.TargetRow` order: the normalised
            nucleus, most likely first (float64, zero-padded), or for a dense p (top-p 1, no top-k) the
            float32 softmax over the vocabulary.
        ids: ``[R, W]`` int64 token ids of ``values`` (None: dense, the vocabulary order).
        total: ``[R]`` float64 sum of p (NaN for non-finite logits).
        wide: ``[R]`` bool, the nucleus is wider than the probe, so ``values`` are wrong there; or None.
    """

    def __init__(self, logits: torch.Tensor, params: SamplingParams) -> None:
        probs = tempered_probs(logits, params)
        if params.top_p >= 1.0 and not 0 < params.top_k < probs.shape[-1]:
            self.values, self.ids, self.wide = probs, None, None
            self.total = probs.sum(-1, dtype=torch.float64)
            return
        cut = nucleus(probs, params.top_p, params.top_k, full_sort=False)
        values = cut.values.double()
        self.values = values / values.sum(-1, keepdim=True)
        self.ids, self.wide = cut.ids, cut.wide
        self.total = self.values.sum(-1)
        self._sorted = torch.sort(self.ids, dim=-1)

    def at(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """p at ``tokens`` (``[R, K]`` int64, -1 = none): ``[R, K]`` float64, and the column of each
        token in ``values`` (``W`` = none: padding, or a sparse row without the token)."""
        valid, width = tokens >= 0, self.values.shape[-1]
        if self.ids is None:
            columns = tokens.clamp(min=0)
            return (torch.where(valid, self.values.gather(1, columns).double(), 0.0),
                    torch.where(valid, columns, width))
        sorted_ids, order = self._sorted
        where = torch.searchsorted(sorted_ids, tokens).clamp(max=width - 1)
        columns = order.gather(1, where)
        hit = valid & (sorted_ids.gather(1, where) == tokens)
        probs = torch.where(hit, self.values.gather(1, columns), 0.0)
        return probs, torch.where(probs > 0, columns, width)
