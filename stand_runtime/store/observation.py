"""One observation of p for the store: checked, zeros removed, sorted, truncated to the top k."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import StandError


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
