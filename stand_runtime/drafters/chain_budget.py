"""Per-request chain lengths for one shared forward: the expected-value rule batch-wide (ours).

In vLLM every running request is verified in one forward, so its cost is t(T) for T = the batch's
tokens (one per request plus every drafted position), and a step emits ``B + Σ P`` tokens in
expectation (B requests, P the chance that the path to a drafted position is accepted). The rule of
:mod:`.value` (Sequoia, Chen et al., 2024, §3: expected tokens per second) becomes an allocation of
chain positions across requests, best first:

- each request offers its next chain position (:class:`stand_runtime.drafters.chain.ChainCursor`)
  with P = :class:`stand_runtime.sizing.value.AcceptanceMap` of its score (learned per kind: own
  store, copied, fallback store);
- the offered position of highest P is drafted while some prefix of the offered positions, taken in
  order of P, raises ``(B + Σ P) / t(T)``; then its request offers the position after it;
- zero positions is an answer (for every request, or for some).

The latency model learns the curve's shape only at the sizes it sees, so two kinds of step explore
(on every :data:`stand_runtime.sizing.latency_model.EXPLORE_EVERY`-th step, at two phases): while the plain
forward of the batch's size has fewer than :data:`PLAIN_OBSERVED` observations, a step drafts nothing;
while no forward of twice that size has 3, a step drafts the batch's best offered positions, one per
request in all, best first as the rule takes them (not every offered position to the end of its chain,
a forward far dearer than a plain step).
Both lengths are fixed without reading a draw the length decides on, like the rule's.

Losslessness: a position is drafted or not from its score, the scores of positions already drafted
(which read their draws: draws already made) and other requests' positions (independent of this
request's draws); never from its own draw, which is made only once it is drafted. Every decision
reads only positions that are offered, never one that a later draw would produce, so no position's
fate depends on a token it decides on (the argmax over whole prefixes would: a position would then
be drafted because of the scores its own token gives the positions after it). vLLM then verifies
each chain by speculative sampling, lossless for any length fixed this way (docs/vllm.md §7.7).

t comes from :class:`stand_runtime.sizing.latency_model.LatencyModel` over tokens per forward: a latency
profile of vLLM on this machine (:mod:`stand_runtime.vllm.sizing`) or, without one, the flat
:func:`default_profile`, corrected by the step times the proposer observes (every departure: ``tolerance`` 1).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Sequence

import numpy as np

from ..errors import StandError
from .chain import KINDS, ChainCursor
from ..sizing.latency_model import EXPLORE_EVERY, MIN_OBSERVED, LatencyModel
from ..sizing.value import AcceptanceMap

PLAIN_OBSERVED = MIN_OBSERVED
"""Plain forwards (no drafts) of a batch's size the rule explores for: three, so that the median
outvotes one slow forward (the rule drafts from then on, so the plain size is seen only while
exploring, and one outlier there would make every draft look free)."""

FORWARD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
"""Tokens per forward the latency model keeps its observations at (the nearest on a log scale)."""


def default_profile(tokens: float) -> float:
    """t(T) without a measured profile: flat (1 for every T), so the corrected curve is the observed
    step times themselves, linear between the sizes observed and constant beyond them: optimistic
    about forwards larger than any seen, which the rule then drafts, times, and learns the cost of."""
    return 1.0


def profile_function(sizes: Sequence[int], seconds: Sequence[float]) -> Callable[[float], float]:
    """Seconds of a forward over T tokens from measured points: linear between them, the last slope
    beyond (as :meth:`stand_runtime.target.latency.LatencyProfile.at`).

    Args:
        sizes: ``[s]`` increasing token counts >= 1.
        seconds: ``[s]`` positive seconds at each size.

    Raises:
        StandError: empty or unequal lists, sizes not increasing integers >= 1, or seconds not
            finite and positive.
    """
    try:
        x = np.asarray(sizes, dtype=np.float64)
        y = np.asarray(seconds, dtype=np.float64)
    except (TypeError, ValueError):
        raise StandError("a latency profile needs lists of sizes and seconds (numbers)") from None
    if x.ndim != 1 or x.shape != y.shape or len(x) == 0:
        raise StandError(f"a latency profile needs equally long, non-empty flat lists of sizes and seconds, got shapes "
                         f"{list(x.shape)} and {list(y.shape)}")
    if np.any(x < 1) or np.any(x != np.round(x)) or np.any(np.diff(x) <= 0):
        raise StandError("a latency profile's sizes must be increasing integers >= 1")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise StandError("a latency profile's seconds must be finite and positive")
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2]) if len(x) > 1 else 0.0

    def at(tokens: float) -> float:
        if tokens <= x[-1]:
            return float(np.interp(tokens, x, y))
        return float(y[-1] + slope * (tokens - x[-1]))

    return at


class ChainBudget:
    """Chain positions of one batch allocated by expected tokens per second (module docstring).

    Args:
        latency: t over tokens per forward (``rows`` 1); None = :func:`default_profile` at
            :data:`FORWARD_SIZES`, every observed departure corrected (its shape means nothing).
        acceptance: P per score and kind; None = a fresh map over the chain's kinds.
    """

    def __init__(self, latency: LatencyModel | None = None, acceptance: AcceptanceMap | None = None) -> None:
        self.latency = latency or LatencyModel(default_profile, FORWARD_SIZES, tolerance=1.0)
        self.acceptance = acceptance or AcceptanceMap(kinds=KINDS)
        self.steps = 0
        self.explored = 0  # steps that drafted nothing to observe the plain forward
        self.forwards_observed = 0

    def allocate(self, cursors: Sequence[ChainCursor | None], rows: int) -> list[int]:
        """Draft the batch's chain positions: each cursor takes the positions the rule gives it.

        Args:
            cursors: per request, its chain (None: a request that drafts nothing).
            rows: requests in the forward (each adds one token and one emitted token).

        Returns:
            Per cursor, the positions drafted (0 for None).
        """
        self.steps += 1
        taken = [0] * len(cursors)
        estimate = self.acceptance.estimator()
        for cursor in cursors:
            if cursor is not None:
                cursor.estimate = estimate  # own store or copy: the surer drafts a position both cover
        offering = [i for i, cursor in enumerate(cursors) if cursor is not None and cursor.peek() is not None]
        if not offering:
            return taken
        most = sum(cursors[i].limit - len(cursors[i].draft) for i in offering)
        phase = (self.steps - 1) % EXPLORE_EVERY
        if phase == 0 and self.latency.observed(rows) < PLAIN_OBSERVED:
            self.explored += 1  # the plain forward of this batch size is not observed yet
            return taken
        heap = [(-estimate(*cursors[i].peek()), i) for i in offering]
        heapq.heapify(heap)
        if phase == EXPLORE_EVERY // 2 and most >= rows and self.latency.observed_from(2 * rows) < MIN_OBSERVED:
            self.explored += 1  # no forward of twice the plain one observed: draft the best `rows` positions
            while heap and sum(taken) < rows:
                self._take(cursors, heap, taken, estimate)
            return taken
        costs = self.latency.curve(rows, rows + most)  # costs[j]: a forward with j drafted positions
        gain, added = float(rows), 0
        while heap:
            offered = np.sort([-key for key, _ in heap])[::-1]
            rates = (gain + np.cumsum(offered)) / costs[added + 1: added + 1 + len(offered)]
            if not rates.max() > gain / costs[added]:
                break
            gain, added = gain - self._take(cursors, heap, taken, estimate), added + 1
        return taken

    @staticmethod
    def _take(cursors, heap: list, taken: list[int], estimate) -> float:
        """Draft the best offered position (the heap's top); its request offers its next. Returns the
        heap key taken (-P)."""
        key, i = heapq.heappop(heap)
        cursors[i].take()
        taken[i] += 1
        offer = cursors[i].peek()
        if offer is not None:
            heapq.heappush(heap, (-estimate(*offer), i))
        return key

    def observe_outcome(self, scores: Sequence[float], kinds: Sequence[int], accepted: int) -> None:
        """Add one verified chain: its positions' scores and kinds (as drafted, the verified ones
        only) and how many of them were accepted (a prefix)."""
        if len(scores) == 0:
            return
        outcome = np.arange(len(scores)) < accepted
        self.acceptance.observe(np.asarray(scores, dtype=np.float64), np.asarray(kinds, dtype=np.int64), outcome)

    def observe_forward(self, tokens: int, seconds: float) -> None:
        """Add one forward's tokens (all requests) and its observed seconds (ignored unless finite
        and positive)."""
        if tokens >= 1 and math.isfinite(seconds) and seconds > 0:
            self.latency.observe(tokens, seconds)
            self.forwards_observed += 1

    def stats(self) -> dict:
        """JSON-ready: steps allocated, steps explored, forwards observed, the acceptance table
        ``[kinds][bins]`` and the corrected t at :data:`FORWARD_SIZES`."""
        return {"steps": self.steps, "explored": self.explored, "forwards_observed": self.forwards_observed,
                "acceptance": self.acceptance.table().round(4).tolist(),
                "latency_s": {size: round(float(self.latency.at(size)), 6) for size in FORWARD_SIZES}}
