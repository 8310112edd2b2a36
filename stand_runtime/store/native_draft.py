"""STAND's trees drafted in C++ over a native store (docs/algorithms.md §3.8).

:func:`native_fill_tree` is :func:`stand_runtime.trees.tree_walk.fill_tree` with STAND's proposal
(:func:`stand_runtime.store.drafting.store_proposer`), the copy graft and the extension, in one call:
the same lookups (counted in the store's statistics), noise, drawing orders and :class:`Draft`.
:func:`native_best_first_draft` is :func:`stand_runtime.store.drafting.best_first_draft` (the
reference, which calls it for a :class:`stand_runtime.store.native_store.NativeNGramStore`) in one
call into ``stand_runtime._native``: the same blended lookups (counted in the store's statistics),
heap keys and tie order, the same drawing orders and the copy chain grafted as
:func:`stand_runtime.trees.tree_walk.graft_chain` does, so the :class:`Draft` is the Python one.

The Gumbel noise is the stream's own: C++ reads the values the stream's Gumbel pool has not handed
out yet, asks for a refill exactly where ``RandomStream.gumbel(n)`` would refill it (same n, so the
generator is drawn at the same points), and the values it used are then consumed from the pool. So
a seeded run draws the same noise whichever store drafts it. A row's position noise
(:class:`stand_runtime.randomness.PositionNoise`) goes as its key and the draft's base position, and
C++ computes the same hash (``csrc/draft.hpp``).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import StandError
from ..randomness import DraftNoise, RandomStream
from .blend import BLEND_WIDTH
from .native_store import _native
from ..trees.draft import Draft
from ..trees.tree import DraftTree
from ..trees.tree_walk import MAX_CHAIN_DEPTH

if TYPE_CHECKING:
    from .native_store import NativeNGramStore
    from .drafting import DynamicTree
    from ..trees.tree_walk import Extension

_NO_CHAIN = np.zeros(0, dtype=np.int64)
_STRUCTURE: "weakref.WeakKeyDictionary[DraftTree, tuple[np.ndarray, np.ndarray, int]]" = weakref.WeakKeyDictionary()


class _PoolNoise:
    """The unused values of a stream's Gumbel pool, lent to C++ and consumed afterwards."""

    def __init__(self, randomness: RandomStream) -> None:
        self.pool = randomness._gumbels

    def buffer(self) -> np.ndarray:
        return self.pool._values[self.pool._next :]

    def more(self, used: int, n: int) -> np.ndarray:
        """Consume ``used`` values, then refill as ``take(n)`` would; the new buffer starts at the
        next draw."""
        pool = self.pool
        pool._next += used
        pool.take(n)
        pool._next -= n
        return pool._values[pool._next :]

    def consume(self, used: int) -> None:
        self.pool._next += used


def root_token(context: Sequence[int]) -> int:
    """The root of a draft after ``context``: its last token.

    Raises:
        StandError: an empty context (no root).
    """
    if not len(context):
        raise StandError("a draft needs a context of at least one token (its root)")
    return context[-1]


def _noise_arguments(randomness: DraftNoise | None, context: list[int]) -> tuple[object, object, _PoolNoise | None]:
    """The C++ call's two noise arguments and the pool it lends: ``(buffer, more, pool)`` for a stream,
    ``(key, base, None)`` for a row's position noise, ``(None, None, None)`` for deterministic drafts."""
    if randomness is None:
        return None, None, None
    noise = randomness.at(len(context))
    if isinstance(noise, RandomStream):
        pool = _PoolNoise(noise)
        return pool.buffer(), pool.more, pool
    return noise.noise.key, noise.base, None


def _row(tree: DynamicTree, store: NativeNGramStore, context: list[int], randomness: DraftNoise | None,
         max_depth: int | None, chain: list[int] | None, copy_rate: float) -> tuple[tuple, _PoolNoise | None]:
    """The C++ call's arguments for one row, and the noise it lends (an empty context: StandError)."""
    root_token(context)
    deepest = tree.max_depth if max_depth is None else max(0, min(max_depth, tree.max_depth))
    suffix = np.asarray(context[-store.max_n :], dtype=np.int64)
    chain_array = np.asarray(chain, dtype=np.int64) if chain else _NO_CHAIN
    buffer, more, pool = _noise_arguments(randomness, context)
    return ((store.core, suffix, chain_array, tree.num_nodes, float(tree.confidence), float(tree.beta), int(deepest),
             BLEND_WIDTH, float(copy_rate), buffer, more), pool)


def _draft(out: tuple, noise: _PoolNoise | None, stochastic: bool) -> Draft:
    """The :class:`Draft` of one C++ result (its noise consumed from the pool, if it drew from one)."""
    tokens, parents, depths, children, draft_ids, draft_probs, slots, copied, used, scores = out
    if noise is not None:
        noise.consume(used)
    return Draft(tokens=tokens, parents=parents, depths=depths, children=children, draft_ids=draft_ids,
                 draft_probs=draft_probs, slots=slots, stochastic=stochastic, nodes=None,
                 copied=frozenset(copied), scores=scores)


def native_best_first_draft(tree: DynamicTree, store: NativeNGramStore, context: list[int],
                            randomness: RandomStream | None, max_depth: int | None,
                            chain: list[int] | None, copy_rate: float) -> Draft:
    """:func:`stand_runtime.store.drafting.best_first_draft` in C++ (same arguments, same
    :class:`Draft` with the same node scores, same noise consumed, same store statistics)."""
    args, noise = _row(tree, store, context, randomness, max_depth, chain, copy_rate)
    return _draft(_native.best_first(*args), noise, randomness is not None)


DraftRequest = tuple
"""One row of :func:`native_best_first_rows`: ``(tree, store, context, randomness, max_depth, chain,
copy_rate)``, the arguments of :func:`native_best_first_draft`."""


def native_best_first_rows(requests: Sequence[DraftRequest]) -> list[Draft]:
    """The drafts of several rows in one call into C++: ``[native_best_first_draft(*r) for r in
    requests]``, the same drafts, noise consumed and store statistics (rows drafted in order, so rows
    sharing a store count their lookups as one after the other would). Rows whose random streams
    share a Gumbel pool go in separate calls, each after the previous consumed its noise.

    Args:
        requests: per row ``(tree, store, context, randomness, max_depth, chain, copy_rate)``; every store a
            :class:`NativeNGramStore`.
    """
    drafts: list[Draft] = []
    start = 0
    while start < len(requests):
        pools, stop = set(), start  # the longest run of rows with distinct pools
        while stop < len(requests) and (not isinstance(requests[stop][3], RandomStream)
                                        or id(requests[stop][3]._gumbels) not in pools):
            if isinstance(requests[stop][3], RandomStream):
                pools.add(id(requests[stop][3]._gumbels))
            stop += 1
        rows = [_row(*request) for request in requests[start:stop]]
        outs = _native.best_first_rows([args for args, _ in rows])
        drafts.extend(_draft(out, noise, request[3] is not None)
                      for out, (_, noise), request in zip(outs, rows, requests[start:stop]))
        start = stop
    return drafts


def _structure(tree: DraftTree) -> tuple[np.ndarray, np.ndarray, int]:
    """The static tree as C++ reads it (computed once per tree): ``child_start`` ``[N + 2]`` int64 and
    ``child_list`` ``[N]`` int64, node v's children being ``child_list[child_start[v] :
    child_start[v + 1]]`` in rank order, and the tree's depth."""
    found = _STRUCTURE.get(tree)
    if found is None:
        counts = [len(kids) for kids in tree.children]
        start = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        flat = np.asarray([kid for kids in tree.children for kid in kids], dtype=np.int64)
        found = _STRUCTURE[tree] = (start, flat, tree.max_depth)
    return found


def native_fill_tree(tree: DraftTree, store: NativeNGramStore, context: list[int], randomness: DraftNoise | None,
                     max_depth: int | None = None, extend: Extension | None = None,
                     graft: list[int] | None = None) -> Draft:
    """:func:`stand_runtime.store.drafting.draft_tree` (``fill_tree`` with STAND's proposal) in C++:
    the same arguments, :class:`Draft` (``nodes`` included), noise consumed and store statistics.

    Args:
        tree: the static draft tree.
        store: the native n-gram store.
        context: committed tokens (at least one), the last one being the root.
        randomness: Gumbel noise for stochastic drafts; None = q's top-m.
        max_depth: draft no node deeper than this; None = no limit.
        extend: the :class:`stand_runtime.trees.tree_walk.Extension`, or None.
        graft: the copy chain grafted onto the draft, or None.

    Raises:
        StandError: ``context`` is empty.
    """
    if not context:
        raise StandError("native_fill_tree needs at least one committed token (the root)")
    start, flat, tree_depth = _structure(tree)
    deepest = tree_depth if max_depth is None else min(max_depth, tree_depth)
    chain_deepest = max_depth if max_depth is not None else (extend.max_depth if extend is not None else MAX_CHAIN_DEPTH)
    suffix = np.asarray(context[-store.max_n :], dtype=np.int64)
    chain_array = np.asarray(graft, dtype=np.int64) if graft else _NO_CHAIN
    buffer, more, noise = _noise_arguments(randomness, context)
    drafted, nodes = _native.static_fill(
        store.core, suffix, start, flat, chain_array, int(deepest), int(chain_deepest), extend is not None,
        0 if extend is None else int(extend.budget), 0.0 if extend is None else float(extend.min_score),
        buffer, more)
    tokens, parents, depths, children, draft_ids, draft_probs, slots, copied, used, _ = drafted  # no scores
    if noise is not None:
        noise.consume(used)
    return Draft(tokens=tokens, parents=parents, depths=depths, children=children, draft_ids=draft_ids,
                 draft_probs=draft_probs, slots=slots, stochastic=randomness is not None, nodes=nodes,
                 copied=frozenset(copied))
