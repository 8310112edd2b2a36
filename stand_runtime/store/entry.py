"""What the store holds: one context's draft distribution (:class:`StoreEntry`) and the store's
size and lookup statistics (:class:`StoreStats`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Estimated bytes per stored context (key tuple, entry object, id and probability lists, dict slot),
# measured with tracemalloc on CPython 3.11, k = 10: ~410 fresh, ~700 once drafting cached its arrays;
# a full reserve of 10 adds ~400.
BYTES_PER_ENTRY = 560
BYTES_PER_RESERVE_ID = 40


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
