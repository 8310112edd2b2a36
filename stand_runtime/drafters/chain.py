"""STAND drafted as a chain: for engines whose verifier takes one draft path (vLLM).

A chain of K tokens is the static tree of K nodes with one child each (STAND paper §3.2 with
m = 1 at every depth): each token is drawn from the store's q(. | context so far) by Gumbel-Top-1
(one sample, i.e. exact sampling from q), or is q's most likely token for deterministic drafts
(greedy decoding). Where the store misses, the chain may continue along the copy chain (prompt
lookup's continuation of the committed context) as long as the drafted tokens agree with it; a
copied token's draft distribution is one-hot (it is not drawn).

Speculative sampling with the recorded q (accept x with probability min(1, p(x) / q(x)), else draw
from the residual norm(max(p - q, 0)); Leviathan et al., 2023, §2.3) is lossless because every
token is an exact draw from its q; with a one-hot q it is the deterministic-draft rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gumbel import choose_children
from ..store.ngram_store import NGramStore
from ..randomness import RandomStream


@dataclass
class ChainDraft:
    """A drafted chain and the distribution each token was drawn from.

    Attributes:
        tokens: the K' <= K drafted token ids, in order.
        support: per token, ``(ids [m] int64, q [m] float64)``: the draw's distribution over its
            support (sums to 1); ``None`` for a copied token (one-hot on it).
    """

    tokens: list[int] = field(default_factory=list)
    support: list[tuple[np.ndarray, np.ndarray] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)


def draft_chain(store: NGramStore, context: list[int], length: int, randomness: RandomStream | None,
                copy: list[int] | None = None) -> ChainDraft:
    """Draft up to ``length`` tokens continuing ``context`` from the n-gram store.

    Args:
        store: the logit n-gram store (longest match first, :meth:`NGramStore.lookup`).
        context: committed tokens (at least one), the last one being the chain's root.
        length: tokens to draft at most (K).
        randomness: Gumbel noise for stochastic drafts (each token an exact draw from q); None =
            deterministic drafts (q's most likely token).
        copy: tokens that followed the latest earlier occurrence of the context's suffix (prompt
            lookup's chain); where the store misses, the chain continues with them while it agrees
            with their prefix. None or empty = no copy chain.

    Returns:
        The :class:`ChainDraft`; it ends at the first position neither the store nor the copy chain
        covers.
    """
    draft = ChainDraft()
    window = list(context[-store.max_n:])
    copy = copy or []
    for depth in range(length):
        entry = store.lookup(window)
        if entry is not None:
            slot = choose_children(entry.log_q, 1, randomness)[0]
            token = entry.id_list[slot]
            draft.support.append((entry.ids, entry.q))
        elif depth < len(copy) and draft.tokens == copy[:depth]:
            token = copy[depth]
            draft.support.append(None)
        else:
            break
        draft.tokens.append(token)
        window = (window + [token])[-store.max_n:]
    return draft
