"""Drafting a tree from the store: a static tree filled (:func:`draft_tree`, STAND §3.2) or the dynamic
tree, its node budget spent best-first on the store's blended q (:func:`best_first_draft`, ours).

Each function takes either store: over a :class:`stand_runtime.store.native_store.NativeNGramStore`
the same draft is made in C++ (:mod:`.native_draft`); this module is where that is decided, and
nothing outside :mod:`stand_runtime.store` asks which store it has.

A static tree (:mod:`stand_runtime.trees.tree`, calibrated offline, STAND §3.3) fixes which rank paths a
step drafts; where a lookup misses or q is sharp, its subtree is dropped and the budget goes unused
(on recorded reasoning traces the 80-node tree drafted ~53 nodes a step). A dynamic tree instead
spends the budget each step where this step's q says acceptance is likely, as EAGLE-2 (Li et al.,
2024, §4) does with a draft model's confidence: every candidate node has a score, the product along
its path of q(token) times a confidence ``c / (c + confidence)`` in the count c of the context q
came from, and the best-scoring candidates are added until the budget is spent. q is the store's
blended distribution (:meth:`stand_runtime.NGramStore.blend`), so every node that was reached can
propose children even where its longest context is new.

Losslessness. Children are still drawn in order from q (Gumbel-Top-K for stochastic drafts, q's
order for deterministic ones) and verified by recursive rejection sampling
(:mod:`stand_runtime.verify`), which stays exact when the number of children a node gets depends on
anything but the draws it has not made yet. So the score of a node's next child uses the q value
*at that rank of q's sorted order*, not the token the Gumbel draw will give: whether the i-th child
is added never looks at that child. (Its own children's scores may use its token: that is a draw
already made.) For deterministic drafts the two coincide.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..trees.draft import Draft, DraftBuilder
from ..errors import StandError
from .ngram_store import NGramStore
from .native_store import NativeNGramStore
from ..randomness import DraftNoise
from .gumbel import choose_children
from ..trees.tree import MAX_DEPTH
from .native_draft import DraftRequest, native_best_first_draft, native_best_first_rows, native_fill_tree, root_token
from ..trees.tree import DraftTree
from ..trees.tree_walk import MAX_CHAIN_DEPTH, Extension, Proposal, child_holding, fill_tree, graft_chain

DYNAMIC = "dynamic"
"""The tree spec of STAND's dynamic tree (``dynamic`` = :data:`DYNAMIC_BUDGET` nodes, or
``dynamic-N`` for N nodes)."""

AUTO_SIZE = "auto"
"""``dynamic-auto[-N]``: the dynamic tree sized each step by the expected-value rule (:mod:`.value`)."""

DYNAMIC_BUDGET = 80
"""Default node budget of a dynamic tree (the paper's static tree size)."""

COPY_DECAY = 0.8
"""r of a copy chain whose match length is not known, and after a match of the index's longest suffix
(:func:`stand_runtime.sizing.value.match_rate`): its j-th token scores ``COPY_DECAY ** j``
(:func:`best_first_draft`, :func:`stand_runtime.sizing.value.value_scores`). Fixed before any draw,
lower the further it reaches (0.8: prompt lookup's later tokens are accepted 0.6-0.8 of the time once
the first one is, so the acceptance map's seed ``sqrt(score)`` starts near what chains return)."""

MAX_DYNAMIC_NODES = 1024
"""Largest node budget a dynamic tree takes (beyond the 625-node candidate tree; a step's forward
and ancestor mask grow with it)."""

DYNAMIC_MAX_N = 8
"""Longest context of the store a dynamic tree drafts from (the static tree's store: 3). Longer
contexts sharpen q where text repeats (docs/decisions.md)."""


@dataclass(frozen=True)
class DynamicTree:
    """STAND's dynamic draft tree: a node budget spent best-first every step (module docstring).

    Attributes:
        num_nodes: drafted nodes per step at most (copied nodes included).
        confidence: pseudo-count in a node's confidence ``c / (c + confidence)``.
        beta: the blend's weight of distinct ids (:meth:`NGramStore.blend`).
        max_depth: deepest node when the step sets no depth limit of its own.
        sized: value-sized: each step drafts the prefix of the best-first order with the most
            expected tokens per second (:mod:`.value`), ``num_nodes`` at most (spec ``dynamic-auto[-N]``).

    Raises:
        StandError: a budget outside 1..:data:`MAX_DYNAMIC_NODES`, a depth outside
            1..:data:`stand_runtime.trees.tree.MAX_DEPTH`, or a confidence or beta that is not a finite
            number >= 0.
    """

    num_nodes: int = DYNAMIC_BUDGET
    confidence: float = 1.0
    beta: float = 1.0
    max_depth: int = MAX_CHAIN_DEPTH
    sized: bool = False

    def __post_init__(self) -> None:
        for name, value, top in (("node budget", self.num_nodes, MAX_DYNAMIC_NODES), ("max_depth", self.max_depth, MAX_DEPTH)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= top:
                raise StandError(f"a dynamic tree needs a {name} from 1 to {top}, got {value!r}")
        for name, value in (("confidence", self.confidence), ("beta", self.beta)):
            if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
                    or not math.isfinite(value) or value < 0):
                raise StandError(f"dynamic tree {name} must be a finite number >= 0, got {value!r}")
        object.__setattr__(self, "num_nodes", int(self.num_nodes))
        object.__setattr__(self, "max_depth", int(self.max_depth))

    @property
    def name(self) -> str:
        return f"{DYNAMIC}-{AUTO_SIZE + '-' if self.sized else ''}{self.num_nodes}"


def parse_dynamic(spec) -> DynamicTree | None:
    """``"dynamic"`` / ``"dynamic-N"`` (a fixed budget of N nodes) or ``"dynamic-auto"`` /
    ``"dynamic-auto-N"`` (value-sized, N nodes at most) → a :class:`DynamicTree`; a DynamicTree passes
    through; any other spec → None (a static tree spec).

    Raises:
        StandError: ``dynamic-`` followed by anything but ``auto``, a node count >= 1, or both.
    """
    if isinstance(spec, DynamicTree):
        return spec
    if not isinstance(spec, str) or not (spec == DYNAMIC or spec.startswith(DYNAMIC + "-")):
        return None
    match = re.fullmatch(rf"{DYNAMIC}(-{AUTO_SIZE})?(?:-([1-9][0-9]*))?", spec)
    if match is None or (match.group(2) is not None and int(match.group(2)) > MAX_DYNAMIC_NODES):
        raise StandError(f"bad dynamic tree {spec!r}: write dynamic[-N] or dynamic-auto[-N] with N from 1 to "
                         f"{MAX_DYNAMIC_NODES} nodes")
    budget = DYNAMIC_BUDGET if match.group(2) is None else int(match.group(2))
    return DynamicTree(budget, sized=match.group(1) is not None)


def best_first_draft(tree: DynamicTree, store: NGramStore, context: list[int], randomness: DraftNoise | None,
                     max_depth: int | None = None, chain: list[int] | None = None, copy_rate: float = COPY_DECAY) -> Draft:
    """Draft a dynamic tree for the next step (module docstring).

    Args:
        tree: the budget and scoring settings.
        store: the n-gram store (its blended q drafts every node; a native one drafts in C++).
        context: committed tokens, the last one being the root (at least one token, else StandError).
        randomness: Gumbel noise for stochastic drafts (a :class:`~stand_runtime.randomness.DraftNoise`); None = q's order.
        max_depth: draft no node deeper than this (e.g. the tokens still allowed); None = no limit.
        chain: a copy chain continuing ``context``, fixed before any draw: its j-th token (from 1) takes
            a slot of the budget when its score ``copy_rate ** j`` beats every drawn candidate's key;
            those taken are grafted last (:func:`.tree_walk.graft_chain`). ``copy_rate`` in [0, 1].

    Returns:
        The :class:`Draft` (at most ``tree.num_nodes`` nodes): parents before children, each node's
        children in drawing order, the best-scoring first (a prefix is still a lossless draft), copied last.
    """
    if isinstance(store, NativeNGramStore):  # the same draft (:mod:`.native_draft`)
        return native_best_first_draft(tree, store, context, randomness, max_depth, chain, copy_rate)
    deepest = tree.max_depth if max_depth is None else min(max_depth, tree.max_depth)
    max_n, builder, noise = store.max_n, DraftBuilder(root_token(context)), randomness and randomness.at(len(context))
    # scores: the path's w·q(token) products; keys: each node's score when added (q at its rank): the draft's
    suffixes, scores, keys = [tuple(context[-max_n:])], [1.0], [1.0]
    drawn: dict[int, tuple] = {}  # node → (entry, drawing order of its support, confidence)
    # (-score, tie, node, rank): the node's child at that rank of its drawing order; rank -1: its lookup (lazy)
    heap: list[tuple] = [(-1.0, 0, 0, -1)]
    tie = 0  # insertion order breaks score ties
    copy = _CopyChain(list(chain or ()), copy_rate, deepest)

    def push(score: float, node: int, rank: int) -> None:
        nonlocal tie
        tie += 1
        heapq.heappush(heap, (-score, tie, node, rank))

    while len(builder) - 1 + copy.cost < tree.num_nodes and (heap or copy.more):
        if copy.more and (not heap or copy.score > -heap[0][0]):  # ties: the drawn candidate
            copy.take(builder)
            continue
        key, _, node, rank = heapq.heappop(heap)
        if rank < 0:  # look the node's q up and draw its children's order
            found = _look_up(tree, store, suffixes[node], noise, builder.depths[node])
            if found is not None:
                drawn[node] = found  # a child's score reads q at its *rank* of q's order, never the token drawn there
                builder.set_distribution(node, found[0].ids, found[0].q)
                push(scores[node] * found[2] * found[0].prob_list[0], node, 0)
            continue
        entry, order, weight = drawn[node]
        slot = order[rank]
        child, token = builder.add(node, entry.id_list[slot], slot), entry.id_list[slot]
        copy.drawn(node, child, token)
        keys.append(-key)
        suffixes.append((suffixes[node] + (token,))[-max_n:])
        scores.append(scores[node] * weight * entry.prob_list[slot])
        if rank + 1 < len(order):
            push(scores[node] * weight * entry.prob_list[rank + 1], node, rank + 1)
        if builder.depths[child] < deepest:
            push(scores[child], child, -1)
    graft_chain(builder, suffixes, scores, copy.chain[: copy.taken], max_n, deepest)
    return builder.build(randomness is not None, keys + scores[len(keys):])  # copied: the parent's path score


class _CopyChain:
    """A copy chain competing for a dynamic tree's budget (:func:`best_first_draft`): its j-th token
    (from 1) scores ``rate ** j``; of the ``taken`` tokens, the first ``on`` are drawn nodes already
    (from the root down to node ``at``), so ``cost``, the rest, is what the graft will add."""

    def __init__(self, chain: list[int], rate: float, deepest: int) -> None:
        self.chain, self.rate, self.copyable = chain, rate, min(len(chain), deepest)
        self.taken = self.on = self.at = 0

    @property
    def more(self) -> bool:
        return self.taken < self.copyable

    @property
    def score(self) -> float:
        return self.rate ** (self.taken + 1)

    @property
    def cost(self) -> int:
        return self.taken - self.on

    def take(self, builder: DraftBuilder) -> None:
        if self.on == self.taken:
            child = child_holding(builder, self.at, self.chain[self.taken])
            if child is not None:
                self.at, self.on = child, self.on + 1
        self.taken += 1

    def drawn(self, node: int, child: int, token: int) -> None:
        """A drawn ``child`` of ``node`` holding ``token`` was added: it may carry the next taken token."""
        if node == self.at and self.on < self.taken and token == self.chain[self.on]:
            self.at, self.on = child, self.on + 1


def _look_up(tree: DynamicTree, store: NGramStore, suffix: tuple, noise, depth: int) -> tuple | None:
    """A node's blended q, its children's drawing order (Gumbel-Top-K with ``noise``, q's order when
    None) and its confidence weight: ``(entry, order, weight)``, or None where the store has no q."""
    entry = store.blend(suffix, tree.beta)
    if entry is None:
        return None
    weight = entry.count / (entry.count + tree.confidence) if tree.confidence else 1.0
    order = (range(len(entry.id_list)) if noise is None  # q's order (log q not needed)
             else choose_children(entry.log_q, len(entry.id_list), noise, depth, entry.ids))
    return entry, order, weight


def store_proposer(store: NGramStore, noise: DraftNoise | None):
    """STAND's proposal for one node: look q up in ``store`` and draw m children from it
    (Gumbel-Top-K with the draft's ``noise``, positioned, or q's top-m when it is None)."""

    def propose(context: tuple, m: int, depth: int) -> Proposal | None:
        entry = store.lookup(context)
        if entry is None:
            return None
        slots = choose_children(entry.log_q, min(m, len(entry.id_list)), noise, depth, entry.ids)
        return Proposal([entry.id_list[s] for s in slots], entry.ids, entry.q, slots)

    return propose


def draft_tree(tree: DraftTree, store: NGramStore, context: list[int], randomness: DraftNoise | None,
               max_depth: int | None = None, extend: Extension | None = None, graft: list[int] | None = None) -> Draft:
    """Draft STAND's tokens into a static tree for the next step (STAND §3.2).

    Args:
        tree: the static draft tree.
        store: the n-gram store to draw q from.
        context: committed tokens, the last one being the root (at least one token).
        randomness: noise source for Gumbel-Top-K; ``None`` drafts deterministically (top-m of q).
        max_depth: draft no node deeper than this (e.g. the tokens still allowed); None = no limit.
        extend: reassign the nodes misses left unused to chains beyond the tree (see
            :class:`stand_runtime.trees.tree_walk.Extension`); None = the static tree only.
        graft: a copy chain continuing ``context`` grafted onto the drafted tree
            (:func:`stand_runtime.trees.tree_walk.graft_chain`); None = none.

    Returns:
        The :class:`Draft` (root plus every node whose ancestors' lookups hit). Over a
        :class:`NativeNGramStore` the same draft is filled in C++
        (:func:`stand_runtime.store.native_draft.native_fill_tree`).
    """
    if isinstance(store, NativeNGramStore):
        return native_fill_tree(tree, store, context, randomness, max_depth, extend, graft)
    noise = None if randomness is None else randomness.at(len(context))
    return fill_tree(tree, context, store.max_n, store_proposer(store, noise), randomness is not None, max_depth,
                     extend, graft)


def best_first_rows(requests: Sequence[DraftRequest]) -> list[Draft]:
    """``[best_first_draft(*r) for r in requests]`` (rows in order), the rows over native stores
    drafted in one call into C++ (:func:`.native_draft.native_best_first_rows`): the same drafts,
    noise consumed and store statistics as the per-row calls.

    Args:
        requests: per row ``(tree, store, context, randomness, max_depth, chain, copy_rate)``.
    """
    native = [r for r, request in enumerate(requests) if isinstance(request[1], NativeNGramStore)]
    if len(native) < 2 or len(native) < len(requests):
        return [best_first_draft(*request) for request in requests]
    return native_best_first_rows(requests)
