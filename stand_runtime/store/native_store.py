"""The n-gram store in C++ (``stand_runtime._native``, docs/design.md §2.7): :class:`NativeNGramStore`.

The same store as :class:`stand_runtime.store.ngram_store.NGramStore`, which stays the reference:
the same tables, merge (weighted average, missing ids count 0, truncation to the top k), reserve
admission, eviction order (least recently updated first), Witten-Bell blend and 0-gram table, with
the same floating-point operations in the same order (Python's ``sum`` included, plain up to CPython
3.11 and compensated from 3.12), so every stored value and every blended q is the Python store's.
``tests/test_native.py`` drives both on the same random inputs. The class is a subclass of
``NGramStore`` with the same methods, so every drafter and check takes either; a static or dynamic
tree over it is drafted in C++ too (:mod:`stand_runtime.drafters.native_draft`).

Selected by ``STAND_NATIVE=1`` in the environment (:func:`store_class`: every fresh store of a
static or fixed-budget dynamic tree is then native) or by constructing it directly. The extension
is built by ``pip install -e .`` (``setup.py``, sources in ``csrc/``); without it, :func:`native_available` is False and selecting
it raises a one-line :class:`StandError`.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

import numpy as np

from ..errors import StandError
from .blend import BLEND_WIDTH
from .entry import BYTES_PER_ENTRY, BYTES_PER_RESERVE_ID, StoreEntry, StoreStats
from .ngram_store import MAX_CONTEXT, MAX_ENTRIES, MAX_TOP_K, NGramStore, _check_size
from .observation import top_observation

try:
    from .. import _native
except ImportError:  # not built (e.g. a source tree used without pip install -e .)
    _native = None

NATIVE_ENV = "STAND_NATIVE"
"""Environment variable: ``1`` makes every fresh store of a static or fixed-budget dynamic tree native
(:func:`store_class`)."""

_COMPENSATED_SUM = sys.version_info >= (3, 12)  # CPython's float sum() is Neumaier's from 3.12 on


def native_available() -> bool:
    """True when the extension ``stand_runtime._native`` is built."""
    return _native is not None


def native_selected() -> bool:
    """True when ``STAND_NATIVE=1`` asks for the native store."""
    return os.environ.get(NATIVE_ENV, "") == "1"


def store_class(native_drafting: bool = True) -> type[NGramStore]:
    """The store class a fresh memory uses: :class:`NativeNGramStore` under ``STAND_NATIVE=1`` for a
    tree that is drafted in C++ over it (``native_drafting``: a static tree or a fixed-budget dynamic
    one, :mod:`stand_runtime.drafters.native_draft`), else :class:`NGramStore`.

    Raises:
        StandError: ``STAND_NATIVE=1`` but the extension is not built.
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

    def __init__(self, top_k: int = 10, max_n: int = 3, max_entries_per_n: int = 500_000, reserve: int = 10) -> None:
        if _native is None:
            raise StandError("NativeNGramStore: the native core stand_runtime._native is not built (pip install -e .)")
        self.top_k = _check_size("top_k", top_k, 1, MAX_TOP_K)
        self.max_n = _check_size("max_n", max_n, 1, MAX_CONTEXT)
        self.max_entries_per_n = _check_size("max_entries_per_n", max_entries_per_n, 1, MAX_ENTRIES)
        self.reserve = _check_size("reserve", reserve, 0, MAX_TOP_K)
        self.core = _native.Store(self.top_k, self.max_n, self.max_entries_per_n, self.reserve, _COMPENSATED_SUM)

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
        found = self.core.blend(list(context[-self.max_n:]), float(beta), int(width))
        return None if found is None else StoreEntry(found[0], found[1], found[2])

    def update(self, context: Sequence[int], ids: Sequence[int], probs: Sequence[float]) -> None:
        id_list, prob_list = top_observation(ids, probs, self.top_k)
        if id_list:
            self.core.update(list(context[-self.max_n:]), id_list, [float(p) for p in prob_list])

    def update_sequence(self, tokens: Sequence[int], positions: Sequence[int], ids: np.ndarray,
                        probs: np.ndarray) -> None:
        """As :meth:`NGramStore.update_sequence`; numeric rows go to C++ in one call (checked there
        as :func:`stand_runtime.store.observation.check_observation` checks them; a row it refuses
        is fed through :meth:`update`, which raises the Python store's error)."""
        positions = [int(p) for p in positions]
        if not positions:
            return
        fast = (isinstance(ids, np.ndarray) and isinstance(probs, np.ndarray) and ids.ndim == 2
                and ids.shape == probs.shape and len(ids) == len(positions) and ids.dtype.kind in "iu"
                and ids.dtype.itemsize <= (8 if ids.dtype.kind == "i" else 4) and probs.dtype.kind == "f"
                and -1 <= min(positions) and max(positions) < len(tokens))  # else: the Python checks, row by row
        if not fast:
            for row, pos in enumerate(positions):
                start = max(0, pos + 1 - self.max_n)
                self.update(tokens[start : pos + 1], ids[row], probs[row])
            return
        low = max(0, min(positions) + 1 - self.max_n)
        window = np.asarray(tokens[low : max(positions) + 1], dtype=np.int64)
        local = np.asarray(positions, dtype=np.int64) - low
        first = 0
        while first < len(positions):
            bad = self.core.update_rows(window, local, ids, probs, first)
            if bad < 0:
                return
            pos = positions[bad]
            self.update(tokens[max(0, pos + 1 - self.max_n) : pos + 1], ids[bad], probs[bad])
            first = bad + 1

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
        first (the Python store's table order; for the equivalence tests)."""
        return self.core.entries(n)

    def contexts(self) -> list[tuple[int, ...]]:
        return [row[0] for n in range(self.max_n, 0, -1) for row in self.core.entries(n)]

    def __len__(self) -> int:
        return sum(self.core.stats()[0])
