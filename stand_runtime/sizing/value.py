"""Drafts sized by what they are worth: the expected-value rule of a value-sized dynamic tree (ours).

A step that forwards the root and n drafted nodes emits ``1 + sum_i P_i`` tokens in expectation
(``P_i``: the chance that the whole path to node i is accepted; Sequoia, Chen et al., 2024, §3) and
costs ``t(1 + n)`` seconds of target forward. The rule drafts the prefix of the best-first order
(:mod:`.best_first`) that maximises expected tokens per second,

    n* = argmax_n (1 + sum_{i <= n} P_i) / t(1 + n),    n = 0 .. budget,

so zero nodes is an answer where nothing the store knows pays for the tokens it adds to the forward.
The n taken is where a stopping rule ends (:func:`.peak.bounded_peak_of`: the draft grows while a size
just ahead, the later nodes forecast from the ones taken, may still beat the best rate passed; on a
convex cost the curve's first peak): whether node k is drafted is decided from the first k nodes'
scores only, never from nodes after it (its own children's scores read its drawn token). In a batch the same rule sizes every row at once (:mod:`stand_runtime.sizing.allocation`).

Two estimates steer it, both learned online from this run and both lossless to use:

- :class:`AcceptanceMap`: ``P_i`` from the node's best-first score (the path's product of q at rank and
  the store's confidence), binned on a log scale, drawn and copied nodes apart, seeded (8
  pseudo-observations per bin) with an offline calibration's rate per bin where one was measured for
  the model (:mod:`stand_runtime.sizing.acceptance_seed`), else with the score itself, and kept monotone in
  the score; each verified step adds, per drafted node, whether its path was accepted.
- :class:`.latency_model.LatencyModel`: ``t(n)`` from a latency profile, corrected by the run's own
  forward times: per profile size the median ratio observed / profile over its last 16 forwards, elsewhere the median of
  all recent ratios, so a profile measured under load or on another machine stops steering the rule
  within a few steps.

The copy chain (prompt lookup's continuation of the context, :mod:`.tree_walk`) competes for the
same budget: its tokens are fixed before any draw, so each is a candidate scored by its position, and
the rule takes drawn nodes and chain tokens in one order by P (:mod:`.candidates`).

Losslessness: whether node k is drafted depends on the scores of nodes 1..k (each read q at rank,
never the token a draw gave at the node: ``Draft.scores``), on the chain (fixed before any draw) and
on outcomes of earlier steps, never on node k's own draw or anything drawn after it; a prefix of the
best-first order is a lossless draft (:func:`stand_runtime.trees.draft.truncate_draft`), and a fixed
chain grafted onto it is verified after the drawn children it hangs beside. See docs/algorithms.md §3.7,
§9.3.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Callable, Sequence

import numpy as np

from ..errors import StandError
from ..trees.draft import Draft
from .candidates import candidates
from .latency_model import LatencyModel, explores
from .peak import LOOKAHEAD, bounded_peak_of

EDGES = np.logspace(-4, 0, 17)
"""Bin edges of :class:`AcceptanceMap` over a node's score (16 bins from 1e-4 to 1; below: the first)."""

PRIOR_WEIGHT = 8.0
"""Pseudo-observations per bin at the score itself (the seed before any step was verified)."""

RECENT = 8
"""Sized forwards :meth:`ValueRule.budget` looks back over."""

GROWTH, SLACK = 2, 2
"""A step drafts at most ``GROWTH x`` the largest size of the last :data:`RECENT` forwards ``+ SLACK``
nodes a row (:meth:`ValueRule.budget`): room to grow, doubling a step, without drafting and scoring
the whole budget where the rule keeps a few nodes."""


CENTRES = np.sqrt(EDGES[:-1] * EDGES[1:])
"""``[16]`` the bins' geometric centres."""
_EDGE_LIST = EDGES.tolist()

DEFAULT_PRIOR = np.sqrt(CENTRES)
"""``[16]`` the seed of a bin without a calibrated rate: the square root of its centre score. The
best-first score understates acceptance (its confidence weight halves q at every context seen once,
and q is the store's, not the target's), and a seed of the score itself would keep low-score nodes
from ever being drafted, so never observed (docs/decisions.md)."""


class AcceptanceMap:
    """P(path accepted) from a node's best-first score, learned online (module docstring).

    Args:
        prior: ``[kinds, 16]`` float the seed per bin (row 0 drawn nodes, row 1 copied, ...), each in
            [0, 1], weighted :data:`PRIOR_WEIGHT` pseudo-observations (e.g. an offline calibration's
            rates, :meth:`stand_runtime.sizing.acceptance_seed.AcceptanceSeed.prior`); None =
            :data:`DEFAULT_PRIOR` for every kind.
        kinds: kinds of node learned apart (2: drawn, copied; a vLLM chain adds its fallback
            store's positions, :mod:`stand_runtime.drafters.chain_budget`). A node's kind is an
            index: ``copied`` arguments take a bool array (drawn 0, copied 1) or ints below ``kinds``.

    Raises:
        StandError: a prior of another shape or with values outside [0, 1].
    """

    def __init__(self, prior: np.ndarray | None = None, kinds: int = 2) -> None:
        if prior is None:
            prior = np.tile(DEFAULT_PRIOR, (kinds, 1))  # kind x bins
        prior = np.asarray(prior, dtype=np.float64)
        if prior.shape != (kinds, len(CENTRES)) or not np.all((prior >= 0) & (prior <= 1)):
            raise StandError(f"an acceptance prior is [{kinds}, {len(CENTRES)}] rates in [0, 1], got shape {prior.shape}")
        self._prior = prior.copy()
        self._drafted = np.zeros((kinds, len(CENTRES)))
        self._accepted = np.zeros((kinds, len(CENTRES)))
        self._table: np.ndarray | None = None  # the fit of the counts so far (None: refit)

    @property
    def prior(self) -> np.ndarray:
        """``[kinds, 16]`` the seed per bin (a copy)."""
        return self._prior.copy()

    def add_counts(self, drafted: np.ndarray, accepted: np.ndarray) -> None:
        """Add ``[kinds, 16]`` counts of nodes drafted and accepted per kind and bin (e.g. an offline
        calibration's, :class:`stand_runtime.sizing.acceptance_seed.AcceptanceSeed`)."""
        self._drafted += np.asarray(drafted, dtype=np.float64).reshape(self._drafted.shape)
        self._accepted += np.asarray(accepted, dtype=np.float64).reshape(self._accepted.shape)
        self._table = None

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """``([kinds, 16], [kinds, 16])`` float: nodes observed and nodes whose path was accepted, per kind and bin."""
        return self._drafted.copy(), self._accepted.copy()

    @staticmethod
    def _bins(scores: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(EDGES, scores, side="right") - 1, 0, len(EDGES) - 2)

    def table(self) -> np.ndarray:
        """``[2, bins]`` the current estimate per bin (drawn, copied), non-decreasing in the score
        (isotonic: pool-adjacent-violators weighted by each bin's observations)."""
        if self._table is None:  # refit after new counts only (read-only: shared by every caller)
            weights = self._drafted + PRIOR_WEIGHT
            estimate = (self._accepted + PRIOR_WEIGHT * self._prior) / weights
            table = np.array([_isotonic(row, w) for row, w in zip(estimate, weights)])
            table.setflags(write=False)
            self._table = table
        return self._table

    def estimate(self, scores: np.ndarray, copied: np.ndarray, table: np.ndarray | None = None) -> np.ndarray:
        """``[n]`` P(path accepted) of nodes with these ``[n]`` scores (``copied``: ``[n]`` bool or kind);
        ``table``: a :meth:`table` computed once for several calls (None = computed here)."""
        table = self.table() if table is None else table
        return table[np.asarray(copied).astype(np.int64), self._bins(np.asarray(scores))]

    def estimator(self) -> Callable[[float, int], float]:
        """P(path accepted) of one node from its score and kind, on the table as it is now (fitted
        once: for many lookups within one step)."""
        table, edges, last = self.table().tolist(), _EDGE_LIST, len(EDGES) - 2

        def estimate(score: float, kind: int) -> float:  # :meth:`_bins` of one score, without numpy's per-call cost
            found = bisect_right(edges, score) - 1
            return table[kind][0 if found < 0 else last if found > last else found]

        return estimate

    def observe(self, scores: np.ndarray, copied: np.ndarray, accepted: np.ndarray) -> None:
        """Add one verified step: per drafted node its score, kind and whether its path was accepted."""
        kinds, bins = copied.astype(np.int64), self._bins(scores)
        np.add.at(self._drafted, (kinds, bins), 1.0)
        np.add.at(self._accepted, (kinds, bins), accepted.astype(np.float64))
        self._table = None


def _isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-decreasing fit of ``values`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(np.asarray(values, dtype=np.float64).tolist(), np.asarray(weights, dtype=np.float64).tolist()):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, c1), (m2, w2, c2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return np.array([mean for mean, _, count in blocks for _ in range(count)])


class ValueRule:
    """How many best-first nodes a step drafts (module docstring).

    Args:
        latency: the forward's cost model.
        acceptance: the calibrated acceptance map (None = a fresh one).
        batch_allocated: the engine sizes every row of a forward at once (one node budget spent over
            all rows' candidates, :mod:`stand_runtime.sizing.allocation`) and the drafter drafts its
            best-first order (up to :meth:`budget` nodes); False: each row's drafter sizes its own
            draft (:meth:`size`).
        nodes: the tree's node budget: the most candidates a row keeps (drawn nodes and the copy
            chain together); None = all offered.
        frozen: learn nothing: neither the acceptance map nor the latency model changes and no step
            explores (a frozen :class:`stand_runtime.sizing.session.SizingSession`), so a seeded call repeats.

    Attributes:
        sizes: every drafted row's chosen size, step by step (diagnostics).
        batches: batch-allocated: per forward the sizes of its rows (diagnostics).
        packing: batch-allocated: per forward of two rows or more the modelled tokens per second of the best packed
            allocation over the padded one's (what flattening the rows would gain); None (the default)
            records nothing: set a list to record it.
    """

    def __init__(self, latency: LatencyModel, acceptance: AcceptanceMap | None = None,
                 batch_allocated: bool = False, nodes: int | None = None, frozen: bool = False) -> None:
        self.latency = latency
        self.frozen = frozen
        self.acceptance = acceptance or AcceptanceMap()
        self.batch_allocated = batch_allocated
        self.nodes = nodes
        self._largest: deque[int] = deque(maxlen=RECENT)  # per sized forward its largest row size
        self.sizes: list[int] = []
        self.batches: list[tuple[int, ...]] = []
        self.packing: list[float] | None = None
        self.on_outcome: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None] | None = None
        """When set (a reliability collector, e.g. ``treeopt bench``'s), called per verified step with
        the drafted nodes' ``[n]`` scores, ``[n]`` copied flags, ``[n]`` P predicted when the step was
        sized, and ``[n]`` bool path accepted; the drafter records the prediction only while it is set."""
        self._predicted: dict[int, tuple[object, np.ndarray]] = {}
        self.on_forward: Callable[[tuple[int, ...], float, float, int, float], None] | None = None
        """When set (a collector, e.g. ``treeopt search``'s), called per timed batch-allocated forward
        with its rows' sizes, the tokens it was expected to emit and the seconds modelled when it was
        sized (:class:`stand_runtime.sizing.allocation.Allocation`), then the tokens it emitted and the
        seconds its step took."""
        self._forecast = None

    def size(self, scores: np.ndarray, copied: np.ndarray) -> int:
        """:meth:`size_p` of nodes with these ``[L]`` best-first scores (root excluded) and ``[L]`` bool
        copied flags, P from the acceptance map."""
        return self.size_p(self.acceptance.estimate(scores, copied) if len(scores) else np.zeros(0))

    def size_p(self, acceptance: np.ndarray) -> int:
        """The n in 0 .. L the first n candidates (``[L]`` their P, in the order they are taken) grow to
        while their expected tokens per second may still rise (:func:`.peak.bounded_peak_of`, on the
        latency model's t itself; 0 on the steps :func:`explores` names while the latency model explores)."""
        if len(acceptance) == 0 or self.exploring(len(self.sizes)):
            self.sizes.append(0)
            return 0
        gains = 1.0 + np.concatenate([[0.0], np.cumsum(acceptance)])
        best = bounded_peak_of(gains, self.latency.at_many(np.arange(1, len(gains) + LOOKAHEAD)))
        self.sizes.append(best)
        self.chose(best)
        return best

    def exploring(self, step: int, tokens: int | None = None) -> bool:
        """Whether the call's sized step ``step`` (0-based) drafts nothing to observe the root-only forward
        (``tokens`` in all; None = one a row) while it is unobserved (:func:`.latency_model.explores`;
        never when frozen)."""
        return not self.frozen and self.latency.explore(tokens) and explores(step)

    def observe_forward(self, tokens: int, seconds: float, emitted: int | None = None) -> None:
        """A forward over ``tokens`` tokens (all rows) took ``seconds`` and its step emitted ``emitted``
        tokens: the latency model corrects itself from it (:meth:`LatencyModel.observe`), unless frozen;
        the forecast :meth:`forecast` kept for it goes to :attr:`on_forward` with the outcome."""
        if not self.frozen:
            self.latency.observe(tokens, seconds)
        forecast, self._forecast = self._forecast, None
        if forecast is not None and emitted is not None and self.on_forward is not None:
            self.on_forward(forecast.sizes, forecast.expected, forecast.seconds, int(emitted), float(seconds))

    def forecast(self, allocation) -> None:
        """Keep the allocation a batch forward was sized with (None: an exploring forward, nothing
        predicted) until its step is observed (:meth:`observe_forward`); only while :attr:`on_forward` is set."""
        self._forecast = allocation if self.on_forward is not None else None

    def chose(self, largest: int) -> None:
        """Record a sized forward's largest row size (for :meth:`budget`); exploring forwards are not recorded."""
        self._largest.append(int(largest))

    def budget(self, nodes: int) -> int:
        """Drawn nodes a row's best-first draft needs this step (or copied tokens its chain offers), at
        most ``nodes``: :data:`GROWTH` times the largest size the rule chose over the last
        :data:`RECENT` sized forwards plus :data:`SLACK` (``nodes`` before any). Lossless: it reads past
        steps only, and a best-first draft with a smaller budget is the prefix of the larger one's order
        (:func:`stand_runtime.store.drafting.best_first_draft` stops at its budget)."""
        if not self._largest:
            return nodes
        return min(nodes, GROWTH * max(self._largest) + SLACK)

    def size_draft(self, draft: Draft) -> Draft:
        """``draft`` (drawn nodes in best-first order, its copy chain pending in ``draft.pending_chain``) cut to
        the candidates :meth:`size_p` keeps (:func:`candidates`, the best :attr:`nodes` at most: drawn
        nodes and the chain beside them share the tree's budget), the chain's kept tokens grafted; the P
        predicted for the kept nodes is remembered for the outcome (:meth:`remember`)."""
        found = candidates(draft, self.acceptance, limit=self.nodes)
        sized, predicted = found.realize(self.size_p(found.p))
        self.remember(sized, predicted)
        return sized

    def remember(self, draft, predicted: np.ndarray) -> None:
        """Keep ``[n]`` the P predicted for ``draft``'s nodes when it was sized (by the drafter or the
        batch allocator) until its outcome is observed (:meth:`recall`); only while
        :attr:`on_outcome` is set."""
        if self.on_outcome is not None:
            self._predicted[id(draft)] = (draft, predicted)

    def recall(self, draft) -> np.ndarray | None:
        """The P :meth:`remember` kept for ``draft`` (forgotten now), or None."""
        found = self._predicted.pop(id(draft), None)
        return found[1] if found is not None and found[0] is draft else None

    def observe(self, scores: np.ndarray, copied: np.ndarray, accepted: Sequence[int],
                predicted: np.ndarray | None = None) -> None:
        """Add a verified step's outcome: nodes 1..n of the draft, ``accepted`` their accepted positions;
        ``predicted`` (``[n]``, what :meth:`size` estimated for them) goes to :attr:`on_outcome`."""
        outcome = np.zeros(len(scores), dtype=bool)
        outcome[[a - 1 for a in accepted if 0 < a <= len(scores)]] = True
        if self.on_outcome is not None and predicted is not None and len(predicted) == len(scores):
            self.on_outcome(scores, copied, predicted, outcome)
        if not self.frozen:
            self.acceptance.observe(scores, copied, outcome)
