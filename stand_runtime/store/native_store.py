"""The n-gram store in C++ (``stand_runtime._native``, docs/algorithms.md §2.7): :class:`NativeNGramStore`.

The same store as :class:`stand_runtime.store.ngram_store.NGramStore`, which stays the reference:
the same tables, merge (weighted average, missing ids count 0, truncation to the top k), reserve
admission, eviction order (least recently updated first), Witten-Bell blend and 0-gram table, with
the same floating-point operations in the same order (Python's ``sum`` included, plain up to CPython
3.11 and compensated from 3.12), so every stored value and every blended q is the Python store's.
``tests/runtime/store/test_native.py`` drives both on the same random inputs. The class is a subclass of
``NGramStore`` with the same methods, so every drafter and check takes either; a static or dynamic
tree over it is drafted in C++ too (:mod:`stand_runtime.store.native_draft`).

Every fresh store of a STAND tree is native where the extension is built (:func:`store_class`),
unless ``STAND_NATIVE=0`` asks for the Python reference; ``STAND_NATIVE=1`` requires it; a store can
also be constructed directly. The extension is built by ``pip install -e .`` (``setup.py``, sources in
``csrc/``); without it, :func:`native_available` is False, fresh stores are Python ones, and
``STAND_NATIVE=1`` raises a one-line :class:`StandError`.
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from ..checks import env_switch
from ..errors import StandError
from .blend import BLEND_WIDTH, check_blend
from .entry import BYTES_PER_ENTRY, BYTES_PER_RESERVE_ID, StoreEntry, StoreStats
from .ngram_store import MAX_CONTEXT, MAX_ENTRIES, MAX_TOP_K, NGramStore, _check_size, check_base
from .entry import top_observation

try:
    from .. import _native
except ImportError:  # not built (e.g. a source tree used without pip install -e .)
    _native = None

NATIVE_ENV = "STAND_NATIVE"
"""Environment variable: ``0`` keeps every fresh store the Python reference, ``1`` requires the native
one; unset: native where the extension is built (:func:`store_class`)."""

_COMPENSATED_SUM = sys.version_info >= (3, 12)  # CPython's float sum() is Neumaier's from 3.12 on


def native_available() -> bool:
    """True when the extension ``stand_runtime._native`` is built."""
    return _native is not None


def native_selected() -> bool:
    """True when fresh stores are native: ``STAND_NATIVE=1``, or the variable unset and the extension
    built (the default); ``STAND_NATIVE=0`` keeps the Python reference.

    Raises:
        StandError: ``STAND_NATIVE`` set to anything but 0 or 1.
    """
    value = env_switch(NATIVE_ENV)
    return value is True or (value is None and _native is not None)


def store_class(native_drafting: bool = True) -> type[NGramStore]:
    """The store class a fresh memory uses: :class:`NativeNGramStore` when :func:`native_selected`
    for a tree that is drafted in C++ over it (``native_drafting``: every STAND tree,
    :mod:`stand_runtime.store.native_draft`), else :class:`NGramStore`.

    Raises:
        StandError: ``STAND_NATIVE=1`` but the extension is not built, or a bad ``STAND_NATIVE``.
    """
    if not native_selected():
        return NGramStore
    if _native is None:
        raise StandError(f"{NATIVE_ENV}=1 but the native core stand_runtime._native is not built: "
                         "pip install -e . builds it (needs a C++17 compiler)")
    return NativeNGramStore if native_drafting else NGramStore


def _entry(found) -> StoreEntry:
    _, ids, probs, count, reserve = found
    return StoreEntry(ids, probs, count, reserve)


class NativeNGramStore(NGramStore):
    """:class:`NGramStore` in C++ (module docstring); same arguments, methods and results.

    Raises:
        StandError: a parameter is out of range, or the extension is not built.
    """

    def __init__(self, top_k: int = 10, max_n: int = 3, max_entries_per_n: int = 500_000, reserve: int = 10,
                 base: "NativeNGramStore | None" = None) -> None:
        if _native is None:
            raise StandError("NativeNGramStore: the native core stand_runtime._native is not built (pip install -e .)")
        self.top_k = _check_size("top_k", top_k, 1, MAX_TOP_K)
        self.max_n = _check_size("max_n", max_n, 1, MAX_CONTEXT)
        self.max_entries_per_n = _check_size("max_entries_per_n", max_entries_per_n, 1, MAX_ENTRIES)
        self.reserve = _check_size("reserve", reserve, 0, MAX_TOP_K)
        self.base = check_base(self, base)
        self.core = _native.Store(self.top_k, self.max_n, self.max_entries_per_n, self.reserve, _COMPENSATED_SUM)
        if base is not None:
            self.core.set_base(base.core)

    @property
    def max_token_id(self) -> int:
        return self.core.max_token_id

    def lookup(self, context: Sequence[int]) -> StoreEntry | None:
        found = self.core.lookup(list(context[-self.max_n:]))
        return None if found is None else _entry(found)

    def match(self, context: Sequence[int]) -> tuple[int, StoreEntry] | None:
        found = self.core.match(list(context[-self.max_n:]))
        return None if found is None else (found[0], _entry(found))

    def blend(self, context: Sequence[int], beta: float = 1.0, width: int = BLEND_WIDTH) -> StoreEntry | None:
        check_blend(beta, width)
        found = self.core.blend(list(context[-self.max_n:]), float(beta), int(width))
        return None if found is None else StoreEntry(found[0], found[1], found[2])

    def update(self, context: Sequence[int], ids: Sequence[int], probs: Sequence[float]) -> None:
        id_list, prob_list = top_observation(ids, probs, self.top_k)
        if id_list:
            self.core.update(list(context[-self.max_n:]), id_list, [float(p) for p in prob_list])

    def update_sequence(self, tokens: Sequence[int], positions: Sequence[int], ids: np.ndarray,
                        probs: np.ndarray) -> None:
        """As :meth:`NGramStore.update_sequence`; numeric rows go to C++ in one call (checked there
        as :func:`stand_runtime.store.entry.check_observation` checks them; a row it refuses
        is fed through :meth:`update`, which raises the Python store's error)."""
        positions = [int(p) for p in positions]
        if not positions:
            return
        numeric = self._numeric(tokens, positions, ids, probs)
        if numeric is None:
            self._update_rows(tokens, positions, ids, probs, 0)
            return
        window, local = numeric
        first = 0
        while first < len(positions):
            bad = self.core.update_rows(window, local, ids, probs, first)
            if bad < 0:
                return
            self._update_rows(tokens, positions, ids, probs, bad, bad + 1)
            first = bad + 1

    def _numeric(self, tokens, positions: list[int], ids, probs) -> tuple[np.ndarray, np.ndarray] | None:
        """``(window, local positions)`` of rows C++ can merge as they are (numeric arrays, positions
        inside ``tokens``), else None (the Python checks, row by row)."""
        if not (isinstance(ids, np.ndarray) and isinstance(probs, np.ndarray)):
            return None
        shape, kind, size = ids.shape, ids.dtype.kind, ids.dtype.itemsize
        if (len(shape) != 2 or shape != probs.shape or shape[0] != len(positions) or probs.dtype.kind != "f"
                or not (kind == "i" and size <= 8 or kind == "u" and size <= 4)):
            return None
        first, last = min(positions), max(positions)
        if first < -1 or last >= len(tokens):
            return None
        low = max(0, first + 1 - self.max_n)
        local = np.array(positions, dtype=np.int64)
        local -= low
        return np.array(tokens[low : last + 1], dtype=np.int64), local

    def _update_rows(self, tokens, positions: list[int], ids, probs, first: int, stop: int | None = None) -> None:
        """Rows ``first:stop`` through :meth:`update` (the Python checks and errors)."""
        for row in range(first, len(positions) if stop is None else stop):
            pos = positions[row]
            self.update(tokens[max(0, pos + 1 - self.max_n) : pos + 1], ids[row], probs[row])

    def stats(self) -> StoreStats:
        entries, lookups, hits, merges, dropped, evictions, reserve_ids = self.core.stats()
        by_n = {n: entries[n] for n in range(self.max_n, 0, -1)}
        return StoreStats(
            entries_by_n=by_n,
            approx_bytes=BYTES_PER_ENTRY * sum(by_n.values()) + BYTES_PER_RESERVE_ID * reserve_ids,
            lookups=lookups,
            hits_by_n={n: hits[n] for n in range(self.max_n, 0, -1)},
            misses=lookups - sum(hits),
            merges=merges,
            dropped_mass=dropped,
            evictions=evictions,
        )

    def table(self, n: int) -> list[tuple]:
        """``(context, ids, probs, count, reserve)`` of every n-token context, least recently updated
        first (the Python store's table order; for the equivalence tests).

        Raises:
            StandError: ``n`` outside 1 .. max_n.
        """
        if not (isinstance(n, (int, np.integer)) and 1 <= n <= self.max_n):
            raise StandError(f"the store's tables hold 1 .. {self.max_n} tokens of context, got {n!r}")
        return self.core.entries(n)

    def contexts(self) -> list[tuple[int, ...]]:
        return [row[0] for n in range(self.max_n, 0, -1) for row in self.core.entries(n)]

    def __len__(self) -> int:
        return sum(self.core.stats()[0])


FeedRow = tuple
"""One row of :func:`update_sequences`: ``(store, tokens, positions, ids, probs)``, the arguments of
:meth:`NGramStore.update_sequence` (``store`` native or Python)."""


def update_sequences(rows: Sequence[FeedRow]) -> None:
    """``for store, *args in rows: store.update_sequence(*args)`` with every numeric row of every
    native store merged in one call into C++ (a batch's step observations, docs/algorithms.md §3.8): the
    same stores, statistics and errors as the per-row calls, in the same order (rows may share a
    store; a Python store's rows take its own ``update_sequence``).

    Raises:
        StandError: an observation the Python store refuses (the rows before it were merged, the
            ones after it were not, as in the per-row calls).
    """
    pending: list[list] = []  # [store, tokens, positions, ids, probs, window, local, first]

    def flush() -> None:
        while pending:
            done, bad = _native.update_rows_many([(p[0].core, p[5], p[6], p[3], p[4], p[7]) for p in pending])
            if bad < 0:
                pending.clear()
                return
            store, tokens, positions, ids, probs = pending[done][:5]
            store._update_rows(tokens, positions, ids, probs, bad, bad + 1)  # raises the reference's error
            del pending[:done]
            pending[0][7] = bad + 1

    for store, tokens, positions, ids, probs in rows:
        positions = [int(p) for p in positions]
        native = positions and isinstance(store, NativeNGramStore)
        numeric = store._numeric(tokens, positions, ids, probs) if native else None
        if numeric is None:
            flush()  # earlier rows first: they may share this store
            store.update_sequence(tokens, positions, ids, probs)
        else:
            pending.append([store, tokens, positions, ids, probs, *numeric, 0])
    flush()
