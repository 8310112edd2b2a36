"""Token Recycling (Luo et al., 2024, "Turning Trash into Treasure"): an adjacency matrix of the
target's top-k next tokens per token, rows overwritten from the logits of every forwarded position
(prompt and every tree node), drafted breadth-first into a static tree. Drafts carry no
probabilities, so they are verified with the deterministic-draft rule.
"""

from __future__ import annotations

import numpy as np
import torch

from ..draft import Draft
from ..errors import StandError
from ..tree import DraftTree
from .tree_walk import Proposal, fill_tree

RECYCLE_TOP_K = 8
"""Successors kept per token (the paper's matrix width)."""


class RecyclingMatrix:
    """Token Recycling's adjacency matrix: the target's top-k next tokens per token.

    Args:
        vocab: the target's vocabulary size (rows).
        k: successors per row.

    Attributes:
        successors: ``[vocab, k]`` int64, row t = the most recent top-k next tokens after t.
        filled: ``[vocab]`` bool, rows written at least once.

    Raises:
        StandError: ``vocab`` or ``k`` < 1.
    """

    def __init__(self, vocab: int, k: int = RECYCLE_TOP_K) -> None:
        if vocab < 1 or k < 1:
            raise StandError(f"RecyclingMatrix needs vocab and k >= 1, got {vocab} and {k}")
        self.k = k
        self.successors = np.zeros((vocab, k), dtype=np.int64)
        self.filled = np.zeros(vocab, dtype=bool)

    @property
    def vocab(self) -> int:
        """Rows of the matrix (the vocabulary it was built for)."""
        return len(self.filled)

    def update(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Overwrite the rows of ``tokens`` with the top-k of their ``[n, vocab]`` logits rows."""
        if not tokens:
            return
        top = torch.topk(logits.float(), self.k, dim=-1).indices.cpu().numpy()
        self.successors[np.asarray(tokens)] = top
        self.filled[np.asarray(tokens)] = True

    def stats(self) -> dict:
        """``{"filled_rows": rows written at least once}``."""
        return {"filled_rows": int(self.filled.sum())}


class TokenRecyclingDrafter:
    """Token Recycling as a :class:`stand_runtime.drafters.Drafter`.

    Args:
        tree: the static draft tree (the paper's is ``heuristic-80``).
        matrix: the adjacency matrix (shared across calls for best-of-N).
    """

    def __init__(self, tree: DraftTree, matrix: RecyclingMatrix) -> None:
        self.tree = tree
        self.matrix = matrix

    @property
    def max_nodes(self) -> int:
        """Drafted nodes per step at most."""
        return self.tree.num_nodes

    def observe_prompt(self, prompt, logits, positions) -> None:
        self.matrix.update([prompt[p] for p in positions], logits)

    def _propose(self, context: tuple, m: int) -> Proposal | None:
        token = context[-1]
        if not self.matrix.filled[token]:
            return None
        return Proposal(self.matrix.successors[token, : min(m, self.matrix.k)].tolist())

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        return fill_tree(self.tree, committed, 1, self._propose, stochastic=False, max_depth=max_depth)

    def observe_step(self, committed, draft, accepted, logits, rows) -> None:
        self.matrix.update(draft.tokens, logits)

    def stats(self) -> dict:
        return self.matrix.stats()
