"""The logit-based n-gram store: the draft distributions q of STAND.

STAND paper (STochastic Adaptive N-gram Drafting), §3.1. For every observed context of n tokens
(n = 3, 2, 1, i.e. 4-gram down to 2-gram tables) the store keeps the target model's sampling
distribution p of the *next* token, truncated to its top k ids (k = 10), with a count c.

A context seen again merges its new observation d into the stored s by a count-weighted running
average over the union of ids, an id missing from one side counting as 0::

    s' = (c * s + d) / (c + 1),  keep the k largest,  c' = c + 1

The mass cut off by the truncation is tallied in :class:`StoreStats`. Drafting uses q = s renormalised
over its support. Lookup is longest match first: the 3-token context, then 2, then 1; the first hit
wins, and a miss returns ``None``.

Two policies of ours have their own modules: reserve admission (:mod:`stand_runtime.store.entry`:
ids just below the top k keep their running averages, so a new successor can climb in) and the
blended lookup (:mod:`stand_runtime.store.blend`: the tables and a 0-gram table interpolated as
Witten-Bell smoothing does, for dynamic trees). Observations are checked and truncated in
:mod:`stand_runtime.store.entry`; entries and statistics are :mod:`stand_runtime.store.entry`'s.

Memory is bounded: each table keeps at most ``max_entries_per_n`` contexts and evicts the least
recently updated one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from ..checks import check_int
from ..errors import StandError
from .entry import merge_observation
from .blend import BLEND_WIDTH, UnigramTable, blend_tables, check_blend
from .entry import BYTES_PER_ENTRY, BYTES_PER_RESERVE_ID, StoreEntry, StoreStats
from .entry import top_observation

__all__ = ["BLEND_WIDTH", "MAX_CONTEXT", "MAX_ENTRIES", "MAX_TOP_K", "NGramStore", "StoreEntry", "StoreStats", "check_base"]

MAX_CONTEXT = 64
"""Longest context a store keeps (tokens): one table per length, so ``max_n`` bounds the store's
work per update before any data arrives (STAND's static trees use 3, dynamic trees 8)."""

MAX_TOP_K = 1024
"""Ids a store keeps per context at most (``top_k`` and ``reserve`` each; the paper's k is 10)."""

MAX_ENTRIES = 10**9
"""Contexts per table at most (``max_entries_per_n``)."""


def check_base(store: "NGramStore", base) -> "NGramStore | None":
    """``base`` when it can be ``store``'s cross-prompt memory: None, or a store of exactly ``store``'s
    class (a native store's memory is native) keeping its ``max_n`` and ``top_k`` (so that it takes the
    store's observations and contexts as they are), without a base of its own.

    Raises:
        StandError: anything else (one line).
    """
    if base is None:
        return None
    if type(base) is not type(store):
        raise StandError(f"a {type(store).__name__}'s cross-prompt memory (base) must be a {type(store).__name__}, "
                         f"not {type(base).__name__}")
    if base.base is not None:
        raise StandError("a cross-prompt memory (base) cannot have a base of its own")
    if (base.max_n, base.top_k) != (store.max_n, store.top_k):
        raise StandError(f"a cross-prompt memory (base) must keep the store's max_n and top_k "
                         f"({store.max_n}, {store.top_k}), not ({base.max_n}, {base.top_k})")
    return base


def _check_size(name: str, value, minimum: int, maximum: int) -> int:
    try:
        return check_int(name, value, minimum, maximum)
    except StandError as error:
        raise StandError(f"NGramStore: {error}") from None


class NGramStore:
    """Logit-based n-gram store (STAND §3.1).

    Args:
        top_k: ids of q per context (the paper's k = 10), 1 .. :data:`MAX_TOP_K`.
        max_n: longest context length (tokens, 1 .. :data:`MAX_CONTEXT`); tables exist for n = max_n .. 1.
        max_entries_per_n: memory bound per table (contexts); the least recently updated is evicted.
        reserve: candidate ids kept per context beyond the top k (:mod:`stand_runtime.store.entry`);
            0 gives the paper's plain truncation.
        base: a cross-prompt memory (ours): a store of the same kind, shared by the stores of many
            problems, that every observation of this store also feeds and that :meth:`blend` reads
            below this store's own tables (:mod:`stand_runtime.store.blend`); its drafts reach a
            problem's first sample. :meth:`lookup` (static trees) reads this store alone. None = none.

    Raises:
        StandError: a parameter is out of range; a base that is not a store of this store's kind, keeps
            another ``max_n`` or ``top_k``, or has a base of its own (:func:`check_base`).
    """

    def __init__(self, top_k: int = 10, max_n: int = 3, max_entries_per_n: int = 500_000, reserve: int = 10,
                 base: "NGramStore | None" = None) -> None:
        top_k = _check_size("top_k", top_k, 1, MAX_TOP_K)
        max_n = _check_size("max_n", max_n, 1, MAX_CONTEXT)
        max_entries_per_n = _check_size("max_entries_per_n", max_entries_per_n, 1, MAX_ENTRIES)
        reserve = _check_size("reserve", reserve, 0, MAX_TOP_K)
        self.top_k = top_k
        self.reserve = reserve
        self.max_n = max_n
        self.max_entries_per_n = max_entries_per_n
        self._tables: dict[int, OrderedDict[tuple[int, ...], StoreEntry]] = {
            n: OrderedDict() for n in range(max_n, 0, -1)
        }
        self._lookups = 0
        self._hits = {n: 0 for n in range(max_n, 0, -1)}
        self._merges = 0
        self._dropped_mass = 0.0
        self._evictions = 0
        self._max_token_id = -1
        self._reserve_ids = 0  # reserve ids held over all entries (memory estimate)
        self._unigram = UnigramTable()
        self.base = check_base(self, base)

    @property
    def max_token_id(self) -> int:
        """The largest token id ever stored (-1 when empty): a store built for one vocabulary must
        not draft for a model with a smaller one."""
        return self._max_token_id

    def lookup(self, context: Sequence[int]) -> StoreEntry | None:
        """The draft distribution for the token after ``context``, longest match first.

        Args:
            context: the tokens before the predicted position (only the last ``max_n`` are read).

        Returns:
            The entry of the longest stored suffix of ``context``, or ``None`` on a miss.
        """
        self._lookups += 1
        match = self.match(context)
        if match is None:
            return None
        n, entry = match
        self._hits[n] += 1
        return entry

    def match(self, context: Sequence[int]) -> tuple[int, StoreEntry] | None:
        """Like :meth:`lookup`, but also returns the matched context length n and counts nothing.

        Args:
            context: the tokens before the predicted position (only the last ``max_n`` are read).

        Returns:
            ``(n, entry)`` for the longest stored suffix of ``context`` (n tokens), or ``None``.
        """
        context = tuple(context[-self.max_n :])
        for n in range(len(context), 0, -1):
            entry = self._tables[n].get(context[-n:])
            if entry is not None:
                return n, entry
        return None

    def blend(self, context: Sequence[int], beta: float = 1.0, width: int = BLEND_WIDTH) -> StoreEntry | None:
        """The interpolated draft distribution for the token after ``context`` (:mod:`stand_runtime.store.blend`).

        Args:
            context: the tokens before the predicted position (only the last ``max_n`` are read).
            beta: weight of a context's distinct ids against its count (Witten-Bell: 1).
            width: ids the blend keeps (its most likely; q is renormalised over them).

        Returns:
            An entry whose ``q`` is the blend over ``width`` ids, sorted by decreasing q, and whose
            ``count`` is the longest matched context's observations (0 when only the 0-gram table
            answers); ``None`` when the store is empty. Counted in :meth:`stats` as a lookup
            answered by the longest matched table (a miss when only the 0-gram table answers).

        Raises:
            StandError: ``width`` below 1, or ``beta`` negative or not finite.
        """
        check_blend(beta, width)
        floor = None if self.base is None else self.base.blend(context, beta, width)
        if floor is None and not self._unigram:
            return None
        floor = self._unigram if floor is None else floor
        entry, matched = blend_tables(self._tables, floor, tuple(context[-self.max_n :]), beta, width)
        self._lookups += 1
        if matched:
            self._hits[matched] += 1
        return entry

    def update(self, context: Sequence[int], ids: Sequence[int], probs: Sequence[float]) -> None:
        """Merge one observation of p into every table that ``context`` has a key for.

        Args:
            context: the tokens before the predicted position (at least 1; the last ``max_n`` are read).
            ids: ``[k']`` distinct non-negative token ids of the observation (the top ids of p).
            probs: ``[k']`` their probabilities under p (after temperature and top-p), in [0, 1];
                zeros are not stored.

        Raises:
            StandError: ids and probs of different lengths, an id that is not a non-negative int, a
                repeated id, or a probability that is not a finite number in [0, 1].
        """
        context = tuple(context[-self.max_n :])
        id_list, prob_list = top_observation(ids, probs, self.top_k)
        if not id_list:
            return
        self._max_token_id = max(self._max_token_id, max(id_list))
        self._unigram.add(id_list, prob_list)
        for n in range(len(context), 0, -1):
            key = context[-n:]
            table = self._tables[n]
            stored = table.get(key)
            if stored is None:
                table[key] = StoreEntry(id_list, prob_list, 1)
                if len(table) > self.max_entries_per_n:
                    _, evicted = table.popitem(last=False)
                    self._reserve_ids -= len(evicted.reserve[0])
                    self._evictions += 1
            else:
                merged, dropped = merge_observation(stored, id_list, prob_list, self.top_k, self.reserve)
                self._merges += 1
                self._dropped_mass += dropped
                self._reserve_ids += len(merged.reserve[0]) - len(stored.reserve[0])
                table[key] = merged
                table.move_to_end(key)
        if self.base is not None:
            self.base.update(context, id_list, prob_list)

    def update_sequence(
        self, tokens: Sequence[int], positions: Sequence[int], ids: np.ndarray, probs: np.ndarray
    ) -> None:
        """Feed p at several positions of one token sequence.

        Args:
            tokens: the committed sequence (prompt + generated).
            positions: for each observation, the index i of the last context token: row r is p of
                the token after ``tokens[: positions[r] + 1]``.
            ids: ``[len(positions), k']`` int64 top ids of p per row.
            probs: ``[len(positions), k']`` float probabilities of those ids.
        """
        for row, pos in enumerate(positions):
            start = max(0, pos + 1 - self.max_n)
            self.update(tokens[start : pos + 1], ids[row], probs[row])

    def stats(self) -> StoreStats:
        """A snapshot of the store's size and lookup statistics."""
        entries = {n: len(table) for n, table in self._tables.items()}
        return StoreStats(
            entries_by_n=entries,
            approx_bytes=BYTES_PER_ENTRY * sum(entries.values()) + BYTES_PER_RESERVE_ID * self._reserve_ids,
            lookups=self._lookups,
            hits_by_n=dict(self._hits),
            misses=self._lookups - sum(self._hits.values()),
            merges=self._merges,
            dropped_mass=self._dropped_mass,
            evictions=self._evictions,
        )

    def contexts(self) -> list[tuple[int, ...]]:
        """Every stored context (tokens), longest tables first."""
        return [key for table in self._tables.values() for key in table]

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables.values())
