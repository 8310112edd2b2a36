"""Gumbel-Top-K: m draws without replacement from a distribution in one shot (STAND §3.2).

The top-m indices of ``log q + g`` with g ~ Gumbel(0, 1) i.i.d. are m draws *without replacement*
from q, in drawing order (Kool et al., 2019, "Stochastic Beams and Where to Find Them", §2; Vieira,
2014). STAND draws a node's children this way; the drawing order is the child order, which
recursive rejection sampling (:mod:`stand_runtime.verify`) assumes. The same child-choice rule
serves drafting (:mod:`stand_runtime.drafters`), replay calibration (:mod:`treeopt.optimize.replay`) and the
diagnostics (:mod:`stand_runtime.drafters.diagnostics`), so none of them can drift from the others.
Deterministic drafting (the paper's ablation, and greedy decoding) takes q's m most likely tokens.
"""

from __future__ import annotations

import numpy as np

from ..randomness import RandomStream


def gumbel_top_k(log_q: np.ndarray, m: int, gumbel: np.ndarray) -> np.ndarray:
    """Indices of m draws without replacement from q, in drawing order (Gumbel-Top-K).

    Args:
        log_q: ``[..., k]`` float log-probabilities (``-inf`` for impossible entries).
        m: draws per row, ``m <= k``.
        gumbel: ``[..., k]`` fresh standard Gumbel noise (never reused).

    Returns:
        ``[..., m]`` int64 indices into the last axis, the first draw first.
    """
    keys = log_q + gumbel
    if m == 1:
        return np.argmax(keys, axis=-1)[..., None]
    return np.argsort(-keys, axis=-1, kind="stable")[..., :m]


def choose_children(log_q: np.ndarray, m: int, randomness: RandomStream | None) -> list[int]:
    """Support indices of the m children drawn from q, in drawing order.

    Args:
        log_q: ``[k]`` float64 log q over the support (q's order: most likely first), ``m <= k``.
        m: children to draw.
        randomness: Gumbel noise source (stochastic drafts, one fresh ``[k]`` block per call);
            None = deterministic, q's top-m (the support is sorted by decreasing q).
    """
    if randomness is None:
        return list(range(m))
    return gumbel_top_k(log_q, m, randomness.gumbel(len(log_q))).tolist()
