"""Blended lookup (ours, for STAND's dynamic draft trees, :mod:`stand_runtime.store.drafting`).

:meth:`stand_runtime.store.ngram_store.NGramStore.blend` interpolates the tables instead of taking
the longest match alone, as an n-gram language model is smoothed (Witten and Bell, 1991; Chen and
Goodman, 1998, §2.5): from the 0-gram table (:class:`UnigramTable`, the mean p of every observation:
which tokens are frequent at all) up to the longest stored context, each level n mixes its own q
with the blend below it,

    b_n = λ_n q_n + (1 - λ_n) b_{n-1},   λ_n = c_n / (c_n + β u_n)

(c_n observations and u_n ids of the n-token context's entry; β = 1 is Witten-Bell's weight). A
token the longest context never saw followed by is then still drafted where a shorter context
predicts it, and a context seen once does not claim certainty (docs/decisions.md).

A store given a cross-prompt memory (``NGramStore(base=...)``: a store fed with every problem's
observations) blends its own tables above the memory's blend for the same context instead of its
0-gram table: where the store knows the context its own observations weigh as above, and where it
does not (a problem's first sample) the memory's longer contexts answer, with the memory's count as
the entry's confidence. The memory feeds drafts only (q), never p, so verification stays lossless.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..errors import StandError
from .entry import StoreEntry

BLEND_WIDTH = 16
"""Ids a blended lookup (:meth:`stand_runtime.store.ngram_store.NGramStore.blend`) keeps."""


def check_blend(beta: float, width: int) -> None:
    """Refuse a blend's settings that mean nothing: ``width`` (ids kept) below 1, ``beta`` (Witten-Bell's
    weight) negative or not finite.

    Raises:
        StandError: naming the setting.
    """
    if not (isinstance(width, (int, np.integer)) and width >= 1):
        raise StandError(f"a blended lookup keeps width >= 1 ids, got {width!r}")
    if not (isinstance(beta, (int, float, np.number)) and 0.0 <= beta < float("inf")):
        raise StandError(f"a blended lookup's beta must be a finite number >= 0, got {beta!r}")


class UnigramTable:
    """The 0-gram table: the summed p of every observation, and its top ids' q (cached until the next
    observation)."""

    __slots__ = ("mass", "_top")

    def __init__(self) -> None:
        self.mass: dict[int, float] = {}
        self._top: tuple | None = None

    def __bool__(self) -> bool:
        return bool(self.mass)

    def add(self, id_list: list[int], prob_list: list[float]) -> None:
        """Add one observation's probabilities."""
        mass = self.mass
        for token, prob in zip(id_list, prob_list):
            mass[token] = mass.get(token, 0.0) + prob
        self._top = None

    def top(self, width: int) -> tuple[tuple[int, float], ...]:
        """``(token, q)`` of the ``width`` most massive ids, q renormalised over them (computed once
        per observation: a later call returns the same ids whatever its ``width``)."""
        if self._top is None:
            top = sorted(self.mass.items(), key=lambda item: -item[1])[:width]
            total = sum(mass for _, mass in top)
            self._top = tuple((token, mass / total) for token, mass in top)
        return self._top


def blend_tables(tables: dict[int, OrderedDict[tuple[int, ...], StoreEntry]], floor: UnigramTable | StoreEntry,
                 context: tuple[int, ...], beta: float, width: int) -> tuple[StoreEntry, int]:
    """The Witten-Bell blend for the token after ``context`` (module docstring).

    Args:
        tables: the store's tables by context length n.
        floor: the blend's lowest level: the store's 0-gram table (not empty), or a cross-prompt
            memory's own blend for ``context`` (an entry: its ids, q and count).
        context: the tokens before the predicted position (at most the longest table's n).
        beta: weight of a context's distinct ids against its count (Witten-Bell: 1).
        width: ids the blend keeps (its most likely; q is renormalised over them).

    Returns:
        ``(entry, n)``: the blend over ``width`` ids, sorted by decreasing q, whose ``count`` is the
        longest matched context's observations, and that context's length n (0 when only the floor
        answers: the count is then the floor entry's, 0 for the 0-gram table).
    """
    # blended value of a token = scale * raw[token]: one multiplication per level, not per token
    if isinstance(floor, StoreEntry):
        raw, count = dict(zip(floor.id_list, floor.prob_list)), floor.count
    else:
        raw, count = dict(floor.top(width)), 0
    scale, matched = 1.0, 0
    for n in range(1, len(context) + 1):
        entry = tables[n].get(context[-n:])
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
    top = sorted((item for item in raw.items() if item[1] > 0), key=lambda item: -item[1])[:width]
    total = sum(mass for _, mass in top)
    return StoreEntry([token for token, _ in top], [mass / total for _, mass in top], count), matched
