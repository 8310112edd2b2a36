"""Candidate trees from a rank-product prior (docs/trees.md §6.1), and per-depth heuristic trees.

The prior values a rank path as ``value(r1..rd) = prod_j a(r_j)`` with ``a(r) = base / (r + 1)**decay``,
decreasing in rank and below 1, so a parent is worth at least its child and an elder sibling at least
its younger one. The top-N paths by value are then closed under parent and elder sibling; they are
grown from the root with a max-heap over the frontier (a node's first child and next sibling enter the
frontier when it is taken), which visits the paths in order of decreasing value.

The default candidate (625 nodes, base 0.9, decay 1.0, width <= 10) reaches depth 23 along the
rank-0 chain and is 10 wide at the root: it contains every node an 80-node optimized tree could want.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from stand_runtime import DraftTree, StandError
from stand_runtime.checks import check_int, check_real
from stand_runtime.limits import MAX_PRIOR_DECAY, MIN_PRIOR_BASE
from stand_runtime.trees.tree import MAX_RANK


MAX_CANDIDATE_NODES = 4096
"""Largest candidate tree (its ancestor mask is nodes x nodes)."""


@dataclass(frozen=True)
class Prior:
    """The rank-product prior: ``a(r) = base / (r + 1) ** decay``.

    Raises:
        StandError: base not in [:data:`~stand_runtime.limits.MIN_PRIOR_BASE`, 1) or decay not in
            (0, :data:`~stand_runtime.limits.MAX_PRIOR_DECAY`].
    """

    base: float = 0.9
    decay: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", check_real("prior base", self.base))
        object.__setattr__(self, "decay", check_real("prior decay", self.decay))
        if not (MIN_PRIOR_BASE <= self.base < 1.0) or not (0.0 < self.decay <= MAX_PRIOR_DECAY):
            raise StandError(f"prior needs {MIN_PRIOR_BASE:g} <= base < 1 and 0 < decay <= {MAX_PRIOR_DECAY:g}, "
                             f"got base={self.base}, decay={self.decay}")

    def factor(self, rank: int) -> float:
        """a(rank), the value multiplier of taking the rank-th child."""
        return self.base / (rank + 1) ** self.decay


def check_prior(prior) -> None:
    """Raises StandError unless ``prior`` is a :class:`Prior`."""
    if not isinstance(prior, Prior):
        raise StandError(f"prior must be a candidate Prior, not {type(prior).__name__}")


def candidate_tree(
    num_nodes: int = 625, prior: Prior = Prior(), max_width: int = MAX_RANK, max_depth: int = 64
) -> DraftTree:
    """The top ``num_nodes`` rank paths (root excluded) under ``prior``, closed under parent and elder sibling,
    at most ``max_width`` children per node (the store's k, <= 10) and ``max_depth`` deep.

    Raises:
        StandError: a parameter out of range.
    """
    num_nodes = check_int("candidate tree: nodes", num_nodes, 1, MAX_CANDIDATE_NODES)
    max_width = check_int("candidate tree: max_width", max_width, 1, MAX_RANK)
    max_depth = check_int("candidate tree: max_depth", max_depth, 1)
    check_prior(prior)
    chosen: list[tuple[int, ...]] = []
    frontier = [(-prior.factor(0), (0,))]
    while frontier and len(chosen) < num_nodes:
        negative_value, path = heapq.heappop(frontier)
        chosen.append(path)
        value = -negative_value
        if len(path) < max_depth:
            heapq.heappush(frontier, (-value * prior.factor(0), path + (0,)))
        if path[-1] + 1 < max_width:
            sibling = value / prior.factor(path[-1]) * prior.factor(path[-1] + 1)
            heapq.heappush(frontier, (-sibling, path[:-1] + (path[-1] + 1,)))
    if len(chosen) < num_nodes:
        raise StandError(f"a tree of width {max_width} and depth {max_depth} cannot hold {num_nodes} nodes")
    return DraftTree.from_paths(chosen)


def per_depth_tree(counts: list[int], prior: Prior = Prior(), max_width: int = MAX_RANK) -> DraftTree:
    """A tree with ``counts[d]`` nodes at depth d + 1, each depth the most valuable children of the one
    above under ``prior`` (through a frontier, so the tree stays closed under parent and elder sibling);
    Token Recycling's static 80-node tree has the depth profile 8/21/25/15/8/3.

    Raises:
        StandError: no counts, a count that is not an integer >= 1 or more than the previous depth can
            hold, more than :data:`MAX_CANDIDATE_NODES` in all, a bad prior or max_width.
    """
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__iter__"):
        raise StandError(f"per-depth counts must be a list of integers, got {counts!r}")
    counts = [check_int(f"nodes at depth {depth}", count, 1) for depth, count in enumerate(counts, start=1)]
    if not counts:
        raise StandError("per-depth counts must name at least one depth")
    if sum(counts) > MAX_CANDIDATE_NODES:
        raise StandError(f"per-depth counts hold {sum(counts)} nodes, more than a tree's {MAX_CANDIDATE_NODES}")
    max_width = check_int("max_width", max_width, 1, MAX_RANK)
    check_prior(prior)
    paths: list[tuple[int, ...]] = []
    previous: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for depth, count in enumerate(counts, start=1):
        if count < 1 or count > len(previous) * max_width:
            raise StandError(f"depth {depth} cannot hold {count} nodes (from 1 to {len(previous) * max_width}: "
                             f"the previous depth has {len(previous)}, at most {max_width} children each)")
        frontier = [(-value * prior.factor(0), parent + (0,), value) for parent, value in previous]
        heapq.heapify(frontier)
        level: list[tuple[tuple[int, ...], float]] = []
        while len(level) < count:
            negative_value, path, parent_value = heapq.heappop(frontier)
            level.append((path, -negative_value))
            if path[-1] + 1 < max_width:
                sibling = parent_value * prior.factor(path[-1] + 1)
                heapq.heappush(frontier, (-sibling, path[:-1] + (path[-1] + 1,), parent_value))
        paths += [path for path, _ in level]
        previous = level
    return DraftTree.from_paths(paths)
