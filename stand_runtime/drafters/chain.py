"""STAND drafted as a chain: for engines whose verifier takes one draft path (vLLM).

A chain of K tokens is the static tree of K nodes with one child each (STAND paper §3.2 with
m = 1 at every depth), drafted from the blended store of the dynamic tree
(:meth:`stand_runtime.store.ngram_store.NGramStore.blend`, contexts up to
:data:`stand_runtime.store.drafting.DYNAMIC_MAX_N`): each token is drawn from the blend
q(. | context so far) by Gumbel-Top-1 (one sample, i.e. exact sampling from q), or is q's most likely
token for deterministic drafts (greedy decoding). Each position takes its q from the first of:

1. the request's own store, where it matched a context (the blend's count > 0, not the 0-gram table
   alone);
2. the copy chain (prompt lookup's continuation of the committed context), while the chain drafted so
   far equals its prefix; a copied token's q is one-hot (it is not drawn);
3. a fallback store shared by every request (cross-prompt memory: the first samples of a new prompt
   draft from what earlier prompts taught), where it matched a context;

and the chain ends at the first position none covers. Where the own store and the copy chain both
cover a position and the cursor has an acceptance ``estimate`` (the sized rule's, per score and kind),
the one with the higher estimated P drafts it: the own store's blend answers almost every context
once a request has generated a few tokens (a one-token context suffices), which kept prompt lookup's
chain, often the surer guess on code, from ever being drafted after a request's first steps.

Every position carries a score, as the dynamic tree's nodes do (:mod:`.best_first`): the position is
offered with ``running · w · q_(0)`` (q at rank 0, the largest value of its q; w = c / (c + 1) for
the blend's count c; a copied position: ``running · r``), fixed *before* its token is drawn, and once
drawn the running product takes ``w · q(token)`` (a copied one r). A copy's r grows with the length n
of the suffix it matched (:meth:`stand_runtime.drafters.suffix_index.SuffixIndex.match`; ``r =
COPY_DECAY ** (1 + longest - n)``, :func:`stand_runtime.sizing.value.match_rate`, longest the
index's n-gram length; a match measured past it, n > longest, ``COPY_DECAY ** (longest / n)``): a copy
after an 8-token match is a surer guess than one after a single token, and the acceptance map learns copied positions by match and place in the chain. Whether a
position is drafted may therefore depend on its score (and on earlier positions' draws), never on its
own draw: the rule that keeps a chain cut by its scores lossless (:mod:`.chain_budget`, docs/vllm.md §7.7).

Speculative sampling with the recorded q (accept x with probability min(1, p(x) / q(x)), else draw
from the residual norm(max(p - q, 0)); Leviathan et al., 2023, §2.3) is lossless because every
token is an exact draw from its q; with a one-hot q it is the deterministic-draft rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..store.drafting import COPY_DECAY
from ..store.gumbel import choose_children
from ..store.ngram_store import NGramStore
from ..randomness import RandomStream

OWN, COPIED, FALLBACK = 0, 1, 2
"""Kinds of chain position: q from the request's own store, a copied token, q from the fallback store."""

KINDS = 3
"""Number of position kinds (acceptance is learned per kind)."""


@dataclass
class ChainDraft:
    """A drafted chain and the distribution each token was drawn from.

    Attributes:
        tokens: the K' <= K drafted token ids, in order.
        support: per token, ``(ids [m] int64, q [m] float64)``: the draw's distribution over its
            support (sums to 1); ``None`` for a copied token (one-hot on it).
        scores: per token, the score it was offered with (fixed before its draw; module docstring).
        kinds: per token, :data:`OWN`, :data:`COPIED` or :data:`FALLBACK`.
    """

    tokens: list[int] = field(default_factory=list)
    support: list[tuple[np.ndarray, np.ndarray] | None] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)


class ChainCursor:
    """A chain drafted one position at a time: :meth:`peek` the next position's score and kind,
    :meth:`take` it (its token is drawn only then).

    Args:
        store: the request's n-gram store (blended lookups).
        context: committed tokens (at least one), the last one being the chain's root.
        limit: tokens to draft at most.
        randomness: Gumbel noise for stochastic drafts (each token an exact draw from q); None =
            deterministic drafts (q's most likely token).
        copy: tokens that followed the latest earlier occurrence of the context's suffix (prompt
            lookup's chain); None or empty = no copy chain.
        copy_rate: r, the factor each copied position takes (module docstring;
            :func:`stand_runtime.sizing.value.match_rate`).
        fallback: a store shared by every request, read where ``store`` and the copy chain have
            nothing; None = none.
        confidence: pseudo-count of the confidence ``w = c / (c + confidence)``.
        beta: the blend's weight of distinct ids (Witten-Bell: 1).
        estimate: P(path accepted) of a position from its score and kind (e.g.
            :meth:`stand_runtime.sizing.value.AcceptanceMap.estimator`); where both the own store and
            the copy chain cover a position the higher estimate drafts it; None = the own store first.
            Settable until the first :meth:`peek`.
    """

    def __init__(self, store: NGramStore, context: list[int], limit: int, randomness: RandomStream | None,
                 copy: list[int] | None = None, fallback: NGramStore | None = None, confidence: float = 1.0,
                 beta: float = 1.0, estimate: Callable[[float, int], float] | None = None,
                 copy_rate: float = COPY_DECAY) -> None:
        self.store, self.fallback, self.randomness = store, fallback, randomness
        self.noise = None if randomness is None else randomness.at(len(context))
        self.copy_rate = copy_rate
        self.estimate = estimate
        self.limit, self.confidence, self.beta = limit, confidence, beta
        self.copy = list(copy or ())
        self.draft = ChainDraft()
        self._width = max(store.max_n, fallback.max_n if fallback is not None else 1)
        self._window = tuple(context[-self._width:])
        self._running = 1.0
        self._on_copy = True  # the chain so far equals the copy chain's prefix
        self._next: tuple | None = None  # (score, kind, entry or None, weight) of the next position
        self._ended = limit <= 0

    @property
    def root(self) -> int:
        """The chain's root: the last committed token (the token its first draft follows)."""
        return self._window[-1]

    def _matched(self, store: NGramStore | None):
        """The blend of ``store`` after the window and its confidence, when a context matched."""
        if store is None:
            return None
        entry = store.blend(self._window, self.beta)
        if entry is None or entry.count <= 0:
            return None
        weight = entry.count / (entry.count + self.confidence) if self.confidence else 1.0
        return entry, weight

    def _look(self) -> tuple | None:
        depth = len(self.draft)
        own = self._matched(self.store)
        on_copy = self._on_copy and depth < len(self.copy)
        copied = (self._running * self.copy_rate, COPIED, None, 1.0) if on_copy else None
        if own is not None:
            offer = (self._running * own[1] * own[0].prob_list[0], OWN, *own)
            if copied is None or self.estimate is None or self.estimate(*offer[:2]) >= self.estimate(*copied[:2]):
                return offer
        if copied is not None:
            return copied
        shared = self._matched(self.fallback)
        if shared is not None:
            return self._running * shared[1] * shared[0].prob_list[0], FALLBACK, *shared
        return None

    def peek(self) -> tuple[float, int] | None:
        """``(score, kind)`` of the next position, or None where the chain ends (limit reached, or
        no store and no copy covers the position). Looks the position's q up once."""
        if self._ended:
            return None
        if self._next is None:
            self._next = self._look()
            if self._next is None:
                self._ended = True
                return None
        return self._next[0], self._next[1]

    def take(self) -> int:
        """Draft the next position (draw its token) and return the token.

        Raises:
            IndexError: the chain has ended (:meth:`peek` is None).
        """
        if self.peek() is None:
            raise IndexError("the chain has ended: no next position to draft")
        score, kind, entry, weight = self._next
        draft = self.draft
        if entry is None:
            token = self.copy[len(draft)]
            draft.support.append(None)
            self._running *= self.copy_rate
        else:
            slot = choose_children(entry.log_q, 1, self.noise, len(draft), entry.ids)[0]
            token = entry.id_list[slot]
            draft.support.append((entry.ids, entry.q))
            self._running *= weight * entry.prob_list[slot]
        self._on_copy = self._on_copy and len(draft) < len(self.copy) and self.copy[len(draft)] == token
        draft.tokens.append(token)
        draft.scores.append(float(score))
        draft.kinds.append(kind)
        self._window = (self._window + (token,))[-self._width:]
        self._next = None
        self._ended = len(draft) >= self.limit
        return token


def draft_chain(store: NGramStore, context: list[int], length: int, randomness: RandomStream | None,
                copy: list[int] | None = None, fallback: NGramStore | None = None) -> ChainDraft:
    """Draft up to ``length`` tokens continuing ``context`` (a fixed K: every position the stores or
    the copy chain cover, :class:`ChainCursor`).

    Returns:
        The :class:`ChainDraft`; it ends at the first position neither the stores nor the copy chain
        cover, or at ``length``.
    """
    cursor = ChainCursor(store, context, length, randomness, copy, fallback)
    while cursor.peek() is not None:
        cursor.take()
    return cursor.draft
