"""The most drafts of a measured acceptance can gain at batch B on a latency profile.

From a method's acceptance rate per depth (accepted / offered, α_d:
:func:`stand_runtime.engine.metrics.acceptance_by_depth`) and the latency profile it ran with, the
best expected speedup over plain decoding of an idealised draft: every row drafts a chain of L tokens
at every step, its depth-d token accepted with the measured conditional rate α_d, a forward over B
rows of 1 + L tokens costing t(B (1 + L)) (the batch-1 profile over the batch's tokens, as the value
rule prices a padded batch), and no host work:

    speedup(B, L) = (1 + Σ_{d <= L} Π_{j <= d} α_j) · t(B) / t(B (1 + L)),   maximised over L.

It is optimistic three ways (every row has a draft at every step, where the store sometimes has
nothing; a tree's per-depth rates, with several children at a depth, at a chain's cost; no host
work), so a speedup above it is out of reach for drafts of that acceptance on that machine, however
they are sized; only better acceptance (or a flatter cost curve: a GPU) moves it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from stand_runtime import StandError
from stand_runtime.target.latency import LatencyProfile


def chain_gains(rates: Sequence[float]) -> np.ndarray:
    """``[D + 1]`` expected tokens a step of a chain of 0 .. D drafts emits: 1 + Σ_{d<=L} Π_{j<=d} α_j."""
    return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(np.asarray(rates, dtype=np.float64)))])


def ceiling(rates: Sequence[float], profile: LatencyProfile, batch: int) -> tuple[float, int]:
    """The best ``speedup(B, L)`` (module docstring) over L = 0 .. len(rates), and that L: ``rates`` α_1 .. α_D
    in [0, 1], ``profile`` the target's seconds per forward, ``batch`` B rows per forward.

    Raises:
        StandError: a rate outside [0, 1], or a batch below 1.
    """
    if any(not 0.0 <= rate <= 1.0 for rate in rates):
        raise StandError(f"acceptance rates must be in [0, 1], got {list(rates)}")
    if batch < 1:
        raise StandError(f"the batch must be >= 1 row, got {batch}")
    gains = chain_gains(rates)
    cost = np.array([profile.at(float(batch * (1 + n))) for n in range(len(gains))]) / profile.at(float(batch))
    speedups = gains / cost
    best = int(np.argmax(speedups))
    return float(speedups[best]), best


def depth_rates(depths: Sequence[dict], deepest: int = 8) -> list[float]:
    """α_1 .. α_D from ``acceptance_by_depth`` rows (``{"depth", "offered", "accepted", ...}``), up to
    ``deepest`` and the last depth offered at all."""
    rows = sorted((row for row in depths if row["offered"]), key=lambda row: row["depth"])[:deepest]
    return [row["accepted"] / row["offered"] for row in rows]


def merge_depths(groups: Sequence[Sequence[dict]]) -> list[dict]:
    """``acceptance_by_depth`` rows of several runs summed depth by depth (offered and accepted counts
    add; the rate is recomputed)."""
    totals: dict[int, list[int]] = {}
    for rows in groups:
        for row in rows:
            total = totals.setdefault(int(row["depth"]), [0, 0])
            total[0] += int(row["offered"])
            total[1] += int(row["accepted"])
    return [{"depth": d, "offered": o, "accepted": a, "rate": a / o if o else 0.0}
            for d, (o, a) in sorted(totals.items())]
