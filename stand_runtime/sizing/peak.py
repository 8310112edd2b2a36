"""The value rule's stopping rules over a rate curve (ours; docs/algorithms.md §3.7): :func:`first_peak` (the
reference), :func:`bounded_peak_of` (the rule the value rule uses, node by node: it crosses a step in the
cost when the nodes past it can pay for it; with a look-ahead of one it is :func:`first_peak`), and
:func:`seconds_of`."""

from __future__ import annotations

from typing import Callable

import numpy as np


def first_peak(gain: Callable[[int], float], seconds: Callable[[int], float], longest: int) -> int:
    """The n in 0 .. ``longest`` where ``gain(n) / seconds(1 + n)`` first stops rising: n grows while
    one more node raises the expected tokens per second.

    A stopping rule, not the argmax of the whole curve: whether n reaches k reads ``gain`` and
    ``seconds`` at sizes up to k only, so the choice to draft node k never looks at the nodes after
    it (which may depend on node k's drawn token, docs/algorithms.md §9.3). Where the gains are concave
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


LOOKAHEAD = 8
"""Sizes past node k that :func:`bounded_peak_of` looks at (m = k .. k + 7): enough to cross the step
of a kernel change (where the forward's kernel changes, one token can cost as much as the next
several together)."""


def bounded_peak_of(gains: np.ndarray, seconds: np.ndarray, lookahead: int = LOOKAHEAD) -> int:
    """The n in 0 .. L a draft grows to while the sizes just ahead may still beat the best rate it
    has passed: node k is taken when some size m in k .. k + ``lookahead`` - 1 would reach a higher
    ``gains[m] / seconds[m]`` than every size before k, the increments after node k forecast from the
    prefix alone: the k-th increment ``d_k`` decaying geometrically at ``min(1, d_k / d_(k-1))`` (flat
    for the first node), past L too (how many candidates a step offers may depend on its draws).

    Unlike :func:`first_peak` it crosses a step in the cost (the forward's kernel changing with its
    row count) when the nodes past it can pay for it together, as a sure copy chain's do;
    on a convex cost with falling increments the two stop at the same n (the best one). It prices the
    true cost: a convex minorant priced such a step as a ramp and drafted unsure nodes past it. A
    stopping rule all the same: whether node k is taken reads ``gains`` up to k and ``seconds`` only
    (never the nodes after it nor how many there are: their scores and their number may read node k's
    draw), so it is lossless where :func:`first_peak` is; it may end past the best size it passed
    when the later nodes fall short of the forecast.

    Args:
        gains: ``[L + 1]`` expected tokens of the forward with n nodes, n = 0 .. L (NaN: stop there).
        seconds: ``[>= L + lookahead]`` seconds of the forward with n nodes, n = 0 .. L + lookahead - 1.
        lookahead: sizes looked at from each node on (>= 1; 1: :func:`first_peak`).

    Raises:
        ValueError: ``lookahead`` < 1 or ``seconds`` shorter than ``L + lookahead``.
    """
    gains = np.asarray(gains, dtype=np.float64).tolist()
    length = len(gains) - 1
    if lookahead < 1:
        raise ValueError(f"lookahead must be at least 1, not {lookahead}")
    if length <= 0:
        return 0
    if len(seconds) < length + lookahead:
        raise ValueError(f"bounded_peak_of needs the seconds of {length + lookahead} sizes, got {len(seconds)}")
    cost = np.asarray(seconds, dtype=np.float64)[: length + lookahead].tolist()
    # Node by node, in Python floats: the rule ends after a few nodes, where numpy's per-call cost over
    # all L x lookahead bounds is too high (tests/runtime/sizing/test_value.py keeps a numpy version as the reference).
    best = gains[0] / cost[0]  # the best rate over the sizes before node k
    previous = gains[1] - gains[0]
    for k in range(1, length + 1):
        step = gains[k] - gains[k - 1]
        decay = min(max(step / previous, 0.0), 1.0) if previous > 0 else 1.0
        if decay != decay:  # NaN gains: stop (as no bound beats the best)
            return k - 1
        added, power = 0.0, 1.0
        for j in range(lookahead):  # some size k + j may beat the best: take node k
            added += step * power
            power *= decay
            if (gains[k - 1] + added) / cost[k + j] > best:
                break
        else:
            return k - 1
        best = max(best, gains[k] / cost[k])
        previous = step
    return length


def seconds_of(seconds: Callable[[float], float], tokens: np.ndarray) -> np.ndarray:
    """``[m]`` ``seconds`` at each of ``tokens`` (int): in one call where it offers ``many``
    (:meth:`LatencyModel.frozen`), else one call per count."""
    many = getattr(seconds, "many", None)
    return many(tokens) if many is not None else np.array([seconds(float(t)) for t in tokens])
