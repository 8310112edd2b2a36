"""The value rule's stopping rule over a rate curve, and the cost curve it is priced by (ours;
docs/design.md §3.7): :func:`first_peak` (the reference), :func:`first_peak_of` (the same over arrays),
:func:`convex_minorant` and :func:`seconds_of`."""

from __future__ import annotations

from typing import Callable

import numpy as np


def first_peak(gain: Callable[[int], float], seconds: Callable[[int], float], longest: int) -> int:
    """The n in 0 .. ``longest`` where ``gain(n) / seconds(1 + n)`` first stops rising: n grows while
    one more node raises the expected tokens per second.

    A stopping rule, not the argmax of the whole curve: whether n reaches k reads ``gain`` and
    ``seconds`` at sizes up to k only, so the choice to draft node k never looks at the nodes after
    it (which may depend on node k's drawn token, docs/design.md §9.3). Where the gains are concave
    (each node's P at most its predecessor's, as the best-first order gives) and the cost is convex
    or linear in n, the first peak is the argmax.
    """
    n, rate = 0, gain(0) / seconds(1)
    while n < longest:
        grown = gain(n + 1) / seconds(n + 2)
        if not grown > rate:
            break
        n, rate = n + 1, grown
    return n


def first_peak_of(gains: np.ndarray, seconds: np.ndarray) -> int:
    """:func:`first_peak` over arrays: ``gains[n]`` and ``seconds[n]`` (``[L + 1]``, the forward with
    n nodes) for n = 0 .. L; the first n where ``gains / seconds`` stops rising (the same n, in one
    numpy pass)."""
    rate = np.asarray(gains, dtype=np.float64) / np.asarray(seconds, dtype=np.float64)
    falls = np.flatnonzero(~(rate[1:] > rate[:-1]))
    return int(falls[0]) if len(falls) else len(rate) - 1


def convex_minorant(values: np.ndarray) -> np.ndarray:
    """``[m]`` the greatest convex function below ``values`` (``[m]``, at equally spaced points): the
    lower convex hull, interpolated. The value rule prices forwards by it: a profile that rises by
    steps (measurement noise, thread scheduling) would otherwise stop :func:`first_peak` at the first
    step although the sizes past it pay; with a convex cost and non-increasing gains the first peak
    is the best size."""
    values = np.asarray(values, dtype=np.float64)
    hull: list[int] = []
    for i in range(len(values)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]  # drop b when it lies on or above the chord a -> i
            if (values[b] - values[a]) * (i - a) >= (values[i] - values[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(i)
    return np.interp(np.arange(len(values)), hull, values[hull])


def seconds_of(seconds: Callable[[float], float], tokens: np.ndarray) -> np.ndarray:
    """``[m]`` ``seconds`` at each of ``tokens`` (int): in one call where it offers ``many``
    (:meth:`LatencyModel.frozen`), else one call per count."""
    many = getattr(seconds, "many", None)
    return many(tokens) if many is not None else np.array([seconds(float(t)) for t in tokens])
