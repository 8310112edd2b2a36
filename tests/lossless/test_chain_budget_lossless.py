"""Lossless with per-request chain lengths (vLLM's proposer): the exact two-token law."""

from __future__ import annotations

import pytest
import stand_runtime.drafters.chain as chain_module

from conftest import draw_law
from stand_runtime.drafters.chain import ChainCursor
from unittest.mock import patch
from test_chain_budget import P, PeekingCursor, _draw_from_q, _one_step, _store


def test_per_request_lengths_keep_the_exact_two_token_law():
    """Request A's q after 0 leans to 0 (seen 9 times: w 0.9), B's after 1 is (0.6, 0.4) (seen once:
    w 0.5): which positions are drafted depends on each request's scores, on the tokens its earlier
    positions drew, and on the other request's offers (lengths (2, 1) or (1, 1) here). The law of
    both requests' two tokens, enumerated exactly over every draw (drafts, verification, residuals,
    plain samples), is the target's. The same allocation with offers that read the draw they decide
    on (q of the drawn token) is not: the check has the power to see that fault."""
    stores = [_store([(0, [0.8, 0.2], 9), (1, [0.3, 0.7], 9)]), _store([(1, [0.6, 0.4], 1), (0, [0.5, 0.5], 3)])]
    contexts = [[1, 0], [0, 1]]
    exact = {((a, a2), (b, b2)): P[0][a] * P[a][a2] * P[1][b] * P[b][b2]
             for a in range(2) for a2 in range(2) for b in range(2) for b2 in range(2)}
    lengths, peeked = set(), set()
    with patch.object(chain_module, "choose_children", _draw_from_q):
        law = draw_law(lambda: _one_step(ChainCursor, stores, contexts, lengths))
        wrong = draw_law(lambda: _one_step(PeekingCursor, stores, contexts, peeked))
    assert len(lengths) > 1, lengths
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12) and set(law) <= set(exact)
    assert max(abs(law.get(key, 0.0) - value) for key, value in exact.items()) < 1e-12
    deviation = max(abs(wrong.get(key, 0.0) - value) for key, value in exact.items())
    assert deviation > 1e-3, "a rule that reads the draw it decides on should break the law here"
