"""The breadth-first walk that fills a static draft tree, and the child-choice rule (STAND §3.2).

Every tree drafter (STAND's store, Token Recycling's matrix) fills a static tree the same way: walk
the tree breadth-first from the root; at a node with m static children, ask the drafter's
``propose(context, m)`` for up to m child tokens; a node whose proposal is empty gets no children
and the static nodes below it are dropped from the step (the forward shrinks, it is never padded
with junk). context(v) = committed tokens + the drafted tokens on the path to v.

STAND's proposals choose children by :func:`stand_runtime.gumbel.choose_children`, the rule
replay calibration (:mod:`treeopt.replay`) also uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..draft import Draft, DraftBuilder
from ..tree import DraftTree


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


Propose = Callable[[tuple, int], "Proposal | None"]
"""``propose(context, m)``: ``context`` is the last ``max_n`` tokens before the node's children
(the node's own token last); returns up to m children, or None on a miss."""


def fill_tree(tree: DraftTree, context: list[int], max_n: int, propose: Propose, stochastic: bool,
              max_depth: int | None = None) -> Draft:
    """Draft tokens into ``tree`` breadth-first for the next step.

    Args:
        tree: the static draft tree.
        context: committed tokens, the last one being the root (at least one token).
        max_n: context tokens ``propose`` needs (the store's longest n; 1 for Token Recycling).
        propose: the drafter's proposal for one node (see :data:`Propose`).
        stochastic: the children were sampled from q (recorded in the draft for verification).
        max_depth: draft no node deeper than this (e.g. the tokens still allowed); None = no limit.

    Returns:
        The :class:`Draft` (root plus every node whose ancestors' proposals hit), with ``nodes``.
    """
    deepest = tree.max_depth if max_depth is None else min(max_depth, tree.max_depth)
    builder = DraftBuilder(context[-1], static=True)
    suffixes = [tuple(context[-max_n:])]
    position = 0
    while position < len(builder):
        static_children = tree.children[builder.nodes[position]]
        if static_children and builder.depths[position] < deepest:
            proposal = propose(suffixes[position], len(static_children))
            if proposal is not None and proposal.tokens:
                if proposal.ids is not None:
                    builder.set_distribution(position, proposal.ids, proposal.probs)
                for rank, token in enumerate(proposal.tokens[: len(static_children)]):
                    slot = proposal.slots[rank] if proposal.slots is not None else -1
                    builder.add(position, token, slot, static_children[rank])
                    suffixes.append((suffixes[position] + (token,))[-max_n:])
        position += 1
    return builder.build(stochastic)
