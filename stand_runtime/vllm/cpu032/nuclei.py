"""The top-p nuclei vLLM's sampler cut in one step, kept for the STAND proposer's store feed.

The proposer records p's top-k at every verified position (:mod:`stand_runtime.vllm.proposer`), the
partial top-k and log-sum-exp vLLM's sampler has just computed for the same rows on the CPU platform
(:func:`stand_runtime.vllm.cpu032.cpu_sampling.top_p_by_probe`). While :func:`recording` is active
(the runner access wraps each ``_sample`` call in it), every such cut leaves a :class:`NucleusCall`:
each row's k most likely tokens and their probabilities renormalised over the nucleus, the arithmetic
of :func:`stand_runtime.target.sampling.top_target_probs`. :func:`step_nuclei` orders one step's calls
as its logits rows; calls not of the expected kind give None or rows marked unknown, which the
proposer computes itself. The store only drafts, so a row taken from here is never a correctness risk.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch


@dataclass
class NucleusCall:
    """What one top-p cut found, per row of its ``[rows, vocab]`` logits.

    Attributes:
        known: ``[rows]`` bool, True where the row's nucleus was cut here (top-p < 1).
        ids: ``[rows, k]`` int64, the nucleus's k most likely tokens, most likely first (rows not
            known: 0).
        probs: ``[rows, k]`` float32 probabilities of ``ids`` under p (renormalised over the
            nucleus; 0 past it and in rows not known).
    """

    known: torch.Tensor
    ids: torch.Tensor
    probs: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.known.shape[0])

    @staticmethod
    def unknown(rows: int, k: int) -> "NucleusCall":
        """A call that cut no row (``rows`` of them)."""
        return NucleusCall(torch.zeros(rows, dtype=torch.bool), torch.zeros(rows, k, dtype=torch.int64),
                           torch.zeros(rows, k))


_ACTIVE: list[tuple[int, list[NucleusCall]]] = []
"""The open recordings (innermost last): ``(k, calls)``."""


@contextmanager
def recording(k: int) -> Iterator[list[NucleusCall]]:
    """Collect the :class:`NucleusCall` of every top-p cut made inside the block (``k`` tokens a row)."""
    calls: list[NucleusCall] = []
    _ACTIVE.append((k, calls))
    try:
        yield calls
    finally:
        _ACTIVE.pop()


def recording_k() -> int:
    """Tokens a row the innermost open recording wants (0: none is open, record nothing)."""
    return _ACTIVE[-1][0] if _ACTIVE else 0


def record(call: NucleusCall) -> None:
    """Add ``call`` to the innermost open recording (no-op when none is open)."""
    if _ACTIVE:
        _ACTIVE[-1][1].append(call)


def top_of_cut(values: torch.Tensor, ids: torch.Tensor, k: int, mass: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``k`` of a sorted, cut nucleus (``[r, w]`` p before top-p, zero past the nucleus;
    ``[r, w]`` ids) as ``([r, k] ids, [r, k] probabilities over the nucleus)``; ``mass``: ``[r, 1]``
    each nucleus's total p where ``values`` hold only part of it (None: their sum)."""
    mass = values.sum(dim=-1, keepdim=True) if mass is None else mass
    ids, probs = ids[:, :k].clone(), values[:, :k] / mass
    if ids.shape[-1] < k:  # a vocabulary smaller than k: pad with probability 0
        pad = k - ids.shape[-1]
        ids, probs = torch.nn.functional.pad(ids, (0, pad)), torch.nn.functional.pad(probs, (0, pad))
    return ids, probs


def step_nuclei(calls: list[NucleusCall], rows: int, metadata) -> NucleusCall | None:
    """One step's nuclei in the order of its ``rows`` logits rows, or None when ``calls`` are not
    what the sampler makes for such a step.

    Args:
        calls: the step's recorded calls, in the order made.
        rows: logits rows of the step (one per request, plus one per draft token).
        metadata: vLLM's spec-decode metadata of the step, or None (one row per request). With drafts
            vLLM samples the bonus rows first (``bonus_logits_indices``, one per request), then cuts
            the draft positions' rows (``target_logits_indices``).
    """
    if metadata is None:
        return calls[0] if len(calls) == 1 and calls[0].rows == rows else None
    bonus_rows = getattr(metadata, "bonus_logits_indices", None)
    target_rows = getattr(metadata, "target_logits_indices", None)
    if bonus_rows is None or target_rows is None or len(calls) != 2:
        return None
    bonus, target = calls
    if bonus.rows != len(bonus_rows) or target.rows != len(target_rows) or bonus.rows + target.rows != rows:
        return None
    placed = torch.cat([bonus_rows.long().cpu(), target_rows.long().cpu()])
    if not torch.equal(placed.sort().values, torch.arange(rows)):  # not each step row exactly once
        return None
    order = torch.empty(rows, dtype=torch.int64)  # step row -> row of the two calls concatenated
    order[placed] = torch.arange(rows)
    return NucleusCall(torch.cat([bonus.known, target.known])[order], torch.cat([bonus.ids, target.ids])[order],
                       torch.cat([bonus.probs, target.probs])[order])
