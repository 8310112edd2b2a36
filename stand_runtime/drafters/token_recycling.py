"""Token Recycling (Luo et al., 2024, "Turning Trash into Treasure"): an adjacency matrix of the
target's top-k next tokens per token, rows overwritten from the logits of every forwarded position
(prompt and every tree node), drafted breadth-first into a static tree. Drafts carry no
probabilities, so they are verified with the deterministic-draft rule.

Replaying a recorded trace (:mod:`stand_runtime.engine.trace_replay`) gives one-hot rows: only the token
that followed each committed position is known, and the target's top-8 (what the matrix wants) is
not. The replay feeding is then: the observed successor moves to the front of its token's row, the
row's other successors shift back (most recent first, k kept), and rows of rejected nodes are not
fed (their next token is unknown). This is Token Recycling fed only with what a recording holds,
not the paper's method; the trace bench says so in its output.
"""

from __future__ import annotations

import numpy as np

from .base import Drafter
from ..trees.draft import Draft
from ..checks import check_int
from ..limits import MAX_VOCAB
from .feeds import TargetFeed
from ..target.sampling import SamplingParams
from ..trees.tree import DraftTree
from ..trees.tree_walk import Proposal, fill_tree

RECYCLE_TOP_K = 8
"""Successors kept per token (the paper's matrix width)."""

_LOGIT_ORDER = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)
"""The rows' order: the top-k of the logits (the softmax at temperature 1 keeps it)."""


class RecyclingMatrix:
    """Token Recycling's adjacency matrix: the target's top-k next tokens per token.

    Args:
        vocab: the target's vocabulary size (rows).
        k: successors per row.

    Attributes:
        successors: ``[vocab, k]`` int64, row t = the most recent top-k next tokens after t.
        sizes: ``[vocab]`` int64, successors known per row (k once written by :meth:`update`; 1..k
            for rows only :meth:`push` wrote).

    Raises:
        StandError: ``vocab`` not an integer in [1, :data:`stand_runtime.limits.MAX_VOCAB`], or ``k`` not an integer in [1, vocab].
    """

    def __init__(self, vocab: int, k: int = RECYCLE_TOP_K) -> None:
        vocab = check_int("RecyclingMatrix vocab", vocab, 1, MAX_VOCAB)
        k = check_int("RecyclingMatrix k (successors per token)", k, 1, vocab)
        self.k = k
        self.successors = np.zeros((vocab, k), dtype=np.int64)
        self.sizes = np.zeros(vocab, dtype=np.int64)

    @property
    def vocab(self) -> int:
        """Rows of the matrix (the vocabulary it was built for)."""
        return len(self.sizes)

    @property
    def filled(self) -> np.ndarray:
        """``[vocab]`` bool, rows written at least once."""
        return self.sizes > 0

    def update(self, tokens: list[int], top_ids: np.ndarray) -> None:
        """Overwrite the rows of ``tokens`` with the target's top-k next tokens ``top_ids``
        ``[len(tokens), k]`` int64 (most likely first; the paper's rule)."""
        if not len(tokens):
            return
        self.successors[np.asarray(tokens)] = top_ids[:, : self.k]
        self.sizes[np.asarray(tokens)] = self.k

    def push(self, tokens: list[int], successors: list[int]) -> None:
        """Replay feeding (module docstring): ``successors[i]`` observed after ``tokens[i]`` moves
        to the front of that row, the row's others shift back (most recent first, k kept)."""
        for token, successor in zip(tokens, successors):
            size = int(self.sizes[token])
            row = [successor] + [s for s in self.successors[token, :size].tolist() if s != successor]
            row = row[: self.k]
            self.successors[token, : len(row)] = row
            self.sizes[token] = len(row)

    def stats(self) -> dict:
        """``{"filled_rows": rows written at least once, "approx_bytes": the matrix's memory}``."""
        return {"filled_rows": int(self.filled.sum()), "approx_bytes": int(self.successors.nbytes + self.sizes.nbytes)}


class TokenRecyclingDrafter(Drafter):
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

    @property
    def vocab(self) -> int:
        """The vocabulary its matrix was built for (token ids below it)."""
        return self.matrix.vocab

    def observe_prompt(self, prompt, feed: TargetFeed, positions) -> None:
        self._learn([prompt[p] for p in positions], range(len(positions)), feed)

    def _learn(self, tokens: list[int], rows, feed: TargetFeed) -> None:
        """Write the rows of ``tokens`` from the feed's ``rows`` (one-hot feeds: :meth:`RecyclingMatrix.push`)."""
        ids, _ = feed.top(rows, self.matrix.k, _LOGIT_ORDER)
        if feed.one_hot:
            self.matrix.push(tokens, ids[:, 0].tolist())
        else:
            self.matrix.update(tokens, ids)

    def _propose(self, context: tuple, m: int, depth: int = 0) -> Proposal | None:
        token = context[-1]
        size = int(self.matrix.sizes[token])
        if not size:
            return None
        return Proposal(self.matrix.successors[token, : min(m, size)].tolist())

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        return fill_tree(self.tree, committed, 1, self._propose, stochastic=False, max_depth=max_depth)

    def observe_step(self, committed, draft, accepted, feed: TargetFeed) -> None:
        observed = feed.observed(accepted)
        self._learn([draft.tokens[p] for p in observed], observed, feed)

    def stats(self) -> dict:
        return self.matrix.stats()
