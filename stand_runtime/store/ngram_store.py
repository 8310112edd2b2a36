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

Admission (ours): the truncation would lose, at every merge, the whole mass of a token that is not
(yet) among the k largest, so a new successor observed with a sharp p could never climb in: after
c observations it enters with 1/(c+1) against stored values ~c/(c+1) of theirs (with 10 one-hot
successors seen once each and a new one seen 100 times, it entered only by float rounding, ~2% of the
time). Each entry therefore also keeps a *reserve*: the next ``reserve`` ids by merged value, with
their exact running averages, which q does not show. A reserve id keeps accumulating and is promoted
as soon as its average passes the k-th; the k ids q shows keep exactly the paper's values.

Memory is bounded: each table keeps at most ``max_entries_per_n`` contexts and evicts the least
recently updated one.

Blended lookup (ours, for STAND's dynamic draft trees, :mod:`stand_runtime.drafters.best_first`):
:meth:`NGramStore.blend` interpolates the tables instead of taking the longest match alone, as an
n-gram language model is smoothed (Witten and Bell, 1991; Chen and Goodman, 1998, §2.5): from the
0-gram table (the mean p of every observation: which tokens are frequent at all) up to the longest
stored context, each level n mixes its own q with the blend below it,

    b_n = λ_n q_n + (1 - λ_n) b_{n-1},   λ_n = c_n / (c_n + β u_n)

(c_n observations and u_n ids of the n-token context's entry; β = 1 is Witten-Bell's weight). A
token the longest context never saw followed by is then still drafted where a shorter context
predicts it, and a context seen once does not claim certainty. Measured on recorded reasoning traces
(README, trace bench): the blend added ~12% to the acceptance length of a best-first tree over the
longest match alone.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..checks import check_int
from ..errors import StandError

# Estimated bytes per stored context (key tuple, entry object, id and probability lists, dict slot),
# measured with tracemalloc on CPython 3.11, k = 10: ~410 fresh, ~700 once drafting cached its arrays;
# a full reserve of 10 adds ~400.
_BYTES_PER_ENTRY = 560
_BYTES_PER_RESERVE_ID = 40

BLEND_WIDTH = 16
"""Ids a blended lookup (:meth:`NGramStore.blend`) keeps."""


class StoreEntry:
    """One context's draft distribution.

    Attributes:
        id_list: ``m`` token ids, m <= k, by decreasing probability (Python ints): q's support.
        prob_list: ``m`` running-average target probabilities (sum <= 1: the truncated mass is missing).
        count: observations merged so far.
        reserve: ``(ids, probs)`` of the next most likely ids (running averages as well), candidates
            for q's support that drafting does not see; empty tuples when none.

    The arrays drafting and verification need are computed on first use and cached: ``ids``
    (``[m]`` int64), ``q`` (``[m]`` float64, ``prob_list`` renormalised: the draft distribution) and
    ``log_q`` (``[m]`` float64).
    """

    __slots__ = ("id_list", "prob_list", "count", "reserve", "_ids", "_q", "_log_q")

    def __init__(self, id_list: list[int], prob_list: list[float], count: int,
                 reserve: tuple[list[int], list[float]] = ((), ())) -> None:
        self.id_list = id_list
        self.prob_list = prob_list
        self.count = count
        self.reserve = reserve
        self._ids = self._q = self._log_q = None

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            self._ids = np.array(self.id_list, dtype=np.int64)
        return self._ids

    @property
    def q(self) -> np.ndarray:
        if self._q is None:
            probs = np.array(self.prob_list, dtype=np.float64)
            self._q = probs / probs.sum()
        return self._q

    @property
    def log_q(self) -> np.ndarray:
        if self._log_q is None:
            self._log_q = np.log(self.q)
        return self._log_q


@dataclass(frozen=True)
class StoreStats:
    """What the store holds and how it has served lookups.

    Attributes:
        entries_by_n: number of contexts stored per context length n.
        approx_bytes: estimated memory of all entries (bytes).
        lookups: calls to :meth:`NGramStore.lookup`.
        hits_by_n: lookups answered by the n-token table (longest match first).
        misses: lookups answered by no table.
        merges: updates that merged into an existing context.
        dropped_mass: total probability mass cut off by truncation to k (q's support), summed over
            merges (reserve ids included: q does not show them).
        evictions: contexts evicted by the memory bound.
    """

    entries_by_n: dict[int, int]
    approx_bytes: int
    lookups: int
    hits_by_n: dict[int, int]
    misses: int
    merges: int
    dropped_mass: float
    evictions: int

    @property
    def entries(self) -> int:
        """Contexts stored over all tables."""
        return sum(self.entries_by_n.values())

    @property
    def hit_rate_by_n(self) -> dict[int, float]:
        """Fraction of lookups answered by each table."""
        return {n: (hits / self.lookups if self.lookups else 0.0) for n, hits in self.hits_by_n.items()}

    @property
    def hit_rate(self) -> float:
        """Fraction of lookups answered by any table."""
        return 1.0 - self.misses / self.lookups if self.lookups else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "entries": self.entries,
            "entries_by_n": {str(n): c for n, c in self.entries_by_n.items()},
            "approx_bytes": self.approx_bytes,
            "lookups": self.lookups,
            "hit_rate": self.hit_rate,
            "hit_rate_by_n": {str(n): r for n, r in self.hit_rate_by_n.items()},
            "merges": self.merges,
            "dropped_mass": self.dropped_mass,
            "evictions": self.evictions,
        }


def _check_observation(id_list: list, prob_list: list) -> None:
    """Validate an observation in place: its zero-probability entries are removed (never stored)."""
    if len(id_list) != len(prob_list):
        raise StandError(f"store update: {len(id_list)} ids but {len(prob_list)} probabilities")
    if not all(isinstance(p, (float, int, np.floating)) and not isinstance(p, bool) and 0.0 <= p <= 1.0 + 1e-6
               for p in prob_list):
        raise StandError(f"store update: probabilities must be finite numbers in [0, 1], got {prob_list!r}")
    if 0 in prob_list or 0.0 in prob_list:
        kept = [i for i, p in enumerate(prob_list) if p > 0]
        id_list[:], prob_list[:] = [id_list[i] for i in kept], [prob_list[i] for i in kept]
    if not all(type(i) is int and i >= 0 for i in id_list):
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0 for i in id_list):
            raise StandError(f"store update: token ids must be non-negative integers, got {id_list!r}")
        id_list[:] = [int(i) for i in id_list]
    if len(set(id_list)) != len(id_list):
        raise StandError(f"store update: repeated token ids {id_list!r}")


MAX_CONTEXT = 64
"""Longest context a store keeps (tokens): one table per length, so ``max_n`` bounds the store's
work per update before any data arrives (STAND's static trees use 3, dynamic trees 8)."""

MAX_TOP_K = 1024
"""Ids a store keeps per context at most (``top_k`` and ``reserve`` each; the paper's k is 10)."""

MAX_ENTRIES = 10**9
"""Contexts per table at most (``max_entries_per_n``)."""


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
        reserve: candidate ids kept per context beyond the top k (see the module docstring); 0 gives
            the paper's plain truncation.

    Raises:
        StandError: a parameter is out of range.
    """

    def __init__(self, top_k: int = 10, max_n: int = 3, max_entries_per_n: int = 500_000, reserve: int = 10) -> None:
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
        self._unigram: dict[int, float] = {}  # the 0-gram table: summed p of every observation
        self._unigram_top: tuple | None = None  # its top ids and q, recomputed after an update

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
        """The interpolated draft distribution for the token after ``context`` (module docstring).

        Args:
            context: the tokens before the predicted position (only the last ``max_n`` are read).
            beta: weight of a context's distinct ids against its count (Witten-Bell: 1).
            width: ids the blend keeps (its most likely; q is renormalised over them).

        Returns:
            An entry whose ``q`` is the blend over ``width`` ids, sorted by decreasing q, and whose
            ``count`` is the longest matched context's observations (0 when only the 0-gram table
            answers); ``None`` when the store is empty. Counted in :meth:`stats` as a lookup
            answered by the longest matched table (a miss when only the 0-gram table answers).
        """
        if not self._unigram:
            return None
        if self._unigram_top is None:
            top = sorted(self._unigram.items(), key=lambda item: -item[1])[:width]
            total = sum(mass for _, mass in top)
            self._unigram_top = tuple((token, mass / total) for token, mass in top)
        # blended value of a token = scale * raw[token]: one multiplication per level, not per token
        raw = dict(self._unigram_top)
        scale, count, matched = 1.0, 0, 0
        context = tuple(context[-self.max_n :])
        for n in range(1, len(context) + 1):
            entry = self._tables[n].get(context[-n:])
            if entry is None:
                break  # a longer context is stored only where its suffixes are
            weight = entry.count / (entry.count + beta * len(entry.id_list))
            if weight >= 1.0:  # beta 0: this level alone
                raw, scale = {}, 1.0
            else:
                scale *= 1.0 - weight
            add = weight / (scale * sum(entry.prob_list))
            for token, prob in zip(entry.id_list, entry.prob_list):
                raw[token] = raw.get(token, 0.0) + prob * add
            count, matched = entry.count, n
        self._lookups += 1  # counted as a lookup answered by the longest context matched (a miss: none)
        if matched:
            self._hits[matched] += 1
        top = sorted((item for item in raw.items() if item[1] > 0), key=lambda item: -item[1])[:width]
        total = sum(mass for _, mass in top)
        return StoreEntry([token for token, _ in top], [mass / total for _, mass in top], count)

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
        id_list = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
        prob_list = probs.tolist() if isinstance(probs, np.ndarray) else list(probs)
        _check_observation(id_list, prob_list)
        if any(later > earlier for earlier, later in zip(prob_list, prob_list[1:])):
            pairs = sorted(zip(id_list, prob_list), key=lambda pair: -pair[1])
            id_list, prob_list = [i for i, _ in pairs], [p for _, p in pairs]
        kept = len(prob_list[: self.top_k]) - sum(1 for p in prob_list[: self.top_k] if p <= 0)
        if kept == 0:
            return
        id_list, prob_list = id_list[:kept], prob_list[:kept]
        self._max_token_id = max(self._max_token_id, max(id_list))
        unigram = self._unigram
        for token, prob in zip(id_list, prob_list):
            unigram[token] = unigram.get(token, 0.0) + prob
        self._unigram_top = None
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
                merged = self._merge(stored, id_list, prob_list)
                self._reserve_ids += len(merged.reserve[0]) - len(stored.reserve[0])
                table[key] = merged
                table.move_to_end(key)

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

    def _merge(self, stored: StoreEntry, id_list: list[int], prob_list: list[float]) -> StoreEntry:
        count = stored.count
        weighted = {token: prob * count for token, prob in zip(stored.id_list, stored.prob_list)}
        for token, prob in zip(*stored.reserve):
            weighted[token] = prob * count
        for token, prob in zip(id_list, prob_list):
            weighted[token] = weighted.get(token, 0.0) + prob
        merged = sorted(weighted.items(), key=lambda item: -item[1])
        scale = 1.0 / (count + 1)
        self._merges += 1
        k = self.top_k
        reserve: tuple = ((), ())
        if len(merged) > k:
            self._dropped_mass += sum(mass for _, mass in merged[k:]) * scale
            if self.reserve:
                extra = merged[k : k + self.reserve]
                reserve = ([t for t, _ in extra], [m * scale for _, m in extra])
            merged = merged[:k]
        return StoreEntry([t for t, _ in merged], [m * scale for _, m in merged], count + 1, reserve)

    def stats(self) -> StoreStats:
        """A snapshot of the store's size and lookup statistics."""
        entries = {n: len(table) for n, table in self._tables.items()}
        return StoreStats(
            entries_by_n=entries,
            approx_bytes=_BYTES_PER_ENTRY * sum(entries.values()) + _BYTES_PER_RESERVE_ID * self._reserve_ids,
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
