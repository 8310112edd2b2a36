"""Drafting a static tree from the n-gram store (STAND paper §3.2).

For a node v with m children in the static tree, look up q(. | context(v)) in the store and draw m
distinct tokens from it:

- stochastic (STAND): Gumbel-Top-K. The top-m indices of ``log q + g`` with g ~ Gumbel(0, 1) i.i.d.
  are m draws *without replacement* from q, in drawing order (Kool et al., 2019, "Stochastic Beams and
  Where to Find Them", §2; Vieira, 2014). The drawing order is the child order, which is what
  recursive rejection sampling in :mod:`stand_runtime.verify` assumes.
- deterministic (the paper's ablation, and greedy decoding): the m most likely tokens of q.

context(v) = committed tokens + the drafted tokens on the path to v. A node whose lookup misses gets
no children, and a node whose q has fewer than m tokens gets fewer children; the static nodes below
an empty slot are dropped from the step (the forward shrinks, it is never padded with junk).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ngram_store import NGramStore
from .randomness import RandomStream
from .tree import DraftTree


def gumbel_top_k(log_q: np.ndarray, m: int, gumbel: np.ndarray) -> np.ndarray:
    """Indices of m draws without replacement from q, in drawing order (Gumbel-Top-K).

    Args:
        log_q: ``[..., k]`` float log-probabilities (``-inf`` for impossible entries).
        m: draws per row, ``m <= k``.
        gumbel: ``[..., k]`` fresh standard Gumbel noise (never reused).

    Returns:
        ``[..., m]`` int64 indices into the last axis, the first draw first.
    """
    keys = log_q + gumbel
    if m == 1:
        return np.argmax(keys, axis=-1)[..., None]
    return np.argsort(-keys, axis=-1, kind="stable")[..., :m]


@dataclass(frozen=True, eq=False)
class Draft:
    """The drafted part of a static tree for one decoding step, root first, breadth-first.

    Attributes (``n`` = forwarded nodes, root included):
        nodes: ``[n]`` int64 static-tree node index of each forwarded node (``nodes[0] = 0``).
        tokens: ``[n]`` token ids; ``tokens[0]`` is the root (the last committed token).
        parents: ``[n]`` int64 position of each node's parent in this draft (``-1`` for the root).
        depths: ``[n]`` int64 depth (root 0).
        children: per forwarded node, the positions of its drafted children in drawing order.
        slots: per forwarded node, the index of its token in its parent's ``draft_ids`` (root -1).
        draft_ids: per forwarded node with children, the ``[k]`` int64 support of q its children were
            drawn from; ``None`` for a node without children.
        draft_probs: per such node, ``[k]`` float64 q on that support (sums to 1).
        stochastic: True when children were sampled (Gumbel-Top-K), False when they are q's top-m.
    """

    nodes: np.ndarray
    tokens: list[int]
    parents: np.ndarray
    depths: np.ndarray
    children: list[list[int]]
    slots: list[int]
    draft_ids: list[np.ndarray | None]
    draft_probs: list[np.ndarray | None]
    stochastic: bool

    @property
    def num_nodes(self) -> int:
        """Drafted nodes, root excluded."""
        return len(self.tokens) - 1

    @classmethod
    def root_only(cls, root_token: int) -> "Draft":
        """A step with nothing drafted (plain decoding)."""
        return cls(np.zeros(1, dtype=np.int64), [root_token], np.full(1, -1), np.zeros(1, dtype=np.int64), [[]], [-1], [None], [None], False)


def draft_tree(
    tree: DraftTree,
    store: NGramStore,
    context: list[int],
    randomness: RandomStream | None,
    max_depth: int | None = None,
) -> Draft:
    """Draft tokens into ``tree`` for the next step.

    Args:
        tree: the static draft tree.
        store: the n-gram store to draw q from.
        context: committed tokens, the last one being the root (at least one token).
        randomness: noise source for Gumbel-Top-K; ``None`` drafts deterministically (top-m of q).
        max_depth: draft no node deeper than this (e.g. the tokens still allowed); None = no limit.

    Returns:
        The :class:`Draft` (root plus every node whose ancestors' lookups hit).
    """
    max_n = store.max_n
    deepest = tree.max_depth if max_depth is None else min(max_depth, tree.max_depth)
    nodes = [0]
    tokens = [context[-1]]
    parents = [-1]
    depths = [0]
    suffixes = [tuple(context[-max_n:])]
    children: list[list[int]] = [[]]
    slots = [-1]
    draft_ids: list[np.ndarray | None] = [None]
    draft_probs: list[np.ndarray | None] = [None]
    position = 0
    while position < len(nodes):
        static_children = tree.children[nodes[position]]
        if static_children and depths[position] < deepest:
            entry = store.lookup(suffixes[position])
            if entry is not None:
                m = min(len(static_children), len(entry.id_list))
                if randomness is None:
                    order = range(m)
                else:
                    order = gumbel_top_k(entry.log_q, m, randomness.gumbel(len(entry.id_list))).tolist()
                draft_ids[position] = entry.ids
                draft_probs[position] = entry.q
                for rank, index in enumerate(order):
                    token = entry.id_list[index]
                    children[position].append(len(nodes))
                    nodes.append(static_children[rank])
                    tokens.append(token)
                    parents.append(position)
                    depths.append(depths[position] + 1)
                    suffixes.append((suffixes[position] + (token,))[-max_n:])
                    children.append([])
                    slots.append(index)
                    draft_ids.append(None)
                    draft_probs.append(None)
        position += 1
    return Draft(
        nodes=np.asarray(nodes, dtype=np.int64),
        tokens=tokens,
        parents=np.asarray(parents, dtype=np.int64),
        depths=np.asarray(depths, dtype=np.int64),
        children=children,
        slots=slots,
        draft_ids=draft_ids,
        draft_probs=draft_probs,
        stochastic=randomness is not None,
    )
