"""STAND drafting (STAND paper §3.1-3.2): the logit n-gram store drafted into a static tree.

Each node's children are drawn from the store's q(. | context) by Gumbel-Top-K (stochastic) or
taken as q's top-m (deterministic: the paper's ablation, and greedy decoding). The store is fed with
the target's p (top-10) at every prompt position and every committed position, or optionally at
every forwarded tree node, rejected ones included (docs/algorithms.md §2.4 option: each node's context is a
real token sequence and its logits row is exact for it).
"""

from __future__ import annotations

from dataclasses import replace

import time

import numpy as np

from .base import Drafter
from .diagnostics import DraftQuality
from ..trees.draft import Draft
from .prior import SuccessorPrior
from .feeds import STORE_TOP_K, TargetFeed, feed_store, store_observation, store_params
from ..store.native_store import FeedRow
from ..store.learned import learned_sequences
from ..store.ngram_store import NGramStore
from ..randomness import DraftNoise
from ..target.sampling import SamplingParams
from ..trees.tree import DraftTree
from ..store.drafting import COPY_DECAY, MAX_DYNAMIC_NODES, DynamicTree, best_first_draft, draft_tree
from ..store.native_draft import DraftRequest
from .suffix_index import MAX_MATCH, PROMPT_LOOKUP_NGRAM, copy_index, repeated
from ..trees.tree_walk import Extension
from ..sizing.value import COPY_NGRAM, ValueRule, copied_mask, match_rate, value_scores

__all__ = ["STORE_TOP_K", "StandDrafter", "store_params"]


class StandDrafter(Drafter):
    """STAND as a :class:`stand_runtime.drafters.Drafter`.

    Args:
        tree: the static draft tree, or a :class:`DynamicTree` (a node budget spent best-first on
            the store's blended q every step, :mod:`stand_runtime.store.drafting`).
        store: the n-gram store (shared across calls for best-of-N).
        randomness: Gumbel noise for stochastic drafts; None = deterministic top-m drafts.
        params: the target sampling distribution (what the store records).
        feed_rejected: also record p at rejected tree nodes (docs/algorithms.md §2.4 option).
        quality: when given, q is measured against p at every drafted root (diagnostics; the time it
            takes is tallied in ``diagnostics_s``, seconds).
        extend: reassign the node budget misses leave unused (None: the static tree only; a dynamic
            tree spends its budget by itself).
        copy: longest copy chain grafted per step (0: none): the tokens that followed the latest
            earlier occurrence of the context's suffix (prompt lookup's match), followed along the
            drafted children that agree with it and hung below the path's end. A dynamic tree's
            chain (the sequence's end cut continued as a repeat, :func:`.suffix_index.repeated`) is
            scored by the length of its match (:func:`.value.match_rate`) and competes for the
            budget: a fixed one in :func:`stand_runtime.store.drafting.best_first_draft`, a value-sized
            one in the rule, which is offered at most as many tokens as :meth:`ValueRule.budget` allows.
        value: the expected-value rule of a value-sized dynamic tree, or None.
        prior: the target's successor prior (:mod:`.prior`): a step whose root token has no 1-token
            context in the store gets the prior's row for it first; None = none.

    The store drafts the tree (static or dynamic; a native store in C++, :mod:`stand_runtime.store.drafting`)
    and the copy chain is found by :func:`.suffix_index.copy_index` (in C++ where the core is built):
    the same drafts either way (§3.8).
    """

    def __init__(self, tree: DraftTree | DynamicTree, store: NGramStore, randomness: DraftNoise | None, params: SamplingParams,
                 feed_rejected: bool = False, quality: DraftQuality | None = None, extend: Extension | None = None,
                 copy: int = 0, value: ValueRule | None = None, prior: SuccessorPrior | None = None) -> None:
        self.value = value
        self.prior = prior
        self.tree = tree
        self.store = store
        self.randomness = randomness
        self.params = params
        self.feed_rejected = feed_rejected
        self.quality = quality
        self.diagnostics_s = 0.0
        self._root_n: int | None = None  # context length of the last drafted root's lookup (0 = miss)
        self.extend = extend
        self.copy = copy
        # a dynamic tree's copies are scored by the length of their match, measured up to MAX_MATCH tokens
        ngram, longest = (COPY_NGRAM, MAX_MATCH) if isinstance(tree, DynamicTree) else (PROMPT_LOOKUP_NGRAM, None)
        self._index = copy_index(ngram, longest) if copy else None
        self._chain: tuple = ()  # the copy chain of the last request (a value-sized draft grafts it when sized)
        self._rate = COPY_DECAY  # and its rate (from the length of the suffix it matched)
        self._covered: tuple | None = None  # (prompt, its length, positions its store learned already)

    @property
    def dynamic(self) -> bool:
        """True when drafting a dynamic tree."""
        return isinstance(self.tree, DynamicTree)

    @property
    def max_nodes(self) -> int:
        """Drafted nodes per step at most (a dynamic tree's budget includes its copied nodes)."""
        return self.tree.num_nodes + (0 if self.dynamic else self.copy)

    def observe_prompt(self, prompt: list[int], feed: TargetFeed, positions: range) -> None:
        """Feed the store p at ``positions`` of ``prompt``, but those it learned from an earlier sequence
        (:mod:`stand_runtime.store.learned`: a tree search's prompts repeat what it decoded)."""
        if not len(positions):
            return
        if self._covered is None or self._covered[0] is not prompt or self._covered[1] != len(prompt):
            # once per prompt, not per prefill chunk (the ledger does not change during a prefill)
            self._covered = (prompt, len(prompt), learned_sequences(self.store).covered(prompt))
        learned = self._covered[2]
        rows = [r for r, position in enumerate(positions) if position >= learned]
        if rows:
            feed_store(self.store, prompt, [positions[r] for r in rows], feed, rows, self.params)

    def learn_sequence(self, tokens: list[int]) -> None:
        """Register ``tokens`` (a row's committed list, fed as it grows) as learned by the store."""
        learned_sequences(self.store).add(tokens)

    @property
    def drafts_in_batch(self) -> bool:
        """True when this drafter drafts a dynamic tree: a batch's rows of such drafters draft in one call
        (:meth:`batch_request`, :func:`stand_runtime.store.drafting.best_first_rows`: native stores' rows in C++)."""
        return self.dynamic

    @property
    def feeds_in_batch(self) -> bool:
        """True when a step's feed is one store update (:meth:`feed_request`; not with
        ``feed_rejected``, which feeds node by node)."""
        return not self.feed_rejected

    def batch_request(self, committed: list[int], max_depth: int) -> DraftRequest:
        """This step's dynamic-tree request ``(tree, store, context, randomness, max_depth, chain,
        copy_rate)`` (:func:`stand_runtime.store.drafting.best_first_draft`'s arguments); the draft it
        gives goes through :meth:`batch_drafted`. A fixed budget lets the copy chain compete for it by
        score; a value-sized tree drafts only drawn nodes (a prefix of the full budget's order the rule
        may keep) and keeps the chain pending beside them: the rule keeps the best of both."""
        chain = self._prepare(committed, max_depth)
        self._chain = tuple(chain or ())[: self.tree.num_nodes]
        tree = self.tree
        if self.value is None:
            return (tree, self.store, committed, self.randomness, max_depth, None if chain is None else list(self._chain),
                    self._rate)
        drawn = min(self.value.budget(tree.num_nodes), MAX_DYNAMIC_NODES - len(self._chain))
        if drawn != tree.num_nodes:
            tree = replace(tree, num_nodes=max(1, drawn))
        return (tree, self.store, committed, self.randomness, max_depth, None, self._rate)

    def batch_drafted(self, draft: Draft) -> Draft:
        """A dynamic draft as the value rule sizes it, else as it is. A value-sized draft leaves its
        copied nodes (grafted last, after every drawn node) to the rule: they go back to a pending
        chain (``Draft.pending_chain``) that competes with the drawn nodes for the budget
        (:func:`stand_runtime.sizing.value.candidates`); the draft is then cut here (rows sized one
        by one, :meth:`ValueRule.size_draft`) or by the engine's batch allocator. While the rule
        reports outcomes (:attr:`ValueRule.on_outcome`), the P it predicted for the kept nodes is kept."""
        if self.value is None:
            return draft
        draft = replace(draft, pending_chain=self._chain, copy_rate=self._rate, _mask=[])
        return draft if self.value.batch_allocated else self.value.size_draft(draft)

    def _prepare(self, committed: list[int], max_depth: int) -> list[int] | None:
        """Before a draft: the root's context from the prior where the store lacks it, the root's
        match for diagnostics, and the copy chain."""
        if self.prior is not None:
            self.prior.fill(self.store, committed[-1])
        if self.quality is not None:
            match = self.store.match(committed)
            self._root_n = 0 if match is None else match[0]
        if self._index is None:
            return None
        limit = min(self.copy, max_depth)
        if not self.dynamic:
            return self._index.continuation(committed, limit)
        if self.value is not None:
            limit = self.value.budget(limit)  # no longer than recent sizes let pay
        chain, match = self._index.match(committed, limit)
        self._rate = match_rate(match, self._index.max_ngram)
        return repeated(chain, limit)

    def draft(self, committed: list[int], max_depth: int) -> Draft:
        if self.dynamic:
            return self.batch_drafted(best_first_draft(*self.batch_request(committed, max_depth)))
        chain = self._prepare(committed, max_depth)
        return draft_tree(self.tree, self.store, committed, self.randomness, max_depth, self.extend, chain)

    def observe_step(self, committed, draft, accepted, feed: TargetFeed) -> None:
        request = self.feed_request(committed, draft, accepted, feed)
        if request is not None:
            self.store.update_sequence(*request[1:])

    def feed_request(self, committed, draft, accepted, feed: TargetFeed) -> FeedRow | None:
        """:meth:`observe_step` but for the store update, returned as ``(store, tokens, positions,
        ids, probs)`` (:meth:`NGramStore.update_sequence`'s arguments; a batch merges its rows' in
        one call, :func:`stand_runtime.store.native_store.update_sequences`); with ``feed_rejected``
        the store is fed here and None is returned."""
        if self.value is not None and draft.scores is not None:
            self.value.observe(value_scores(draft), copied_mask(draft), accepted, self.value.recall(draft))
        if self.quality is not None:
            start = time.perf_counter()
            self._measure_root(draft, getattr(feed, "rows", {}).get(0))
            self.diagnostics_s += time.perf_counter() - start
        if self.feed_rejected:
            self._feed_tree(committed, draft, feed.observed(accepted), feed)
            return None
        keep = [0, *accepted]
        base = max(0, len(committed) - self.store.max_n)  # the contexts' tokens only: no copy of the whole sequence
        path_tokens = committed[base:] + [draft.tokens[p] for p in accepted]
        positions = list(range(len(committed) - 1 - base, len(committed) - 1 - base + len(keep)))
        ids, probs = store_observation(feed, keep, self.params)
        return (self.store, path_tokens, positions, ids, probs)

    def _feed_tree(self, committed: list[int], draft: Draft, observed: list[int], feed: TargetFeed) -> None:
        """Record p (top-10; for greedy decoding the softmax) at every observed forwarded node,
        rejected ones included: each node's context (committed tokens + the drafted path to it) is a
        real token sequence and its row is exact for it."""
        ids, probs = store_observation(feed, observed, self.params)
        max_n = self.store.max_n
        suffixes = [tuple(committed[-max_n:])]
        for position in range(1, len(draft.tokens)):
            suffixes.append((suffixes[draft.parents[position]] + (draft.tokens[position],))[-max_n:])
        for row, position in enumerate(observed):
            self.store.update(suffixes[position], ids[row], probs[row])

    def _measure_root(self, draft: Draft, p: np.ndarray | None) -> None:
        """Diagnostics: q at a drafted root against p (q as drafted: the store is fed after this)."""
        root_n, self._root_n = self._root_n, None
        if root_n is None or p is None or not self.dynamic and not self.tree.children[0]:
            return  # the step was not drafted (token budget) or the static tree has no root children
        width = len([c for c in draft.children[0] if c not in draft.copied]) if self.dynamic else len(self.tree.children[0])
        if root_n == 0:
            self.quality.add(0)
        elif draft.draft_ids[0] is not None and width:
            self.quality.add(root_n, p, draft.draft_ids[0], draft.draft_probs[0], width)

    def stats(self) -> dict:
        stats = self.store.stats().as_dict()
        if self.quality is not None:
            stats["root"] = self.quality.as_dict()
        return stats
