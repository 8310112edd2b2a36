"""One node budget for a batch's forward, spent over every row's candidates (ours; docs/algorithms.md §3.7).

Rows of a batch go through the target in one forward, so the nodes a step drafts are one budget: a
confident row should get a long chain and a row with nothing to draft nothing, instead of each row
sizing its own draft as if it were alone. Each row drafts its best-first order, up to the rule's
draft budget (value-sized dynamic tree, :mod:`stand_runtime.sizing.value`, ``batch_allocated``,
:meth:`stand_runtime.sizing.value.ValueRule.budget`); per row r its candidates'
acceptance estimates ``P_r1, P_r2, ...`` (the chance each node's path is accepted) come from the rule's
acceptance map; the allocator chooses each row's prefix size ``n_r`` for the most expected tokens per
second of the whole forward,

    padded (the engine's forward, ``[B, W]``):  sum_r (1 + G_r(min(W - 1, L_r))) / t(B W),
    packed (rows flattened into one sequence):  sum_r (1 + G_r(n_r)) / t(sum_r (1 + n_r)),

with ``G_r(n) = sum_{i <= n} P_ri``, ``L_r`` the row's candidates and t the latency model's seconds of a
forward over that many tokens (its profile times the corrections observed from this run's batch
forwards, padding included). With padding a row fills up to the common width for free, so the padded
choice is the width W alone; :func:`packed_allocation` is what flattening would give (the engine pads:
its ratio to the padded choice is recorded as the packing's modelled gain).

Losslessness: both choices are stopping rules (:func:`stand_runtime.sizing.value.bounded_peak_of` for
the width, which crosses a step in the cost when the widths just past it may pay; the packed choice
:func:`stand_runtime.sizing.value.first_peak`'s): the width grows, or the best remaining candidate is
taken, while the modelled rate may still rise, reading only what was taken so far, so whether row
r's node k is drafted depends on row r's first k candidates (their scores read q at rank) and on the
other rows' drafts (drawn with their own random streams), never on row r's node k's own draw nor on
anything drawn after it; a prefix of the best-first order is a lossless draft
(:func:`stand_runtime.trees.draft.truncate_draft`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .value import LOOKAHEAD, ValueRule, bounded_peak_of, candidates, seconds_of
from ..errors import StandError
from ..trees.draft import Draft


@dataclass(frozen=True)
class Allocation:
    """Drafted nodes per row for one forward.

    Attributes:
        sizes: per row its drafted nodes (root excluded).
        tokens: tokens the forward runs (padded: rows x width; packed: the rows' tokens).
        expected: expected tokens the step emits, all rows (each row: 1 + the sum of its nodes' P).
        seconds: the modelled seconds of that forward.
    """

    sizes: tuple[int, ...]
    tokens: int
    expected: float
    seconds: float

    @property
    def rate(self) -> float:
        """Expected tokens per second (modelled)."""
        return self.expected / self.seconds if self.seconds > 0 else float("inf")


def _cumulative(acceptance: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per row ``[L_r + 1]``: 0 and the running sums of its candidates' P."""
    return [np.concatenate([[0.0], np.cumsum(np.asarray(p, dtype=np.float64))]) for p in acceptance]


def padded_allocation(acceptance: Sequence[np.ndarray], seconds: Callable[[float], float]) -> Allocation:
    """The padded forward's allocation: width W grown from 1 (roots only) while the modelled rate
    ``sum_r (1 + G_r(min(W - 1, L_r))) / seconds(B W)`` may still rise
    (:func:`stand_runtime.sizing.value.bounded_peak_of`); every row drafts its first
    ``min(W - 1, L_r)`` candidates (the padding up to W is filled for free).

    Args:
        acceptance: per row ``[L_r]`` float P of its candidates in best-first order (empty: the row
            drafts nothing).
        seconds: seconds of one forward over that many tokens in all.

    Raises:
        StandError: no rows.
    """
    if not acceptance:
        raise StandError("an allocation needs at least one row")
    sums, batch = _cumulative(acceptance), len(acceptance)
    longest = max(len(s) - 1 for s in sums)
    if batch == 1:
        gains = 1.0 + sums[0]
    else:
        filled = np.array([np.pad(s, (0, longest + 1 - len(s)), mode="edge") for s in sums])  # [B, longest + 1]
        gains = batch + filled.sum(axis=0)  # the forward's expected tokens with n nodes a row (fewer where a row ends)
    n = bounded_peak_of(gains, seconds_of(seconds, batch * np.arange(1, longest + 1 + LOOKAHEAD)))
    sizes = tuple(min(n, len(s) - 1) for s in sums)
    return Allocation(sizes, batch * (n + 1), float(gains[n]), seconds(batch * (n + 1)))


def packed_allocation(acceptance: Sequence[np.ndarray], seconds: Callable[[float], float]) -> Allocation:
    """The packed forward's allocation: best-first over every row's next candidate (the highest P,
    ties to the lower row), taken while the modelled rate ``sum_r (1 + G_r(n_r)) / seconds(sum_r (1 +
    n_r))`` rises.

    Args and errors: as :func:`padded_allocation`.
    """
    if not acceptance:
        raise StandError("an allocation needs at least one row")
    rows = [np.asarray(p, dtype=np.float64) for p in acceptance]
    sizes = [0] * len(rows)
    expected, tokens = float(len(rows)), len(rows)
    heads = [(-float(p[0]), r) for r, p in enumerate(rows) if len(p)]
    heapq.heapify(heads)
    while heads:
        negative, r = heads[0]
        if not (expected - negative) / seconds(tokens + 1) > expected / seconds(tokens):
            break
        heapq.heappop(heads)
        expected, tokens, sizes[r] = expected - negative, tokens + 1, sizes[r] + 1
        if sizes[r] < len(rows[r]):
            heapq.heappush(heads, (-float(rows[r][sizes[r]]), r))
    return Allocation(tuple(sizes), tokens, expected, seconds(tokens))


class BatchAllocator:
    """Sizes the drafts of one forward's rows from one budget (module docstring).

    Args:
        value: the value rule every row's drafter shares (its acceptance map and latency model).
        max_nodes: cap on a row's drafted nodes (the method's ``max_nodes``; None = the tree's budget
            alone): applied here, not before, so an unsized draft keeps its pending copy chain.
    """

    def __init__(self, value: ValueRule, max_nodes: int | None = None) -> None:
        self.value = value
        self.limit = value.nodes if max_nodes is None else (max_nodes if value.nodes is None else min(value.nodes, max_nodes))

    @classmethod
    def for_rule(cls, value: ValueRule | None, max_nodes: int | None = None) -> "BatchAllocator | None":
        """The allocator of a call's rows sized by ``value`` (each row capped at ``max_nodes``); None when
        there is no rule or it sizes each row alone (the drafters size their own drafts)."""
        return cls(value, max_nodes) if value is not None and value.batch_allocated else None

    def allocate(self, drafts: Sequence[Draft]) -> list[Draft]:
        """Each row's draft cut to its allocated prefix (:func:`padded_allocation`); while the latency
        model has not seen the roots-only forward, the forwards :func:`~stand_runtime.sizing.latency_model.explores`
        names draft nothing. Records the sizes (``value.batches``, ``value.sizes``) and the packed allocation's
        modelled rate over the padded one's (``value.packing``, when it is a list).

        Raises:
            StandError: a draft with nodes but no scores (not drafted by the dynamic tree).
        """
        value = self.value
        if any(d.num_nodes and d.scores is None for d in drafts):
            raise StandError("a value-sized dynamic tree sizes scored drafts (the dynamic tree's, on either "
                             "store); this draft has nodes but no scores")
        table = value.acceptance.table()
        found = [candidates(d, value.acceptance, table, self.limit) for d in drafts]  # the tree's budget (or cap) a row
        acceptance = [c.p for c in found]
        if value.exploring(len(value.batches), len(drafts)):
            sizes = (0,) * len(drafts)
            value.forecast(None)
        else:
            seconds = value.latency.frozen()
            chosen = padded_allocation(acceptance, seconds)
            sizes = chosen.sizes
            value.chose(max(sizes))
            value.forecast(chosen)
            if len(drafts) > 1 and value.packing is not None:  # one row: packed is padded
                value.packing.append(packed_allocation(acceptance, seconds).rate / chosen.rate)
        value.batches.append(sizes)
        value.sizes.extend(sizes)
        sized = []
        for c, n in zip(found, sizes):
            draft, predicted = c.realize(n)
            value.remember(draft, predicted)  # for a reliability collector (when one listens)
            sized.append(draft)
        return sized
