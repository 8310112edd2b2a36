"""A value-sized step's candidates: the drawn nodes and the copy chain in the one order the
expected-value rule takes them (ours; docs/algorithms.md §3.7).

A value-sized dynamic tree (:mod:`.value`) drafts its best-first order and keeps the copy chain (prompt
lookup's continuation of the context, :mod:`.tree_walk`) apart, pending (``Draft.pending_chain``). The
chain's tokens are fixed before any draw, so the j-th is a candidate scored ``r ** j``, r the chain's
rate from the length of the suffix it matched (:func:`match_rate`; :func:`value_scores`: the copied
kind's bins of the acceptance map learn P per match and chain position), and
:func:`candidates` merges both sequences, taking whichever's next candidate has the higher P. The rule
then keeps a prefix of that order and :meth:`Candidates.realize` builds its draft: the kept drawn
nodes (a prefix of the best-first order) with the chain's kept tokens grafted onto them, following
drawn children that equal them, the rest as copied nodes after their drawn siblings.

Losslessness: the order up to a candidate reads only the drawn nodes' keys (q at rank, never the
token drawn there) and the chain, so whether a candidate is kept never reads its own draw nor any
after it; a fixed chain grafted onto a lossless prefix is verified after the drawn children it hangs
beside (docs/algorithms.md §9.3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import StandError
from ..store.drafting import COPY_DECAY
from ..trees.draft import Draft, DraftBuilder, truncate_draft
from ..trees.tree_walk import attach_chain

if TYPE_CHECKING:  # the map is read, never built, here
    from .value import AcceptanceMap

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
