"""The breadth-first walk that fills a static draft tree, and the child-choice rule (STAND §3.2).

Every tree drafter (STAND's store, Token Recycling's matrix) fills a static tree the same way: walk
the tree breadth-first from the root; at a node with m static children, ask the drafter's
``propose(context, m)`` for up to m child tokens; a node whose proposal is empty gets no children and
the static nodes below it are dropped from the step (the forward shrinks, never padded with junk).

STAND's proposals choose children by :func:`stand_runtime.store.gumbel.choose_children`, the rule
replay calibration (:mod:`treeopt.optimize.replay`) also uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .draft import Draft, DraftBuilder
from .tree import DraftTree


@dataclass(frozen=True)
class Proposal:
    """Children proposed for one node, in drawing order.

    Attributes:
        tokens: child token ids (at most the m asked for; distinct).
        ids: ``[k]`` int64 support of the draft distribution q they were drawn from, or None.
        probs: ``[k]`` float64 q on that support, or None.
        slots: support index of each child (None when there is no q).
    """

    tokens: list[int]
    ids: np.ndarray | None = None
    probs: np.ndarray | None = None
    slots: list[int] | None = None


Propose = Callable[[tuple, int, int], "Proposal | None"]
"""``propose(context, m, depth)``: ``context`` is the last ``max_n`` tokens before the node's children
(the node's own token last), ``depth`` the node's depth (root 0: its children are the draft's first
tokens); returns up to m children, or None on a miss."""


MAX_CHAIN_DEPTH = 64
"""Deepest node a chain beyond the static tree (an extension's or a copy's) may reach when the step
sets no depth limit of its own."""


def fill_tree(tree: DraftTree, context: list[int], max_n: int, propose: Propose, stochastic: bool,
              max_depth: int | None = None, extend: "Extension | None" = None, graft: list[int] | None = None) -> Draft:
    """Draft tokens into ``tree`` breadth-first for the next step.

    Args:
        tree: the static draft tree.
        context: committed tokens, the last one being the root (at least one token).
        max_n: context tokens ``propose`` needs (the store's longest n; 1 for Token Recycling).
        propose: the drafter's proposal for one node (see :data:`Propose`).
        stochastic: the children were sampled from q (recorded in the draft for verification).
        max_depth: draft no node deeper than this (e.g. the tokens still allowed); None = no limit.
        extend: spend the static nodes that misses left empty on chains beyond the static tree
            (:class:`Extension`); None = the static tree only.
        graft: a deterministic continuation of ``context`` (e.g. a copy of what followed the same
            suffix earlier, :class:`stand_runtime.drafters.suffix_index.SuffixIndex`), grafted along
            the drafted path it matches (see :func:`graft_chain`); None = none.

    Returns:
        The :class:`Draft` (root plus every node whose ancestors' proposals hit), with ``nodes``.
    """
    deepest = tree.max_depth if max_depth is None else min(max_depth, tree.max_depth)
    builder = DraftBuilder(context[-1], static=True)
    suffixes = [tuple(context[-max_n:])]
    scores = [1.0]  # probability of each node's path under q (the extension's priority)
    missed: set[int] = set()
    position = 0
    while position < len(builder):
        static_children = tree.children[builder.nodes[position]]
        if static_children and builder.depths[position] < deepest:
            proposal = propose(suffixes[position], len(static_children), builder.depths[position])
            if proposal is not None and proposal.tokens:
                _add_children(builder, suffixes, scores, position, proposal, static_children, max_n)
            else:
                missed.add(position)
        position += 1
    deepest_allowed = max_depth if max_depth is not None else (extend.max_depth if extend is not None else MAX_CHAIN_DEPTH)
    grafted = graft_chain(builder, suffixes, scores, graft or (), max_n, deepest_allowed)
    if extend is not None:
        extend.grow(builder, suffixes, scores, missed, propose, max_n, deepest_allowed, grafted)
    return builder.build(stochastic)


def graft_chain(builder: DraftBuilder, suffixes: list, scores: list, chain, max_n: int, max_depth: int) -> int:
    """Graft a deterministic chain (a copy of what followed the same suffix earlier) onto a draft;
    returns the number of nodes added.

    The chain's tokens are followed down the drafted children that equal them; from the first node
    whose children lack the next token, the rest hangs there as copied nodes
    (:meth:`DraftBuilder.add_copy`), verified by the deterministic-draft rule once the drawn siblings
    are rejected (the copy is fixed before any draw). Each copied node's suffix and score (its
    parent's path score) are appended to ``suffixes`` and ``scores``.
    """
    added = 0
    for node in attach_chain(builder, chain, max_depth):
        suffixes.append((suffixes[builder.parents[node]] + (builder.tokens[node],))[-max_n:])
        scores.append(scores[builder.parents[node]])
        added += 1
    return added


def child_holding(builder: DraftBuilder, node: int, token: int) -> int | None:
    """The child of ``node`` that holds ``token`` (children hold distinct tokens), or None."""
    return next((kid for kid in builder.children[node] if builder.tokens[kid] == token), None)


def attach_chain(builder: DraftBuilder, chain, max_depth: int):
    """The walk of :func:`graft_chain`: follow ``chain`` down the children that equal its tokens and
    add the rest as copied nodes (no deeper than ``max_depth``); yields each copied node's position."""
    node = 0
    for token in chain:
        if builder.depths[node] >= max_depth:
            break
        match = child_holding(builder, node, token)
        if match is not None:  # a drafted child agrees (a copied node has no children yet)
            node = match
            continue
        node = builder.add_copy(node, int(token))
        yield node


def _add_children(builder: DraftBuilder, suffixes: list, scores: list, parent: int, proposal: Proposal,
                  static_children, max_n: int) -> None:
    if proposal.ids is not None:
        builder.set_distribution(parent, proposal.ids, proposal.probs)
    for rank, token in enumerate(proposal.tokens[: len(static_children)]):
        slot = proposal.slots[rank] if proposal.slots is not None else -1
        builder.add(parent, token, slot, static_children[rank])
        suffixes.append((suffixes[parent] + (token,))[-max_n:])
        scores.append(scores[parent] * (float(proposal.probs[slot]) if proposal.ids is not None else 1.0))


@dataclass(frozen=True)
class Extension:
    """Reassign the node budget that misses left unused: best-first chains beyond the static tree.

    Where a lookup misses, a static tree drops the whole subtree below it; the extension grows the
    draft back towards ``budget`` nodes: repeatedly the leaf whose path is most probable under q (the
    product of q along it) gets one child drawn from its own q (recorded with q, so verification
    stays lossless), as long as that path probability is at least ``min_score``.

    Attributes:
        budget: draft nodes per step at most (the static tree's size).
        min_score: smallest path probability worth a node.
        max_depth: deepest extension node when the step has no depth limit of its own.
    """

    budget: int
    min_score: float = 0.1
    max_depth: int = MAX_CHAIN_DEPTH

    def grow(self, builder: DraftBuilder, suffixes: list, scores: list, missed: set, propose: Propose, max_n: int,
             max_depth: int, grafted: int = 0) -> None:
        """Add extension nodes to ``builder`` in place (see the class docstring); ``grafted`` nodes
        of a copy chain do not count against the budget."""
        import heapq

        frontier = [(-scores[v], v) for v in range(len(builder))
                    if not builder.children[v] and v not in missed and builder.depths[v] < max_depth]
        heapq.heapify(frontier)
        while frontier and len(builder) - 1 - grafted < self.budget:
            negative, node = heapq.heappop(frontier)
            if -negative < self.min_score:
                break
            proposal = propose(suffixes[node], 1, builder.depths[node])
            if proposal is None or not proposal.tokens:
                continue
            _add_children(builder, suffixes, scores, node, proposal, (-1,), max_n)
            child = len(builder) - 1
            if builder.depths[child] < max_depth:
                heapq.heappush(frontier, (-scores[child], child))
