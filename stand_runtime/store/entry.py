"""What the store holds: one context's draft distribution (:class:`StoreEntry`), how an observation of p
is checked and cut to the top k (:func:`top_observation`) and merged into an entry with reserve admission
(:func:`merge_observation`, §2.2-2.3), and the store's size and lookup statistics (:class:`StoreStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import StandError

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


def check_observation(id_list: list, prob_list: list) -> None:
    """Validate an observation in place: its zero-probability entries are removed (never stored).

    Raises:
        StandError: ids and probs of different lengths, an id that is not a non-negative int, a
            repeated id, or a probability that is not a finite number in [0, 1].
    """
    if len(id_list) != len(prob_list):
        raise StandError(f"store update: {len(id_list)} ids but {len(prob_list)} probabilities")
    if not all(isinstance(p, (float, int, np.floating)) and not isinstance(p, bool) and 0.0 <= p <= 1.0 + 1e-6
               for p in prob_list):
        raise StandError(f"store update: probabilities must be finite numbers in [0, 1], got {prob_list!r}")
    if 0 in prob_list:
        kept = [i for i, p in enumerate(prob_list) if p > 0]
        id_list[:], prob_list[:] = [id_list[i] for i in kept], [prob_list[i] for i in kept]
    if not all(type(i) is int and i >= 0 for i in id_list):
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0 for i in id_list):
            raise StandError(f"store update: token ids must be non-negative integers, got {id_list!r}")
        id_list[:] = [int(i) for i in id_list]
    if len(set(id_list)) != len(id_list):
        raise StandError(f"store update: repeated token ids {id_list!r}")


def top_observation(ids: Sequence[int], probs: Sequence[float], top_k: int) -> tuple[list[int], list[float]]:
    """The observation's at most ``top_k`` most likely ids and their probabilities (Python lists, by
    decreasing probability, every probability > 0; empty when none is).

    Raises:
        StandError: as :func:`check_observation`.
    """
    id_list = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    prob_list = probs.tolist() if isinstance(probs, np.ndarray) else list(probs)
    check_observation(id_list, prob_list)
    if any(later > earlier for earlier, later in zip(prob_list, prob_list[1:])):
        pairs = sorted(zip(id_list, prob_list), key=lambda pair: -pair[1])
        id_list, prob_list = [i for i, _ in pairs], [p for _, p in pairs]
    return id_list[:top_k], prob_list[:top_k]


def merge_observation(stored: StoreEntry, id_list: list[int], prob_list: list[float], top_k: int,
                      reserve: int) -> tuple[StoreEntry, float]:
    """Merge one observation into a stored entry: the count-weighted running average over the union
    of ids (reserve ids included), its ``top_k`` largest shown and the next ``reserve`` kept.

    Args:
        stored: the context's entry.
        id_list: the observation's ids (as :func:`stand_runtime.store.entry.top_observation` gives them).
        prob_list: their probabilities.
        top_k: ids of q.
        reserve: ids kept beyond q's (0: the paper's plain truncation).

    Returns:
        ``(merged entry, dropped mass)``: the mass of the merged average outside q's ``top_k`` ids
        (0.0 when nothing was cut off).
    """
    count = stored.count
    weighted = {token: prob * count for token, prob in zip(stored.id_list, stored.prob_list)}
    for token, prob in zip(*stored.reserve):
        weighted[token] = prob * count
    for token, prob in zip(id_list, prob_list):
        weighted[token] = weighted.get(token, 0.0) + prob
    merged = sorted(weighted.items(), key=lambda item: -item[1])
    scale = 1.0 / (count + 1)
    dropped = 0.0
    kept: tuple = ((), ())
    if len(merged) > top_k:
        dropped = sum(mass for _, mass in merged[top_k:]) * scale
        if reserve:
            extra = merged[top_k : top_k + reserve]
            kept = ([t for t, _ in extra], [m * scale for _, m in extra])
        merged = merged[:top_k]
    return StoreEntry([t for t, _ in merged], [m * scale for _, m in merged], count + 1, kept), dropped
