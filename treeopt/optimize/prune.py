"""Pruning a calibrated candidate to the best K-node draft tree (docs/trees.md §6.5).

A valid tree is closed under parent and elder sibling (a node with m children uses the first m
draws). Written in left-child/right-sibling form — a node's "left" link is its rank-0 child, its
"right" link its next younger sibling — this closure is exactly closure under the binary parent,
so the best K-node tree is the best K-node rooted subtree of that binary tree, which a tree
knapsack computes exactly; each table stops at its subtree's size, so the merges cost O(N K)
in all (the classic bound for size-capped tree knapsacks), not O(N K^2):

    best(v, k) = alpha(v) + max_{i + j = k - 1} best(left(v), i) + best(right(v), j),  best(., 0) = 0

Greedy growth on the frontier (the paper's choice) is optimal only when alpha never increases from a
node to its child or younger sibling; calibration estimates are noisy and need not be monotone, so
we solve the knapsack exactly instead. One solve gives the optimum for every K at once, which is what
``--nodes auto`` scans.
"""

from __future__ import annotations

import numpy as np

from stand_runtime import DraftTree, StandError
from stand_runtime.checks import check_int

_NEG = -np.inf


class KnapsackSolution:
    """Best sums and choices for every budget up to ``max_nodes``.

    Attributes:
        best_sum: ``[max_nodes + 1]`` float64, the largest ``sum alpha`` of a valid k-node tree.
    """

    def __init__(self, tree: DraftTree, alpha: np.ndarray, max_nodes: int) -> None:
        self._tree = tree
        self._alpha = np.asarray(alpha, dtype=np.float64)
        self._max = max_nodes
        n = tree.num_nodes
        index = {path: i + 1 for i, path in enumerate(tree.paths)}
        self._left = np.zeros(n + 1, dtype=np.int64)  # 0 = none (the root is never a child)
        self._right = np.zeros(n + 1, dtype=np.int64)
        for node, path in enumerate(tree.paths, start=1):
            self._left[node] = index.get(path + (0,), 0)
            self._right[node] = index.get(path[:-1] + (path[-1] + 1,), 0)
        # best[v][k]: best sum using k nodes of v's binary subtree, v included when k >= 1; a table
        # stops at the subtree's size (or max_nodes), so the merges cost O(N K) in all, not O(N K^2)
        self._best: dict[int, np.ndarray] = {}
        self._split: dict[int, np.ndarray] = {}
        for node in range(n, 0, -1):  # children and younger siblings come later in BFS order
            self._solve(node)
        self._first = index.get((0,), 0)
        first = self._table(self._first)
        self.best_sum = np.full(self._max + 1, _NEG)
        self.best_sum[: len(first)] = first

    def _table(self, node: int) -> np.ndarray:
        return self._best[node] if node else np.zeros(1)

    def _solve(self, node: int) -> None:
        """best(node, k) = alpha(node) + max over i of left[i] + right[k - 1 - i], the smallest such i
        on ties; a loop over the shorter table, each pass one vector operation over the longer."""
        left, right = self._table(self._left[node]), self._table(self._right[node])
        size = min(len(left) + len(right) - 1, self._max)  # merged[m]: best left + right sum of m nodes
        merged = np.full(size, _NEG)
        split = np.zeros(size, dtype=np.int64)  # nodes given to the left subtree
        if len(left) <= len(right):
            for i in range(min(len(left), size)):  # ascending i: the first maximum stays
                _improve(merged, split, i, left[i] + right[: size - i], np.full(size, i))
        else:
            for j in range(min(len(right), size) - 1, -1, -1):  # descending j: ascending i
                _improve(merged, split, j, right[j] + left[: size - j], np.arange(size))
        self._best[node] = np.concatenate(([0.0], self._alpha[node - 1] + merged))
        self._split[node] = np.concatenate(([0], split))

    def nodes(self, k: int) -> list[int]:
        """Static node indices (1-based, breadth-first) of the best k-node tree."""
        chosen: list[int] = []
        stack = [(self._first, k)]
        while stack:
            node, budget = stack.pop()
            if budget == 0 or node == 0:
                continue
            chosen.append(node)
            i = int(self._split[node][budget])
            stack.append((int(self._left[node]), i))
            stack.append((int(self._right[node]), budget - 1 - i))
        return sorted(chosen)


def _improve(merged: np.ndarray, split: np.ndarray, start: int, values: np.ndarray, lefts: np.ndarray) -> None:
    """Where ``values`` beat ``merged[start:]`` strictly, take them and their left counts."""
    window = slice(start, start + len(values))
    better = values > merged[window]
    merged[window][better] = values[better]
    split[window][better] = lefts[: len(values)][better]


def prune(tree: DraftTree, alpha: np.ndarray, num_nodes: int) -> tuple[DraftTree, np.ndarray]:
    """The valid ``num_nodes``-node subtree of ``tree`` with the largest ``sum alpha`` (``alpha``: ``[N]``
    alpha-hat per candidate draft node, breadth-first); ``(pruned tree, [K] alpha of its nodes)``.

    Raises:
        StandError: K not an integer >= 1 or larger than the candidate, or what :func:`check_alpha` raises.
    """
    alpha, num_nodes = _check(tree, alpha, num_nodes)
    solution = KnapsackSolution(tree, alpha, num_nodes)
    return subtree(tree, alpha, solution.nodes(num_nodes))


def best_sums(tree: DraftTree, alpha: np.ndarray, max_nodes: int) -> np.ndarray:
    """``[max_nodes + 1]`` the best ``sum alpha`` of a valid k-node tree, for k = 0 .. max_nodes."""
    alpha, max_nodes = _check(tree, alpha, max_nodes)
    return KnapsackSolution(tree, alpha, max_nodes).best_sum


def subtree(tree: DraftTree, alpha: np.ndarray, nodes: list[int]) -> tuple[DraftTree, np.ndarray]:
    """The tree made of the given static nodes (1-based), with their alpha, in breadth-first order."""
    pruned = DraftTree.from_paths([tree.paths[i - 1] for i in nodes])
    lookup = {tree.paths[i - 1]: float(alpha[i - 1]) for i in nodes}
    return pruned, np.array([lookup[p] for p in pruned.paths])


def check_alpha(tree: DraftTree, alpha, what: str) -> np.ndarray:
    """``alpha`` as ``[N]`` float64: one finite real number per draft node of ``tree``, breadth-first (a NaN
    or infinite alpha-hat would choose a tree arbitrarily).

    Raises:
        StandError: ``tree`` not a DraftTree (``what`` names who needs one), or ``alpha`` not ``[N]`` finite
            real numbers (text, complex numbers and tensors that need grad are refused).
    """
    if not isinstance(tree, DraftTree):
        raise StandError(f"{what} needs a DraftTree, not {type(tree).__name__}")
    try:
        raw = np.asarray(alpha)
        values = raw.astype(np.float64) if raw.dtype.kind in "biuf" else None
    except (TypeError, ValueError, OverflowError, RuntimeError):  # ragged, huge ints, a tensor needing grad
        values = None
    if values is None or values.shape != (tree.num_nodes,):
        shape = list(values.shape) if values is not None else type(alpha).__name__
        raise StandError(f"alpha must be [{tree.num_nodes}] real numbers, one per draft node, got {shape}")
    if not np.all(np.isfinite(values)):
        raise StandError("alpha must be finite (no NaN or infinity)")
    return values


def _check(tree: DraftTree, alpha, num_nodes) -> tuple[np.ndarray, int]:
    """``(alpha as float64, num_nodes as int)`` once both fit ``tree`` (StandError: see :func:`prune`)."""
    alpha = check_alpha(tree, alpha, "pruning")
    num_nodes = check_int("nodes", num_nodes, 1)
    if num_nodes > tree.num_nodes:
        raise StandError(f"nodes {num_nodes} is larger than the candidate tree ({tree.num_nodes} nodes)")
    return alpha, num_nodes
