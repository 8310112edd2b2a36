"""Every row's walk advanced level by level (stand_runtime.engine.row.walk_rows, docs/algorithms.md §4.7) against
the walks run one by one: same streams, same outcomes, same draws left, for random batches of
trees and rows of mixed sampling parameters (greedy, top-p, top-k, dense); non-finite logits at a
visited position stay an error. End to end, the engine (which verifies through it on a CPU) decodes
as plain decoding: tests/runtime/engine/test_engine.py, tests/runtime/engine/test_batch.py."""

import numpy as np
import pytest

from stand_runtime import SamplingParams
from stand_runtime.engine.row import StepTarget
from stand_runtime.engine.row import walk_rows
from stand_runtime.errors import StandError
from stand_runtime.randomness import PositionNoise, RandomStream
from stand_runtime.verify import greedy_walk, gumbel_walk, sampling_walk, verify_invariant
from test_verify_batch import KINDS, padded_views, random_draft, random_logits, reference

VOCAB = 300
MIXED = [SamplingParams(0.0), SamplingParams(0.7, 0.9), SamplingParams(1.0, 1.0), SamplingParams(0.6, 0.95, 20)]


def walks(drafts, params, streams):
    """Each row's walk as DecodeRow.walk makes it under recursive rejection (greedy rows: the greedy walk)."""
    return [greedy_walk(d) if p.greedy else sampling_walk(d, s) for d, p, s in zip(drafts, params, streams)]


def batch(seed: int):
    """Random rows: a draft, logits (slices of one padded tensor, as the forward gives) and params each."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 9))
    drafts = [random_draft(rng, VOCAB, int(rng.integers(0, 12)), KINDS[int(rng.integers(len(KINDS)))])
              for _ in range(size)]
    logits = padded_views([random_logits(rng, d, VOCAB, flat=0.1) for d in drafts])
    params = [MIXED[int(rng.integers(len(MIXED)))] for _ in range(size)]
    return drafts, logits, params


@pytest.mark.parametrize("seed", range(40))
def test_level_by_level_walks_equal_the_walks_one_by_one(seed):
    drafts, logits, params = batch(seed)
    streams = [RandomStream.seeded(1000 * seed + b) for b in range(len(drafts))]
    targets = [StepTarget(x, p, precompute=False) for x, p in zip(logits, params)]
    got = walk_rows(walks(drafts, params, streams), targets)
    for b, (draft, x, p) in enumerate(zip(drafts, logits, params)):
        alone = RandomStream.seeded(1000 * seed + b)
        want = reference([draft], [x], p, [alone])[0]
        assert got[b] == want, (b, p)
        assert streams[b].uniform() == alone.uniform()  # the same draws consumed
        for position, row in targets[b].rows.items():  # rows computed together equal a lone row's
            lone = StepTarget(x, p, precompute=False).target_at(position)
            np.testing.assert_allclose(row.probs, lone.probs, rtol=1e-6)
            np.testing.assert_array_equal(row.ids, lone.ids)


def test_a_level_is_computed_in_one_call_per_sampling_distribution(monkeypatch):
    import stand_runtime.engine.row as row_module
    calls = []
    real = row_module.target_rows
    monkeypatch.setattr(row_module, "target_rows", lambda logits, p: calls.append(len(logits)) or real(logits, p))
    drafts, logits, _ = batch(3)
    params = SamplingParams(0.7, 0.9)
    streams = [RandomStream.seeded(b) for b in range(len(drafts))]
    walk_rows(walks(drafts, [params] * len(drafts), streams), [StepTarget(x, params, precompute=False) for x in logits])
    assert calls[0] == len(drafts)  # every root at once
    assert len(calls) <= 1 + max(max(d.depths) for d in drafts)  # one call a level


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(0.7, 0.9)])
def test_non_finite_logits_at_a_visited_position_are_an_error(params):
    drafts, logits, _ = batch(5)
    logits[-1][0] = float("nan")
    streams = [RandomStream.seeded(b) for b in range(len(drafts))]
    with pytest.raises(StandError, match="not finite"):
        walk_rows(walks(drafts, [params] * len(drafts), streams), [StepTarget(x, params, precompute=False) for x in logits])


@pytest.mark.parametrize("seed", range(10))
def test_drafter_invariant_walks_level_by_level_equal_them_one_by_one(seed):
    """Gumbel-max walks (each row its position noise and base) advanced together give each row's
    verify_invariant."""
    drafts, logits, params = batch(seed)
    params = [p if not p.greedy else SamplingParams(0.8, 0.9) for p in params]
    noises = [PositionNoise.seeded(seed * 100 + b) for b in range(len(drafts))]
    targets = [StepTarget(x, p, precompute=False) for x, p in zip(logits, params)]
    got = walk_rows([gumbel_walk(d, n, 7 + b) for b, (d, n) in enumerate(zip(drafts, noises))], targets)
    for b, (draft, x, p) in enumerate(zip(drafts, logits, params)):
        alone = StepTarget(x, p, precompute=False)
        assert got[b] == verify_invariant(draft, alone.target_at, noises[b], 7 + b)
