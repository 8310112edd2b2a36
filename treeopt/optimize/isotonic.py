"""Alpha-hat made monotone along the tree: a node's path is accepted only where its parent's is.

Direct calibration counts accepted paths, so a child's alpha-hat never exceeds its parent's. Replay
calibration (:mod:`treeopt.optimize.replay`) estimates each node with importance weights
(``w * a_j / p(y)``), unbiased per node but not ordered: in the bundled HumanEval calibration 39 of
625 children exceed their parent. The true acceptance probabilities satisfy
``alpha(child) <= alpha(parent)``, so the least-squares projection of alpha-hat onto that convex set
(isotonic regression on the tree order) is never further from the truth in Euclidean norm than
alpha-hat itself (projection onto a closed convex set is non-expansive), and it is exactly alpha-hat
where alpha-hat is already ordered.

Algorithm: pool-adjacent-violators on a rooted tree (Thompson 1962, "The problem of numerical
analysis of statistical data with monotonic restrictions"; Pardalos & Xue 1999, "Algorithms for a
class of isotonic regression problems", Algorithmica 23). Blocks start as single nodes; the block of
largest mean is either merged into its parent's block (when it exceeds that block's mean) or
fixed. The largest mean among unfixed blocks never grows, so a fixed block is never violated later.
O(N log N) with a heap.
"""

from __future__ import annotations

import heapq

import numpy as np

from stand_runtime import DraftTree

from .prune import check_alpha


def tree_isotonic(tree: DraftTree, alpha) -> np.ndarray:
    """The least-squares fit to ``alpha`` (``[N]``, one per draft node, breadth-first) with every node at
    most its parent (equal weights): ``[N]`` float64, each value the mean of ``alpha`` over the connected
    block of nodes that share it; ``alpha`` itself where it is already ordered (depth-1 nodes have no
    constraint above them: the root is not drafted).

    Raises:
        StandError: as :func:`treeopt.optimize.prune.check_alpha`.
    """
    values = check_alpha(tree, alpha, "tree_isotonic")
    parent = (tree.parents[1:] - 1).tolist()  # 0-based like alpha; -1 at depth 1 (the root's children)
    owner = list(range(tree.num_nodes))  # union-find: a block is named by its top node

    def block(node: int) -> int:
        while owner[node] != node:
            owner[node] = owner[owner[node]]
            node = owner[node]
        return node

    mean, count = values.copy(), np.ones(tree.num_nodes)
    version = [0] * tree.num_nodes
    heap = [(-values[i], i, 0) for i in range(tree.num_nodes)]
    heapq.heapify(heap)
    while heap:
        _, top, seen = heapq.heappop(heap)
        if owner[top] != top or seen != version[top]:
            continue  # merged away, or an old entry of a block whose mean changed
        if parent[top] < 0:
            continue  # a depth-1 block: nothing above it, fixed
        up = block(parent[top])
        if mean[top] <= mean[up]:
            continue  # ordered with the block above: fixed
        owner[top] = up
        count[up] += count[top]
        mean[up] += (mean[top] - mean[up]) * (count[top] / count[up])  # the pooled mean, without summing
        version[up] += 1
        heapq.heappush(heap, (-mean[up], up, version[up]))
    heads = np.array([block(i) for i in range(tree.num_nodes)], dtype=np.int64)
    return mean[heads]
