"""The top-p nucleus of rows (Holtzman et al., 2020, §3.1): the one sort and cut of p every path uses
(:func:`nucleus`, torch) and the same cut of rows of logits in C++ (:func:`logits_nucleus`).

:func:`nucleus` cuts a nucleus from a partial top-k, after a log-sum-exp when given logits, and sorts
the whole vocabulary of each row whose nucleus is wider than the probe. The
native kernel (``csrc/nucleus.cpp``) makes one pass for the maximum and one for the sum of
exponentials (AVX2 where the CPU has it, detected at run time), collects the tokens near the maximum
and finds the nucleus among them by a quickselect on mass (timed by ``benchmarks/bench_nucleus.py``). It is the same cut up to float rounding of the sums:
``tests/runtime/target/test_native_nucleus.py`` compares the two on the same rows. ``STAND_NATIVE_NUCLEUS=0`` keeps the
torch cut (its own switch: ``STAND_NATIVE`` chooses the store, and a native store must build the
same entries as the Python one from the same feed).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from ..checks import env_switch

try:
    from .. import _native
except ImportError:  # not built
    _native = None

NUCLEUS_PROBE = 128
"""Tokens :func:`nucleus` sorts first. A full sort of a 49k vocabulary row is slow on a CPU and the
nucleus almost always lies inside the top hundred tokens, so a partial top-k of this size comes first
and a full sort only for the rows whose nucleus is larger (docs/decisions.md)."""


class Nucleus(NamedTuple):
    """The nucleus of every row, most likely token first (what :func:`nucleus` returns).

    Attributes:
        values: ``[..., w]`` p before top-p at the ``w`` probed tokens, zero past the nucleus (not
            renormalised); w = min(vocab, max(:data:`NUCLEUS_PROBE`, at_least)).
        ids: ``[..., w]`` int64 token ids of ``values``.
        wide: ``[...]`` bool, the rows whose nucleus is larger than the probe (their ``values`` miss
            part of it), or None when the probe covers the vocabulary or (``full_sort``) no row is wide.
        full: ``([r, vocab] values, [r, vocab] ids)``: the same for the r wide rows from a full sort
            (None without wide rows or when ``full_sort`` was False).
    """

    values: torch.Tensor
    ids: torch.Tensor
    wide: torch.Tensor | None = None
    full: tuple[torch.Tensor, torch.Tensor] | None = None

    def host_rows(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of a ``[n, vocab]`` input: ``(values, ids)`` on the host (float64, int64, sorted, the
        full sort for wide rows), in one transfer per tensor."""
        values, ids = self.values.to("cpu", torch.float64).numpy(), self.ids.cpu().numpy()
        rows = list(zip(values, ids))
        if self.full is not None:
            full_values, full_ids = self.full[0].to("cpu", torch.float64).numpy(), self.full[1].cpu().numpy()
            for j, r in enumerate(self.wide.nonzero().flatten().tolist()):
                rows[r] = (full_values[j], full_ids[j])
        return rows


def _cut(values: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero the sorted ``values`` past the nucleus: a token stays when the mass strictly before it is
    below ``top_p`` (so the first always stays). Returns the cut values and their cumulative sums."""
    cumulative = values.cumsum(dim=-1)
    return values * ((cumulative - values) < top_p), cumulative


def nucleus(scores: torch.Tensor, top_p: float | torch.Tensor, at_least: int = 0,
            probs_of: Callable[[torch.Tensor], torch.Tensor] | None = None, full_sort: bool = True) -> Nucleus:
    """The top-p nucleus of each row: the one implementation of p's sort and cut (every function of
    this module and the recorded distributions of batched sampling call it).

    A partial top-k of :data:`NUCLEUS_PROBE` (or ``at_least``) tokens, the cumulative cut, and a full
    sort of only the rows whose nucleus is larger than that probe.

    Args:
        scores: ``[..., vocab]`` p before top-p, or any scores in the same order (logits).
        top_p: nucleus mass; >= 1 keeps every token of positive p. Or a ``[...]`` float tensor, one
            mass per row, each < 1 (vLLM's per-request top-p).
        at_least: probe at least this many tokens (a top-k, the k tokens a caller wants).
        probs_of: maps sorted scores to p before top-p elementwise or row by row (applied to the
            probe and to the full sorts of wide rows); None when ``scores`` are p.
        full_sort: False: leave the wide rows (``wide``, possibly all False) to the caller, ``full`` is
            None, and nothing is read back to the host.

    Returns:
        The :class:`Nucleus`.
    """
    vocab = scores.shape[-1]
    top, ids = torch.topk(scores, min(max(NUCLEUS_PROBE, at_least), vocab), dim=-1)
    values = top if probs_of is None else probs_of(top)
    per_row = isinstance(top_p, torch.Tensor)
    if not per_row and top_p >= 1.0:  # tokens past the probe have mass when the last probed one has (ties at a top-k)
        wide = values[..., -1] > 0
    else:
        values, cumulative = _cut(values, top_p[..., None] if per_row else top_p)
        wide = cumulative[..., -1] < top_p
    if top.shape[-1] == vocab:
        return Nucleus(values, ids)
    if not full_sort:  # no host sync: the caller reads ``wide`` on the device
        return Nucleus(values, ids, wide)
    if not bool(wide.any()):
        return Nucleus(values, ids)
    rows, row_ids = torch.sort(scores[wide], dim=-1, descending=True)
    rows = rows if probs_of is None else probs_of(rows)
    if per_row or top_p < 1.0:
        rows = _cut(rows, top_p[wide][..., None] if per_row else top_p)[0]
    return Nucleus(values, ids, wide, (rows, row_ids))


NATIVE_NUCLEUS_ENV = "STAND_NATIVE_NUCLEUS"
"""Environment variable: ``0`` keeps the torch cut where the native one would serve."""


def native_nucleus_available() -> bool:
    """True when the extension is built and ``STAND_NATIVE_NUCLEUS`` is not ``0``.

    Raises:
        StandError: ``STAND_NATIVE_NUCLEUS`` set to anything but 0 or 1.
    """
    return (env_switch(NATIVE_NUCLEUS_ENV) is not False
            and _native is not None and hasattr(_native, "nucleus_rows"))


class NativeCut(NamedTuple):
    """What :func:`logits_nucleus` found.

    Attributes:
        found: ``Nucleus(values, ids, wide)``: ``values`` ``[rows, w]`` float32 p (the softmax of the
            row) at ``ids`` (int64, most likely first), w = min(:data:`NUCLEUS_PROBE`, vocab), zero past
            the nucleus; ``wide`` ``[rows]`` bool, the rows left to the caller (not finite, or without
            ``mask`` a nucleus of more than w tokens: neither cut nor masked).
        log_total: ``[rows, 1]`` float32 log-sum-exp of each row (0 where skipped or wide).
        mass: ``[rows]`` float32 total p of each nucleus (its first w tokens are in ``found``; with
            ``mask`` a nucleus may hold more).
    """

    found: Nucleus
    log_total: torch.Tensor
    mass: torch.Tensor


def logits_nucleus(logits: torch.Tensor, top_p: torch.Tensor, mask: bool, scale: float = 1.0) -> NativeCut | None:
    """The top-p nucleus of each row of ``scale * logits`` (Holtzman et al., 2020, §3.1), in C++.

    A token stays when the probability mass strictly before it (most likely first) is below the row's
    p and its own is positive; the first always stays. Rows with p >= 1 are skipped (values 0, not
    wide, not masked).

    Args:
        logits: ``[rows, vocab]`` float32 CPU logits, contiguous.
        top_p: ``[rows]`` nucleus mass per row.
        mask: set every logit of a row that is cut and not in its nucleus to -inf, in place (a
            nucleus of any size: only rows that are not finite are left wide).
        scale: a positive factor the rows are read with (``1 / temperature``: no scaled copy of the
            logits is made).

    Returns:
        The :class:`NativeCut`, or None when the kernel is not available or the input is not of that
        kind.
    """
    if (not native_nucleus_available() or logits.dim() != 2 or logits.dtype != torch.float32
            or logits.device.type != "cpu" or not logits.is_contiguous() or logits.requires_grad
            or logits.shape[0] == 0):
        return None
    masses = top_p.detach().to("cpu", torch.float32).contiguous()
    values, ids, wide, log_total, mass = _native.nucleus_rows(logits.numpy(), masses.numpy(),
                                                              min(NUCLEUS_PROBE, logits.shape[1]), mask, float(scale))
    found = Nucleus(torch.from_numpy(values), torch.from_numpy(ids), torch.from_numpy(wide))
    return NativeCut(found, torch.from_numpy(log_total)[:, None], torch.from_numpy(mass))
