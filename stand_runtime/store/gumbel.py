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

from ..errors import StandError
from ..randomness import DraftNoise


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


def choose_children(log_q: np.ndarray, m: int, noise: DraftNoise | None, depth: int = 0,
                    ids: np.ndarray | None = None) -> list[int]:
    """Support indices of the m children drawn from q, in drawing order.

    Args:
        log_q: ``[k]`` float64 log q over the support (q's order: most likely first), ``m <= k``.
        m: children to draw.
        noise: the draft's Gumbel noise (:class:`stand_runtime.randomness.DraftNoise`, positioned with
            ``at(base)``): a stream's fresh ``[k]`` block per call, or the position noise of the
            children's position over ``ids``; None = deterministic, q's top-m (the support is sorted
            by decreasing q).
        depth: the parent node's depth (root 0).
        ids: ``[k]`` int64 the support's token ids (needed with noise).

    Raises:
        StandError: noise without the support's ids.
    """
    if noise is None:
        return list(range(m))
    if ids is None:
        raise StandError("choose_children needs the support's token ids to read the noise of their position")
    return gumbel_top_k(log_q, m, noise.children(depth, ids)).tolist()
