"""Decoding diagnostics against hand-computed values: acceptance per depth, q-versus-p at the root."""

import numpy as np
import pytest

from stand_runtime.drafters.diagnostics import DraftQuality, summarise_draft_quality
from stand_runtime.engine.metrics import acceptance_by_depth
from stand_runtime.verify import acceptance_chain


def test_acceptance_by_depth_by_hand():
    # steps (accepted, bonus): (0, F) rejected at depth 1; (1, T) accepted a leaf, nothing offered below;
    # (2, F) rejected at depth 3; (3, T); (0, T) nothing drafted
    rows = acceptance_by_depth([0, 1, 2, 3, 0], [False, True, False, True, True])
    assert [(r["depth"], r["offered"], r["accepted"]) for r in rows] == [(1, 4, 3), (2, 2, 2), (3, 2, 1)]
    assert rows[0]["rate"] == pytest.approx(0.75) and rows[1]["rate"] == 1.0 and rows[2]["rate"] == pytest.approx(0.5)
    assert acceptance_by_depth([], []) == []


def test_draft_quality_by_hand():
    p = np.zeros(10)
    p[[1, 2, 3]] = [0.7, 0.2, 0.1]
    quality = DraftQuality()
    # q over ids [2, 1, 4] = [0.5, 0.3, 0.2]: argmax q is token 2 (p 0.2), the top two are 2 and 1 (p 0.9)
    quality.add(3, p, np.array([2, 1, 4]), np.array([0.5, 0.3, 0.2]), m=2)
    quality.add(0)
    summary = summarise_draft_quality([quality.as_dict(), quality.as_dict()])
    assert summary["0"] == {"steps": 2, "share": 0.5}
    assert summary["3"]["overlap"] == pytest.approx(0.2 + 0.3)  # min(0.2, 0.5) + min(0.7, 0.3) + min(0, 0.2)
    assert summary["3"]["top1"] == pytest.approx(0.2)
    assert summary["3"]["topm"] == pytest.approx(0.9)
    assert summary["all"]["steps"] == 2 and summary["all"]["share"] == pytest.approx(0.5)


def test_sampled_children_acceptance_matches_enumeration():
    """sampled_m (Monte Carlo over Gumbel orders) = the exact mean over ordered draws without replacement."""
    p = np.zeros(10)
    p[[1, 2, 3]] = [0.7, 0.2, 0.1]
    ids, q = np.array([2, 1, 4]), np.array([0.5, 0.3, 0.2])
    exact = 0.0
    for i in range(3):
        for j in range(3):
            if i != j:
                chance = q[i] * q[j] / (1 - q[i])
                exact += chance * sum(acceptance_chain(p[ids].tolist(), q.tolist(), [i, j], stochastic=True).accept)
    quality = DraftQuality(orders=20000, seed=1)
    quality.add(3, p, ids, q, m=2)
    summary = summarise_draft_quality([quality.as_dict()])
    assert summary["3"]["sampled_m"] == pytest.approx(exact, abs=0.01)
    assert 0.0 < exact < 1.0
