"""Static draft trees: one representation, every derived tensor from it.

A draft tree is a set of rank paths. The path ``(r1, ..., rd)`` is the node reached by taking the
r1-th child of the root, then the r2-th child of that node, and so on, where "r-th child" means the
r-th token in drawing order (0-based) of the draft distribution at the parent (STAND paper §3.2-3.3;
the Medusa/EAGLE "choices" convention). The root (index 0) is the last generated token: already
sampled, not yet in the KV cache.

Nodes are stored in breadth-first order (depth, then path lexicographically), so ``parents[i] < i``
and siblings follow their rank. A valid tree is closed under parent and elder sibling: a node with m
children uses the first m draws. From this one structure come the parent/depth/rank arrays, the
children lists, the ancestor mask (row = parent's row + own bit, as EAGLE-2 builds it), and the 4D
attention mask and position ids of a tree forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch

from ..errors import StandError

MAX_RANK = 10
"""Children per node are drawn from the store's top-10 support, so ranks are 0..9."""

MAX_DEPTH = 128
"""Deepest node a tree file may hold."""


def _format_path(path: Sequence[int]) -> str:
    """A path as ``[0, 1, 2]``; a long one shortened to its ends and its length (one-line errors)."""
    if len(path) > 12:
        return ("[" + ", ".join(str(r) for r in path[:6]) + ", ..., " + ", ".join(str(r) for r in path[-3:])
                + f"] ({len(path)} ranks)")
    return "[" + ", ".join(str(r) for r in path) + "]"


def validate_paths(paths: Iterable[Sequence[int]], *, max_rank: int = MAX_RANK, max_depth: int = MAX_DEPTH) -> list[tuple[int, ...]]:
    """Check rank paths (each a non-empty sequence of ints in [0, max_rank), at most ``max_depth``
    long) and return them as tuples sorted by (depth, path).

    Raises:
        StandError: naming the first offending path: not a list of ints, empty, negative rank, rank
            too large, too deep, duplicate, missing parent, or missing elder sibling.
    """
    if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
        raise StandError(f"bad tree: paths must be a list of rank paths, not {type(paths).__name__}")
    seen: set[tuple[int, ...]] = set()
    checked: list[tuple[int, ...]] = []
    for raw in paths:
        if (not isinstance(raw, (list, tuple, np.ndarray))
                or not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in raw)):
            raise StandError(f"bad tree: path {raw!r} is not a list of integer ranks")
        path = tuple(int(r) for r in raw)  # numpy integers as Python ints (paths are saved as JSON)
        if not path:
            raise StandError("bad tree: empty path [] (the root is implicit)")
        if min(path) < 0:
            raise StandError(f"bad tree: path {_format_path(path)} has a negative rank")
        if max(path) >= max_rank:
            raise StandError(f"bad tree: path {_format_path(path)} has rank >= {max_rank}")
        if len(path) > max_depth:
            raise StandError(f"bad tree: path {_format_path(path)} is deeper than {max_depth}")
        if path in seen:
            raise StandError(f"bad tree: duplicate path {_format_path(path)}")
        seen.add(path)
        checked.append(path)
    for path in checked:
        if len(path) > 1 and path[:-1] not in seen:
            raise StandError(f"bad tree: path {_format_path(path)} has no parent {_format_path(path[:-1])}")
        if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in seen:
            elder = path[:-1] + (path[-1] - 1,)
            raise StandError(f"bad tree: path {_format_path(path)} has no elder sibling {_format_path(elder)}")
    return sorted(checked, key=lambda p: (len(p), p))


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A static draft tree, root included as node 0, nodes in breadth-first order (:meth:`from_paths`).

    Attributes (``N`` = number of draft nodes, root excluded):
        paths: ``N`` rank paths in breadth-first order (node i + 1 has path ``paths[i]``).
        parents: ``[N + 1]`` int64 parent index per node; ``parents[0] = -1``; ``parents[i] < i``.
        depths: ``[N + 1]`` int64 depth per node (root 0).
        ranks: ``[N + 1]`` int64 rank among siblings (root -1).
        children: per node, the indices of its children in rank order.
        ancestor_mask: ``[N + 1, N + 1]`` bool, ``[i, j]`` True iff j is i or an ancestor of i.
    """

    paths: tuple[tuple[int, ...], ...]
    parents: np.ndarray
    depths: np.ndarray
    ranks: np.ndarray
    children: tuple[tuple[int, ...], ...]
    ancestor_mask: torch.Tensor = field(repr=False)

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[int]]) -> "DraftTree":
        """The tree of rank paths checked by :func:`validate_paths` (StandError naming a bad one)."""
        ordered = validate_paths(paths)
        index = {path: i + 1 for i, path in enumerate(ordered)}
        size = len(ordered) + 1
        parents = np.full(size, -1, dtype=np.int64)
        depths = np.zeros(size, dtype=np.int64)
        ranks = np.full(size, -1, dtype=np.int64)
        children: list[list[int]] = [[] for _ in range(size)]
        mask = torch.zeros(size, size, dtype=torch.bool)
        mask[0, 0] = True
        for node, path in enumerate(ordered, start=1):
            parent = index.get(path[:-1], 0)
            parents[node], depths[node], ranks[node] = parent, len(path), path[-1]
            children[parent].append(node)
            mask[node] = mask[parent]
            mask[node, node] = True
        return cls(
            paths=tuple(ordered),
            parents=parents,
            depths=depths,
            ranks=ranks,
            children=tuple(tuple(c) for c in children),
            ancestor_mask=mask,
        )

    @classmethod
    def chain(cls, length: int) -> "DraftTree":
        """A single chain of ``length`` nodes (rank 0 at every depth); ``length = 0`` is root only."""
        return cls.from_paths([(0,) * d for d in range(1, length + 1)])

    @property
    def num_nodes(self) -> int:
        """Draft nodes, root excluded."""
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        """Depth of the deepest node (0 for a root-only tree)."""
        return int(self.depths.max())

    def nodes_per_depth(self) -> list[int]:
        """Number of nodes at depth 1 .. max_depth."""
        counts = np.bincount(self.depths, minlength=self.max_depth + 1)
        return counts[1:].tolist()

    def width_per_depth(self) -> list[int]:
        """Largest number of children of one node, per depth of the children (1 .. max_depth)."""
        widths = [0] * self.max_depth
        for node in range(1, self.num_nodes + 1):
            depth = int(self.depths[node])
            widths[depth - 1] = max(widths[depth - 1], int(self.ranks[node]) + 1)
        return widths

    def to_networkx(self, node_values: Sequence[float] | None = None):
        """The tree as a ``networkx.DiGraph`` rooted at node 0, edges parent → child.

        Node attributes: ``path`` (tuple), ``depth``, ``rank``, and ``value`` when ``node_values``
        (``[N]``, one per draft node in breadth-first order) is given.
        """
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_node(0, path=(), depth=0, rank=-1)
        for node, path in enumerate(self.paths, start=1):
            attrs = {"path": path, "depth": len(path), "rank": path[-1]}
            if node_values is not None:
                attrs["value"] = float(node_values[node - 1])
            graph.add_node(node, **attrs)
            graph.add_edge(int(self.parents[node]), node)
        return graph

    def __eq__(self, other: object) -> bool:
        """Trees are equal when their rank paths are: every other attribute follows from them."""
        if not isinstance(other, DraftTree):
            return NotImplemented
        return self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def __len__(self) -> int:
        return self.num_nodes


def tree_attention_mask(
    ancestor_mask: torch.Tensor,
    prefix_len: int,
    dtype: torch.dtype = torch.float32,
    *,
    depths: np.ndarray | torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """The additive 4D attention mask of one tree forward.

    Args:
        ancestor_mask: ``[n, n]`` bool, True where row node may attend to column node (itself and its
            ancestors); rows/columns are the forwarded nodes in order, root first.
        prefix_len: tokens already in the KV cache; every node attends to all of them (within
            ``window``).
        dtype: float dtype of the model's attention.
        depths: ``[n]`` node depths (root 0); needed with ``window``.
        window: sliding-window size (tokens): a node at position i attends to a key at position j
            only when ``i - j < window`` (transformers' ``sliding_window_overlay``); None = no window.

    Returns:
        ``[1, 1, n, prefix_len + n]`` of ``dtype``: 0 where attention is allowed, ``finfo.min`` where
        not (the additive form eager attention needs; a boolean or 0/1 mask would be misread).
    """
    n = ancestor_mask.shape[0]
    device = ancestor_mask.device
    allowed = torch.cat([torch.ones(n, prefix_len, dtype=torch.bool, device=device), ancestor_mask], dim=1)
    if window is not None:
        query = torch.as_tensor(depths, dtype=torch.long, device=device) + prefix_len
        key = torch.cat([torch.arange(prefix_len, device=device), query])
        allowed &= (query[:, None] - key[None, :]) < window
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def tree_position_ids(depths: np.ndarray | torch.Tensor, prefix_len: int) -> torch.Tensor:
    """``[1, n]`` int64 position ids of the forwarded nodes: ``prefix_len + depth``."""
    return (torch.as_tensor(depths, dtype=torch.long) + prefix_len)[None]
