"""What a drafter hands to the engine for one decoding step: a token tree with its draft distributions.

A :class:`Draft` is a tree of tokens, root first, in the order its drafter added them (breadth-first
for a static tree, best-first for STAND's dynamic tree): the root is the last committed token
(sampled, not yet in the KV cache), and every other node's parent and elder siblings come before it.
Verification (:mod:`stand_runtime.verify`) and the tree forward (:mod:`stand_runtime.target.forward`)
read only ``tokens``, ``parents``, ``depths``, ``children`` and the per-node draft distributions, so
every drafter goes through the same lossless path.

Per node with children, the draft distribution q the children were drawn from (docs/algorithms.md §3.1, §4.3):
``draft_ids[v]`` its support ``[k]`` and ``draft_probs[v]`` q on it; ``slots[c]`` is the index of
child c's token in its parent's support. Drafts without probabilities (prompt lookup, Token
Recycling, suffix trees) leave ``draft_ids[v] = None`` and ``slots[c] = -1``, and are verified with
the deterministic-draft rule. A node may also hold *copied* children after its drawn ones (STAND's
copy path, :func:`stand_runtime.trees.tree_walk.graft_chain`): tokens fixed before any draw,
verified by the deterministic-draft rule once the drawn siblings are rejected; their token is in the
parent's support with q = 0 when q never proposed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from ..checks import check_int
from ..errors import StandError


@dataclass(frozen=True, eq=False)
class Draft:
    """The token tree of one decoding step, root first, parents and elder siblings before each node.

    Attributes (``n`` = forwarded nodes, root included):
        tokens: ``[n]`` token ids; ``tokens[0]`` is the root (the last committed token).
        parents: ``[n]`` int64 position of each node's parent in this draft (``-1`` for the root).
        depths: ``[n]`` int64 depth (root 0).
        children: per node, the positions of its children in drawing order.
        draft_ids: per node with children drawn from a distribution, the ``[k]`` int64 support of q;
            ``None`` for a node without children or whose children carry no probabilities.
        draft_probs: per such node, ``[k]`` float64 q on that support (sums to 1); else ``None``.
        slots: per node, the index of its token in its parent's ``draft_ids``; ``-1`` for the root
            and for children of a node without ``draft_ids``.
        stochastic: True when children were sampled from q (Gumbel-Top-K), False when they were
            chosen deterministically (q's top-m, or a drafter without probabilities).
        nodes: ``[n]`` int64 static-tree node filled by each token (``nodes[0] = 0``), or None for a
            draft built without a static tree.
        copied: positions of copied children: tokens fixed before drafting (not drawn from the
            parent's q), placed after their drawn siblings and verified by the deterministic-draft rule.
        scores: ``[n]`` float64 the drafter's estimate that the path to each node is accepted, or
            None: the dynamic tree's best-first key (its parent's path score x confidence x q *at the
            node's rank*, never q of its own drawn token, so a rule sizing the draft by it never reads
            the draw it decides on; a copied node: its parent's path score, or its chain position's,
            :func:`stand_runtime.sizing.value.value_scores`); ``scores[0] = 1``.
        pending_chain: a copy chain not grafted yet (empty: none), kept apart in a value-sized draft
            until the expected-value rule decides how many tokens to graft
            (:func:`stand_runtime.sizing.value.candidates`); :func:`truncate_draft` drops it.
        copy_rate: the factor r of a value-sized draft's copy chain (its j-th token scored ``r ** j``,
            :func:`stand_runtime.sizing.value.match_rate`); None = the default decay
            (:data:`stand_runtime.store.drafting.COPY_DECAY`).
    """

    tokens: list[int]
    parents: np.ndarray
    depths: np.ndarray
    children: list[list[int]]
    draft_ids: list[np.ndarray | None]
    draft_probs: list[np.ndarray | None]
    slots: list[int]
    stochastic: bool
    nodes: np.ndarray | None = None
    copied: frozenset = frozenset()
    scores: np.ndarray | None = None
    pending_chain: tuple = ()
    copy_rate: float | None = None
    _mask: list = field(default_factory=list, repr=False)

    @property
    def num_nodes(self) -> int:
        """Drafted nodes, root excluded."""
        return len(self.tokens) - 1

    def ancestor_mask(self) -> torch.Tensor:
        """``[n, n]`` bool, ``[i, j]`` True iff j is i or an ancestor of i (cached): a node's row is its
        parent's row plus its own bit (EAGLE-2)."""
        if not self._mask:
            n = len(self.tokens)
            mask = np.zeros((n, n), dtype=bool)
            mask[0, 0] = True
            for node in range(1, n):
                mask[node] = mask[self.parents[node]]
                mask[node, node] = True
            self._mask.append(torch.from_numpy(mask))
        return self._mask[0]

    def path(self, node: int) -> list[int]:
        """Tokens on the path root → ``node``, root excluded."""
        out = []
        while node > 0:
            out.append(self.tokens[node])
            node = int(self.parents[node])
        return out[::-1]

    @classmethod
    def root_only(cls, root_token: int) -> "Draft":
        """A step with nothing drafted (plain decoding)."""
        return DraftBuilder(root_token).build(stochastic=False)

    @classmethod
    def chain(cls, root_token: int, tokens: Sequence[int]) -> "Draft":
        """A chain root → tokens[0] → tokens[1] → ... without draft probabilities.

        Raises:
            StandError: a token that is not an integer >= 0, or ``tokens`` not a sequence of them."""
        if isinstance(tokens, (str, bytes)) or not isinstance(tokens, (Sequence, np.ndarray)):
            raise StandError(f"a chain's tokens must be a sequence of token ids, got {tokens!r}")
        builder = DraftBuilder(check_int("root token", root_token, 0))
        parent = 0
        for token in tokens:
            parent = builder.add(parent, check_int("chain token", token, 0))
        return builder.build(stochastic=False)


class DraftBuilder:
    """Grows a :class:`Draft` node by node; parents must be added before their children.

    Args:
        root_token: the last committed token.
        static: record static-tree node indices (``add(..., static_node=...)``).
    """

    def __init__(self, root_token: int, static: bool = False) -> None:
        self.tokens = [int(root_token)]
        self.parents = [-1]
        self.depths = [0]
        self.children: list[list[int]] = [[]]
        self.draft_ids: list[np.ndarray | None] = [None]
        self.draft_probs: list[np.ndarray | None] = [None]
        self.slots = [-1]
        self.copied: set[int] = set()
        self.nodes: list[int] | None = [0] if static else None

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_draft(cls, draft: Draft) -> "DraftBuilder":
        """A builder holding ``draft``'s nodes (to add more after them, e.g. a copy chain)."""
        builder = cls(draft.tokens[0], static=draft.nodes is not None)
        builder.tokens = list(draft.tokens)
        builder.parents = [int(p) for p in draft.parents]
        builder.depths = [int(d) for d in draft.depths]
        builder.children = [list(kids) for kids in draft.children]
        builder.draft_ids = list(draft.draft_ids)
        builder.draft_probs = list(draft.draft_probs)
        builder.slots = list(draft.slots)
        builder.copied = set(draft.copied)
        builder.nodes = None if draft.nodes is None else [int(v) for v in draft.nodes]
        return builder

    def set_distribution(self, node: int, ids: np.ndarray, probs: np.ndarray) -> None:
        """Record q (support ``ids`` ``[k]`` int64, ``probs`` ``[k]`` float64) that ``node``'s
        children are drawn from; call before adding them with their ``slot``."""
        self.draft_ids[node] = ids
        self.draft_probs[node] = probs

    def add(self, parent: int, token: int, slot: int = -1, static_node: int | None = None) -> int:
        """Append ``token`` as the next child of ``parent``; returns its position.

        Raises:
            StandError: ``parent`` is not a position already in the draft.
        """
        if not 0 <= parent < len(self.tokens):
            raise StandError(f"draft parent {parent} is not an earlier node (0..{len(self.tokens) - 1})")
        position = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.children.append([])
        self.children[parent].append(position)
        self.draft_ids.append(None)
        self.draft_probs.append(None)
        self.slots.append(slot)
        if self.nodes is not None:
            self.nodes.append(-1 if static_node is None else static_node)
        return position

    def add_copy(self, parent: int, token: int) -> int:
        """Append ``token`` as a copied child of ``parent`` (module docstring) after the children already
        there; returns its position. A q of ``parent`` that lacks the token gets it with probability 0."""
        ids = self.draft_ids[parent] if 0 <= parent < len(self.tokens) else None
        slot = -1
        if ids is not None:
            hits = np.flatnonzero(ids == token)
            if hits.size:
                slot = int(hits[0])
            else:
                slot = len(ids)
                self.draft_ids[parent] = np.append(ids, np.int64(token))
                self.draft_probs[parent] = np.append(self.draft_probs[parent], 0.0)
        position = self.add(parent, token, slot)
        self.copied.add(position)
        return position

    def build(self, stochastic: bool, scores=None) -> Draft:
        """The finished draft.

        Raises:
            StandError: two children of one node carry the same token (verification would count
                that token twice and over-accept it).
        """
        for node, kids in enumerate(self.children):
            if len(kids) > 1 and len({self.tokens[c] for c in kids}) < len(kids):
                raise StandError(f"draft node {node} has duplicate children {[self.tokens[c] for c in kids]}")
        return Draft(
            tokens=self.tokens,
            parents=np.asarray(self.parents, dtype=np.int64),
            depths=np.asarray(self.depths, dtype=np.int64),
            children=self.children,
            draft_ids=self.draft_ids,
            draft_probs=self.draft_probs,
            slots=self.slots,
            stochastic=stochastic,
            nodes=None if self.nodes is None else np.asarray(self.nodes, dtype=np.int64),
            copied=frozenset(self.copied),
            scores=None if scores is None else np.asarray(scores, dtype=np.float64),
        )


def truncate_draft(draft: Draft, max_nodes: int) -> Draft:
    """The first ``max_nodes`` drafted nodes of ``draft`` (every kept node keeps its parent), with the
    same draft distributions: a prefix of each node's children in drawing order, so verification stays
    lossless (a stochastic node's first children are still a without-replacement draw from q)."""
    n = max_nodes + 1
    children = [[c for c in kids if c < n] for kids in draft.children[:n]]
    return Draft(
        tokens=draft.tokens[:n],
        parents=draft.parents[:n],
        depths=draft.depths[:n],
        children=children,
        draft_ids=[ids if children[v] else None for v, ids in enumerate(draft.draft_ids[:n])],
        draft_probs=[probs if children[v] else None for v, probs in enumerate(draft.draft_probs[:n])],
        slots=draft.slots[:n],
        stochastic=draft.stochastic,
        nodes=None if draft.nodes is None else draft.nodes[:n],
        copied=frozenset(c for c in draft.copied if c < n),
        scores=None if draft.scores is None else draft.scores[:n],
    )
