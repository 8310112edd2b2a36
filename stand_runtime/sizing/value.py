"""Drafts sized by what they are worth: the expected-value rule of a value-sized dynamic tree (ours;
docs/algorithms.md §3.7, §9.3).

A step that forwards the root and n drafted nodes emits ``1 + sum_i P_i`` tokens in expectation
(``P_i``: the chance that the whole path to node i is accepted; Sequoia, Chen et al., 2024, §3) and
costs ``t(1 + n)`` seconds of target forward. The rule drafts the prefix of the step's candidates
that maximises expected tokens per second,

    n* = argmax_n (1 + sum_{i <= n} P_i) / t(1 + n),    n = 0 .. budget,

so zero nodes is an answer where nothing the store knows pays for the tokens it adds to the forward.
This module holds the rule's parts in the order a step uses them:

- **Candidates** (:func:`candidates`, :class:`Candidates`): the drawn nodes in best-first order
  (:mod:`stand_runtime.store.drafting`) and the copy chain (prompt lookup's continuation of the
  context, pending in ``Draft.pending_chain``) merged into one order by P. The chain's tokens are fixed
  before any draw, so its j-th is a candidate scored ``r ** j``, r from the length of the suffix it
  matched (:func:`match_rate`). :meth:`Candidates.realize` builds the kept prefix's draft: the kept
  drawn nodes with the chain's kept tokens grafted onto them.
- **Stopping rules** (:func:`bounded_peak_of`, the reference :func:`first_peak`): the n taken is where
  the draft stops growing: it grows while a size just ahead, the later nodes forecast from the ones
  taken, may still beat the best rate passed (on a convex cost the curve's first peak).
- :class:`AcceptanceMap`: ``P_i`` from the node's score (the path's product of q at rank and the
  store's confidence; a copied token's ``r ** j``), binned on a log scale, drawn and copied nodes
  apart, seeded (8 pseudo-observations per bin) with an offline calibration's rate per bin where one
  was measured for the model (:mod:`stand_runtime.sizing.acceptance_seed`), else with the score
  itself, and kept monotone in the score; each verified step adds, per drafted node, whether its path
  was accepted.
- :class:`.latency_model.LatencyModel` gives ``t(n)``: a latency profile corrected by the run's own
  forward times.
- :class:`ValueRule`: one decoding call's rule over the two estimates. In a batch the same rule sizes
  every row at once (:mod:`stand_runtime.sizing.allocation`).

Losslessness: whether candidate k is drafted depends on the scores of candidates 1..k (each read q at
rank, never the token a draw gave at the node: ``Draft.scores``), on the chain (fixed before any draw)
and on outcomes of earlier steps, never on node k's own draw or anything drawn after it; a prefix of
the best-first order is a lossless draft (:func:`stand_runtime.trees.draft.truncate_draft`), and a
fixed chain grafted onto it is verified after the drawn children it hangs beside.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from ..errors import StandError
from ..store.drafting import COPY_DECAY
from ..trees.draft import Draft, DraftBuilder, truncate_draft
from ..trees.tree_walk import attach_chain
from .latency_model import LatencyModel, explores

COPY_NGRAM = 8
"""Longest suffix a value-sized copy chain matches (tokens; the blended store's longest context): a longer
match is a surer copy (:func:`match_rate`)."""


def match_rate(match: int, longest: int = COPY_NGRAM) -> float:
    """r of a copy chain whose suffix matched ``match`` tokens, ``longest`` the index's n-gram length:
    ``COPY_DECAY ** (1 + longest - match)`` up to ``longest``, so the j-th copied token of a chain after
    a match of ``longest`` tokens scores ``COPY_DECAY ** j`` and one after a single token far less.
    Measured in vLLM (HumanEval x 1, 128 tokens): with every copy scored alike and matches of at most 3
    tokens STAND's chains reached τ 1.60; scored by a match of up to 8 tokens, τ 2.31 (SuffixDecoding
    1.87). A match measured beyond ``longest`` (:data:`stand_runtime.drafters.suffix_index.MAX_MATCH`)
    decays slower, ``COPY_DECAY ** (longest / match)``: a span repeated for 64 tokens (a loop, a copied
    block) is still scored 0.5 at its 25th copied token, where one matched for 8 is at 0.004."""
    if match > longest:
        return COPY_DECAY ** (longest / match)
    return COPY_DECAY ** (1 + max(0, longest - match))


def chain_rate(draft: Draft) -> float:
    """``draft``'s copy rate r (:attr:`Draft.copy_rate`, :data:`COPY_DECAY` when unset)."""
    return COPY_DECAY if draft.copy_rate is None else draft.copy_rate


def value_scores(draft: Draft) -> np.ndarray:
    """``[n]`` float64 the scores the acceptance map reads for ``draft``'s nodes (root excluded): a drawn
    node's best-first key, a copied node ``r ** depth`` (:func:`chain_rate`; the chain starts at the root,
    so its depth is its position in the chain).

    Raises:
        StandError: a draft without scores (not drafted by the dynamic tree).
    """
    if draft.scores is None:
        raise StandError("value-sized drafts are scored drafts (the dynamic tree's); this draft has no scores")
    scores = np.array(draft.scores[1:], dtype=np.float64)
    rate = chain_rate(draft)
    for c in draft.copied:
        scores[c - 1] = rate ** int(draft.depths[c])
    return scores


@dataclass(frozen=True)
class Candidates:
    """A value-sized step's candidates in the order the rule takes them (:func:`candidates`).

    Attributes:
        draft: the drafted nodes (root first, best-first order), the copy chain pending
            (``draft.pending_chain``, not grafted).
        p: ``[L]`` float64 P(path accepted) of each candidate, in order.
        from_chain: ``[L]`` bool, True where the candidate is the copy chain's next token.
        chain_p: ``[len(draft.pending_chain)]`` P of each chain token.
    """

    draft: Draft
    p: np.ndarray
    from_chain: np.ndarray
    chain_p: np.ndarray

    def realize(self, n: int) -> tuple[Draft, np.ndarray]:
        """The draft of the first ``n`` candidates: the drawn ones kept (a prefix of the best-first
        order, :func:`truncate_draft`), the chain's first tokens grafted onto them (following drawn
        children that equal them, the rest copied nodes after their drawn siblings); with ``[m]`` the
        P predicted for its m drafted nodes (root excluded)."""
        taken = int(self.from_chain[:n].sum())
        kept = truncate_draft(self.draft, n - taken)  # the pending chain dropped
        predicted = self.p[:n][~self.from_chain[:n]]
        if taken == 0:
            return kept, predicted
        chain, rate = self.draft.pending_chain, chain_rate(self.draft)
        builder = DraftBuilder.from_draft(kept)
        scores = list(kept.scores)
        added = []
        for node in attach_chain(builder, chain[:taken], len(chain)):
            depth = builder.depths[node]
            scores.append(rate ** depth)
            added.append(self.chain_p[depth - 1])
        built = replace(builder.build(kept.stochastic, scores), copy_rate=self.draft.copy_rate)
        return built, np.concatenate([predicted, added])


def candidates(draft: Draft, acceptance: AcceptanceMap, table: np.ndarray | None = None,
               limit: int | None = None) -> Candidates:
    """The step's candidates in the order the value rule takes them: the drawn nodes in best-first
    order and the pending copy chain's tokens (``draft.pending_chain``, j-th scored ``r ** j``, :func:`chain_rate`),
    merged by taking whichever's next candidate has the higher P (ties: the drawn node), at most
    ``limit`` (None = all).

    Lossless: the order up to a candidate reads only the drawn nodes' keys (q at rank) and the chain,
    fixed before any draw (module docstring).

    Args:
        draft: a dynamic tree's draft (scored), its copy chain pending.
        acceptance: the map P is read from; ``table``: its :meth:`AcceptanceMap.table` computed once.

    Raises:
        StandError: a draft with nodes but no scores.
    """
    table = acceptance.table() if table is None else table
    drawn = (acceptance.estimate(value_scores(draft), copied_mask(draft), table) if draft.num_nodes
             else np.zeros(0))
    chain = tuple(draft.pending_chain)
    chain_p = (acceptance.estimate(chain_rate(draft) ** np.arange(1.0, len(chain) + 1),
                                   np.ones(len(chain), dtype=np.int64), table) if chain else np.zeros(0))
    limit = len(drawn) + len(chain) if limit is None else min(limit, len(drawn) + len(chain))
    if not chain:
        return Candidates(draft, drawn[:limit], np.zeros(limit, dtype=bool), chain_p)
    drawn_p, copied_p = drawn.tolist(), chain_p.tolist()
    p, from_chain = [], []
    a = b = 0
    for _ in range(limit):
        if b < len(copied_p) and (a >= len(drawn_p) or copied_p[b] > drawn_p[a]):
            p.append(copied_p[b]), from_chain.append(True)
            b += 1
        else:
            p.append(drawn_p[a]), from_chain.append(False)
            a += 1
    return Candidates(draft, np.array(p), np.array(from_chain, dtype=bool), chain_p)


def copied_mask(draft: Draft) -> np.ndarray:
    """``[n]`` bool: which drafted nodes (root excluded) are copied."""
    mask = np.zeros(draft.num_nodes, dtype=bool)
    mask[[c - 1 for c in draft.copied]] = True
    return mask


def first_peak(gain: Callable[[int], float], seconds: Callable[[int], float], longest: int) -> int:
    """The n in 0 .. ``longest`` where ``gain(n) / seconds(1 + n)`` first stops rising: n grows while
    one more node raises the expected tokens per second.

    A stopping rule, not the argmax of the whole curve: whether n reaches k reads ``gain`` and
    ``seconds`` at sizes up to k only, so the choice to draft node k never looks at the nodes after
    it (which may depend on node k's drawn token, docs/algorithms.md §9.3). Where the gains are concave
    (each node's P at most its predecessor's, as the best-first order gives) and the cost is convex
    or linear in n, the first peak is the argmax.
    """
    n, rate = 0, gain(0) / seconds(1)
    while n < longest:
        grown = gain(n + 1) / seconds(n + 2)
        if not grown > rate:
            break
        n, rate = n + 1, grown
    return n


LOOKAHEAD = 8
"""Sizes past node k that :func:`bounded_peak_of` looks at (m = k .. k + 7): enough to cross the step
of a kernel change (where the forward's kernel changes, one token can cost as much as the next
several together)."""


def bounded_peak_of(gains: np.ndarray, seconds: np.ndarray, lookahead: int = LOOKAHEAD) -> int:
    """The n in 0 .. L a draft grows to while the sizes just ahead may still beat the best rate it
    has passed: node k is taken when some size m in k .. k + ``lookahead`` - 1 would reach a higher
    ``gains[m] / seconds[m]`` than every size before k, the increments after node k forecast from the
    prefix alone: the k-th increment ``d_k`` decaying geometrically at ``min(1, d_k / d_(k-1))`` (flat
    for the first node), past L too (how many candidates a step offers may depend on its draws).

    Unlike :func:`first_peak` it crosses a step in the cost (the forward's kernel changing with its
    row count) when the nodes past it can pay for it together, as a sure copy chain's do;
    on a convex cost with falling increments the two stop at the same n (the best one). It prices the
    true cost: a convex minorant priced such a step as a ramp and drafted unsure nodes past it. A
    stopping rule all the same: whether node k is taken reads ``gains`` up to k and ``seconds`` only
    (never the nodes after it nor how many there are: their scores and their number may read node k's
    draw), so it is lossless where :func:`first_peak` is; it may end past the best size it passed
    when the later nodes fall short of the forecast.

    Args:
        gains: ``[L + 1]`` expected tokens of the forward with n nodes, n = 0 .. L (NaN: stop there).
        seconds: ``[>= L + lookahead]`` seconds of the forward with n nodes, n = 0 .. L + lookahead - 1.
        lookahead: sizes looked at from each node on (>= 1; 1: :func:`first_peak`).

    Raises:
        ValueError: ``lookahead`` < 1 or ``seconds`` shorter than ``L + lookahead``.
    """
    gains = np.asarray(gains, dtype=np.float64).tolist()
    length = len(gains) - 1
    if lookahead < 1:
        raise ValueError(f"lookahead must be at least 1, not {lookahead}")
    if length <= 0:
        return 0
    if len(seconds) < length + lookahead:
        raise ValueError(f"bounded_peak_of needs the seconds of {length + lookahead} sizes, got {len(seconds)}")
    cost = np.asarray(seconds, dtype=np.float64)[: length + lookahead].tolist()
    # Node by node, in Python floats: the rule ends after a few nodes, where numpy's per-call cost over
    # all L x lookahead bounds is too high (tests/runtime/sizing/test_value.py keeps a numpy version as the reference).
    best = gains[0] / cost[0]  # the best rate over the sizes before node k
    previous = gains[1] - gains[0]
    for k in range(1, length + 1):
        step = gains[k] - gains[k - 1]
        decay = min(max(step / previous, 0.0), 1.0) if previous > 0 else 1.0
        if decay != decay:  # NaN gains: stop (as no bound beats the best)
            return k - 1
        added, power = 0.0, 1.0
        for j in range(lookahead):  # some size k + j may beat the best: take node k
            added += step * power
            power *= decay
            if (gains[k - 1] + added) / cost[k + j] > best:
                break
        else:
            return k - 1
        best = max(best, gains[k] / cost[k])
        previous = step
    return length


def seconds_of(seconds: Callable[[float], float], tokens: np.ndarray) -> np.ndarray:
    """``[m]`` ``seconds`` at each of ``tokens`` (int): in one call where it offers ``many``
    (:meth:`LatencyModel.frozen`), else one call per count."""
    many = getattr(seconds, "many", None)
    return many(tokens) if many is not None else np.array([seconds(float(t)) for t in tokens])


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
        while their expected tokens per second may still rise (:func:`.value.bounded_peak_of`, on the
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
