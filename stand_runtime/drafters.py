"""Drafters: what proposes the draft tree of each step, and what each learns from verification.

One interface for every method, so all of them run through the same engine and are verified by the
same lossless rules (:mod:`stand_runtime.verify`):

- :class:`StandDrafter` — STAND: the logit n-gram store (:mod:`stand_runtime.ngram_store`) drafted
  into a static tree by Gumbel-Top-K (stochastic) or top-m (deterministic, the paper's ablation and
  greedy decoding); fed with p at the prompt and at every accepted position, or optionally at every
  forwarded tree node, rejected ones included (DESIGN §3.1).
- :class:`PromptLookupDrafter` — prompt lookup decoding (Saxena, 2023): the longest suffix n-gram
  (n <= 3) of prompt + output is matched at its latest earlier occurrence and the tokens that
  followed it are proposed as a chain (10 by default). Drafts carry no probabilities.
- :class:`TokenRecyclingDrafter` — Token Recycling (Luo et al., 2024): an adjacency matrix with the
  target's top-8 next tokens per token, rows overwritten from the logits of every forwarded position
  (prompt and every tree node), drafted breadth-first into a static tree. No probabilities.

Drafts without probabilities are verified with the deterministic-draft rule.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
import torch

from .drafting import Draft, draft_tree
from .metrics import DraftQuality
from .ngram_store import NGramStore
from .randomness import RandomStream
from .sampling import SamplingParams, target_probs
from .tree import DraftTree
from .verify import Verification

STORE_TOP_K = 10
RECYCLE_TOP_K = 8

# Greedy decoding has a one-hot p, which would leave one token per context in the store; the store
# then records the softmax of the logits instead (any q keeps verification lossless).
_GREEDY_STORE_PARAMS = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)


def store_params(params: SamplingParams) -> SamplingParams:
    """The distribution the n-gram store records: p itself, or for greedy decoding the softmax."""
    return _GREEDY_STORE_PARAMS if params.greedy else params


class Drafter(Protocol):
    """What the decoding loop needs from a drafting method."""

    tree: DraftTree
    """The static tree whose ancestor mask the drafts index into."""

    def observe_prompt(self, prompt: list[int], logits: torch.Tensor) -> None:
        """Learn from the prefill: ``logits`` is ``[len(prompt) - 1, vocab]``, row i after ``prompt[: i + 1]``."""

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        """Draft the next step's tree for ``committed`` (its last token is the root)."""

    def observe_step(self, committed: list[int], draft: Draft, verification: Verification, logits: torch.Tensor,
                     rows: dict[int, np.ndarray]) -> None:
        """Learn from a verified step: ``logits`` ``[n, vocab]`` of the forwarded nodes, ``rows`` the p
        rows verification computed (by draft position); ``committed`` is before the step's tokens."""

    def stats(self) -> dict | None:
        """JSON-ready statistics of the drafter's memory, or None."""


class StandDrafter:
    """STAND drafting from a logit n-gram store (paper §3.1-3.2).

    Args:
        tree: the static draft tree.
        store: the n-gram store (shared across calls for best-of-N).
        randomness: Gumbel noise for stochastic drafts; None = deterministic top-m drafts.
        params: the target sampling distribution (what the store records).
        feed_rejected: also record p at rejected tree nodes (DESIGN §3.1 option).
        quality: when given, q is measured against p at every drafted root (diagnostics; the time it
            takes is tallied in ``diagnostics_s``, seconds).
    """

    def __init__(self, tree: DraftTree, store: NGramStore, randomness: RandomStream | None, params: SamplingParams,
                 feed_rejected: bool = False, quality: DraftQuality | None = None) -> None:
        self.tree = tree
        self.store = store
        self.randomness = randomness
        self.params = params
        self.feed_rejected = feed_rejected
        self.quality = quality
        self.diagnostics_s = 0.0
        self._root_n: int | None = None  # context length of the last drafted root's lookup (0 = miss)

    def observe_prompt(self, prompt: list[int], logits: torch.Tensor) -> None:
        self._feed(prompt, list(range(len(prompt) - 1)), logits)

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        if self.quality is not None:
            match = self.store.match(committed)
            self._root_n = 0 if match is None else match[0]
        return draft_tree(self.tree, self.store, committed, self.randomness, max_depth=max_depth)

    def observe_step(self, committed, draft, verification, logits, rows) -> None:
        if self.quality is not None:
            start = time.perf_counter()
            self._measure_root(draft, rows.get(0))
            self.diagnostics_s += time.perf_counter() - start
        if self.feed_rejected:
            self._feed_tree(committed, draft, logits, rows)
            return
        keep = [0, *verification.accepted]
        path_tokens = committed + [draft.tokens[p] for p in verification.accepted]
        positions = list(range(len(committed) - 1, len(committed) - 1 + len(keep)))
        ids, probs = self._top(logits[keep], [rows.get(p) for p in keep])
        self.store.update_sequence(path_tokens, positions, ids, probs)

    def _feed(self, tokens, positions, logits) -> None:
        """Record p (top-10) at ``positions``: row r predicts the token after ``tokens[: positions[r] + 1]``."""
        if positions:
            self.store.update_sequence(tokens, positions, *self._top(logits, None))

    def _feed_tree(self, committed: list[int], draft: Draft, logits: torch.Tensor, rows: dict) -> None:
        """Record p at every forwarded node, rejected ones included: each node's context (committed
        tokens + the drafted path to it) is a real token sequence and its logits row is exact for it."""
        ids, probs = self._top(logits, [rows.get(p) for p in range(len(draft.tokens))])
        max_n = self.store.max_n
        suffixes = [tuple(committed[-max_n:])]
        for position in range(1, len(draft.tokens)):
            suffixes.append((suffixes[draft.parents[position]] + (draft.tokens[position],))[-max_n:])
        for position, suffix in enumerate(suffixes):
            self.store.update(suffix, ids[position], probs[position])

    def _top(self, logits: torch.Tensor, rows: list | None) -> tuple[np.ndarray, np.ndarray]:
        """Top-10 ids ``[n, 10]`` int64 and probabilities ``[n, 10]`` float64 of p per row of
        ``logits`` ``[n, vocab]``, reusing the ``[vocab]`` p rows verification already computed
        (``rows[i]``, None where it did not) and computing the others in one batch."""
        n, k = logits.shape[0], min(STORE_TOP_K, logits.shape[-1])
        if rows is None or self.params.greedy:  # greedy rows are one-hot: the store records the softmax
            rows = [None] * n
        have = [i for i, row in enumerate(rows) if row is not None]
        missing = [i for i, row in enumerate(rows) if row is None]
        ids = np.empty((n, k), dtype=np.int64)
        probs = np.empty((n, k), dtype=np.float64)
        if have:
            top = torch.topk(torch.from_numpy(np.stack([rows[i] for i in have])), k, dim=-1)
            ids[have], probs[have] = top.indices.numpy(), top.values.numpy()
        if missing:
            source = logits if len(missing) == n else logits[missing]
            top = torch.topk(target_probs(source, store_params(self.params)), k, dim=-1)
            ids[missing], probs[missing] = top.indices.cpu().numpy(), top.values.cpu().double().numpy()
        return ids, probs

    def _measure_root(self, draft: Draft, p: np.ndarray | None) -> None:
        """Diagnostics: q at a drafted root against p (q as drafted: the store is fed after this)."""
        root_n, self._root_n = self._root_n, None
        if root_n is None or p is None or not self.tree.children[0]:
            return  # the step was not drafted (token budget) or the tree has no root children
        if root_n == 0:
            self.quality.add(0)
        elif draft.draft_ids[0] is not None:
            self.quality.add(root_n, p, draft.draft_ids[0], draft.draft_probs[0], len(self.tree.children[0]))

    def stats(self) -> dict:
        stats = self.store.stats().as_dict()
        if self.quality is not None:
            stats["root"] = self.quality.as_dict()
        return stats


def _chain_draft(root: int, tokens: list[int]) -> Draft:
    """A chain draft (root, t1, t2, ...) without draft probabilities."""
    n = len(tokens) + 1
    return Draft(
        nodes=np.arange(n, dtype=np.int64),
        tokens=[root, *tokens],
        parents=np.arange(-1, n - 1, dtype=np.int64),
        depths=np.arange(n, dtype=np.int64),
        children=[[i + 1] for i in range(n - 1)] + [[]],
        slots=[-1] + [0] * (n - 1),
        draft_ids=[None] * n,
        draft_probs=[None] * n,
        stochastic=False,
    )


class PromptLookupDrafter:
    """Prompt lookup decoding: copy what followed the latest earlier occurrence of the suffix n-gram."""

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10) -> None:
        self.max_ngram = max_ngram
        self.num_tokens = num_tokens
        self.tree = DraftTree.chain(num_tokens)
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram → end index of its latest occurrence
        self._indexed = 0  # n-grams ending before this index are in ``_latest``
        self._sequence: list[int] = []

    def observe_prompt(self, prompt, logits) -> None:
        pass

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        if committed[: len(self._sequence)] != self._sequence:  # a new sequence: start over
            self._latest, self._indexed = {}, 0
        self._sequence = list(committed)
        last = len(committed) - 1
        for end in range(self._indexed, last):  # every n-gram ending before the current suffix
            for n in range(1, self.max_ngram + 1):
                if end - n + 1 >= 0:
                    self._latest[tuple(committed[end - n + 1 : end + 1])] = end
        self._indexed = max(self._indexed, last)
        limit = min(self.num_tokens, max_depth)
        for n in range(min(self.max_ngram, len(committed)), 0, -1):
            end = self._latest.get(tuple(committed[-n:]))
            if end is not None and limit > 0:
                return _chain_draft(committed[-1], committed[end + 1 : end + 1 + limit])
        return Draft.root_only(committed[-1])

    def observe_step(self, committed, draft, verification, logits, rows) -> None:
        pass

    def stats(self) -> None:
        return None


class RecyclingMatrix:
    """Token Recycling's adjacency matrix: the target's top-k next tokens per token.

    Attributes:
        successors: ``[vocab, k]`` int64, row t = the most recent top-k next tokens after t.
        filled: ``[vocab]`` bool, rows written at least once.
    """

    def __init__(self, vocab: int, k: int = RECYCLE_TOP_K) -> None:
        self.k = k
        self.successors = np.zeros((vocab, k), dtype=np.int64)
        self.filled = np.zeros(vocab, dtype=bool)

    def update(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Overwrite the rows of ``tokens`` with the top-k of their ``[n, vocab]`` logits rows."""
        if not tokens:
            return
        top = torch.topk(logits.float(), self.k, dim=-1).indices.cpu().numpy()
        self.successors[np.asarray(tokens)] = top
        self.filled[np.asarray(tokens)] = True

    def stats(self) -> dict:
        return {"filled_rows": int(self.filled.sum())}


class TokenRecyclingDrafter:
    """Token Recycling: breadth-first drafting of the adjacency matrix into a static tree."""

    def __init__(self, tree: DraftTree, matrix: RecyclingMatrix) -> None:
        self.tree = tree
        self.matrix = matrix

    def observe_prompt(self, prompt, logits) -> None:
        self.matrix.update(prompt[: len(logits)], logits)

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        tree, matrix = self.tree, self.matrix
        nodes, tokens, parents, depths = [0], [committed[-1]], [-1], [0]
        children: list[list[int]] = [[]]
        position = 0
        while position < len(nodes):
            token = tokens[position]
            static_children = tree.children[nodes[position]]
            if static_children and depths[position] < max_depth and matrix.filled[token]:
                row = matrix.successors[token]
                for rank in range(min(len(static_children), matrix.k)):
                    children[position].append(len(nodes))
                    nodes.append(static_children[rank])
                    tokens.append(int(row[rank]))
                    parents.append(position)
                    depths.append(depths[position] + 1)
                    children.append([])
            position += 1
        n = len(nodes)
        return Draft(np.asarray(nodes), tokens, np.asarray(parents), np.asarray(depths), children,
                     [-1] + [0] * (n - 1), [None] * n, [None] * n, False)

    def observe_step(self, committed, draft, verification, logits, rows) -> None:
        self.matrix.update(draft.tokens, logits)

    def stats(self) -> dict:
        return self.matrix.stats()
