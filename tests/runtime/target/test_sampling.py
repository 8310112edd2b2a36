"""The target distribution p: every path (dense p, host rows, top-k of p, recorded sparse p) goes
through one nucleus function (stand_runtime.target.sampling.nucleus) and equals a plain full-sort
definition bit for bit (float32 p, float64 rows); ties may only swap tokens of equal probability."""

import numpy as np
import pytest
import torch

from stand_runtime import SamplingParams
from stand_runtime.target.sampling import target_probs
from stand_runtime.target.sampling import NUCLEUS_PROBE, nucleus, target_row, target_rows, top_target_probs


def tempered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p before top-p by the textbook recipe: the k-th largest scaled logit from a full sort."""
    scaled = logits.float() / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.sort(scaled, dim=-1, descending=True).values[..., params.top_k - 1 : params.top_k]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def reference_sorted(logits: torch.Tensor, params: SamplingParams):
    """Each row's nucleus from a full (stable) sort: (cut values, ids, p before top-p)."""
    before = tempered(logits, params)
    values, order = torch.sort(before, dim=-1, descending=True, stable=True)
    if params.top_p < 1.0:
        values = values * ((values.cumsum(-1) - values) < params.top_p)
    return values, order, before


def exact_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p by the full-sort recipe in the same float32 arithmetic."""
    values, order, before = reference_sorted(logits, params)
    if params.top_p >= 1.0:
        return before
    out = torch.zeros_like(before).scatter_(-1, order, values)
    return out / out.sum(-1, keepdim=True)


def assert_equal_up_to_ties(got: torch.Tensor, want: torch.Tensor, before: torch.Tensor):
    """``got == want`` bit for bit, except that tokens of equal p-before-top-p may trade places at
    the nucleus boundary (then the dense renormalisation sums in another order: 1 ulp)."""
    for g, w, b in zip(got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1]),
                       before.reshape(-1, before.shape[-1])):
        only_g, only_w = (g > 0) & ~(w > 0), (w > 0) & ~(g > 0)
        if not only_g.any() and not only_w.any():
            assert torch.equal(g, w)
            continue
        assert torch.equal(torch.sort(b[only_g]).values, torch.sort(b[only_w]).values)
        np.testing.assert_allclose(torch.sort(g).values.numpy(), torch.sort(w).values.numpy(), rtol=1e-6, atol=0)


@pytest.fixture(scope="module")
def logits():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(32, 1500, generator=gen) * 4
    rows[3] = torch.randn(1500, generator=gen) * 0.01  # nearly flat: its nucleus is larger than the probe
    rows[7, :2] = 30.0  # a sharp row with a tie at the top
    rows[8] = 0.0  # uniform: every token tied
    rows[9:17] = torch.round(torch.randn(8, 1500, generator=gen) * 2)  # integer logits: ties everywhere
    rows[20, :5] = 12.0  # five tied tokens on top of a random row
    return rows


PARAMS = [SamplingParams(0.6, 0.95), SamplingParams(1.0, 1.0), SamplingParams(1.3, 0.7, 3),
          SamplingParams(0.8, 0.9, 50), SamplingParams(0.6, 0.999), SamplingParams(1.0, 1e-9),
          SamplingParams(1.0, 1.0, 1), SamplingParams(2.0, 0.99, NUCLEUS_PROBE + 88), SamplingParams(1.0, 1.0, 7),
          SamplingParams(5.0, 0.9999), SamplingParams(1.0, 0.55, 1499)]


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_nucleus_equals_the_full_sort(logits, params):
    """The one nucleus function: its cut values are the full sort's bit for bit (probe rows, and
    the rows past the probe, flat or tied beyond a top-k, from their own full sort)."""
    want, order, before = reference_sorted(logits, params)
    cut = nucleus(before, params.top_p, params.top_k)
    width = cut.values.shape[-1]
    wide = cut.wide.nonzero().flatten().tolist() if cut.wide is not None else []
    for r in range(len(logits)):
        values, ids = (cut.full[0][wide.index(r)], cut.full[1][wide.index(r)]) if r in wide else (cut.values[r], cut.ids[r])
        assert torch.equal(values, want[r, : len(values)]) and not want[r, len(values):].any(), r
        assert torch.equal(before[r, ids], before[r, order[r, : len(ids)]]), r  # ties may trade places
        assert len(values) == (logits.shape[-1] if r in wide else width)
        assert (r in wide) == bool(want[r, width:].any()), r  # a full sort exactly where the probe is short
    assert 3 in wide or params != PARAMS[0]  # the flat row


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_target_probs_equals_the_full_sort(logits, params):
    """Rows whose nucleus exceeds the partial top-k fall back to a full sort on their own; any
    leading batch shape gives the same rows."""
    got = target_probs(logits, params)
    assert_equal_up_to_ties(got, exact_probs(logits, params), tempered(logits, params))
    assert torch.equal(target_probs(logits.reshape(4, 8, -1), params).reshape(got.shape), got)
    assert torch.equal(target_probs(logits[5], params), got[5])


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_target_rows_equal_the_full_sort(logits, params):
    """Host rows: the nucleus in sorted order, renormalised in float64 (or the dense row)."""
    values, order, before = reference_sorted(logits, params)
    rows = target_rows(logits, params)
    dense = params.top_p >= 1.0 and not 0 < params.top_k < logits.shape[-1]
    for r, row in enumerate(rows):
        if dense:
            assert row.ids is None and np.array_equal(row.probs, before[r].double().numpy())
            continue
        size = int((values[r] > 0).sum())
        kept = values[r, :size].double().numpy()
        assert np.array_equal(row.probs, kept / kept.sum())
        assert len(set(row.ids.tolist())) == size  # distinct tokens, each as likely as the reference's
        assert torch.equal(before[r, torch.from_numpy(row.ids)], before[r, order[r, :size]])
    for r in (0, 3, 9):
        alone = target_row(logits[r], params)
        assert np.array_equal(alone.probs, rows[r].probs)
        assert (alone.ids is None) == dense and (dense or np.array_equal(alone.ids, rows[r].ids))


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_top_target_probs_equals_topk_of_p(logits, params):
    """From the sorted logits (exp(x - logsumexp) instead of a softmax): equal up to float rounding.
    With a top-k it renormalises over exactly k tokens, so rows tied at the k-th logit (where p keeps
    every tied token) are left out."""
    ids, probs = top_target_probs(logits, params, 10, rows_per_batch=16)
    exact = exact_probs(logits, params)
    before = tempered(logits, params)
    rows = (before > 0).sum(-1) == params.top_k if params.top_k else torch.ones(len(logits), dtype=torch.bool)
    assert rows.sum() >= 20
    top = torch.topk(exact[rows], 10)
    np.testing.assert_allclose(probs[rows].numpy(), top.values.numpy(), rtol=1e-4, atol=1e-7)
    kept = top.values > 0
    assert torch.equal(torch.gather(before[rows], 1, ids[rows])[kept], torch.gather(before[rows], 1, top.indices)[kept])


def test_nucleus_of_a_probe_sized_vocabulary_and_the_recorded_sparse_rows(logits):
    """A vocabulary no larger than the probe is sorted once (no wide rows); the recorded sparse p of
    batched sampling is the float64 nucleus of mass 0.999, also past the probe (flat rows)."""
    from stand_runtime.engine.batch_sampling import SPARSE_MASS, _observe

    small = nucleus(torch.softmax(logits[:, :NUCLEUS_PROBE], -1), 1e-9)
    assert small.wide is None and small.values.shape == (32, NUCLEUS_PROBE)
    params = SamplingParams(1.0, 1.0)
    _, _, sparse, probs = _observe(logits, params)
    before = tempered(logits, params)
    for r, (ids, values) in enumerate(sparse):
        ordered = torch.sort(before[r].double(), descending=True, stable=True).values.numpy()
        size = int(np.searchsorted(np.cumsum(ordered), SPARSE_MASS, side="left")) + 1
        assert len(ids) == size and np.array_equal(values, ordered[:size])
        assert np.array_equal(values, probs[r, torch.from_numpy(ids)].double().numpy())
    assert len(sparse[3][0]) > NUCLEUS_PROBE  # the flat row's 0.999 needs most of the vocabulary


def test_greedy_is_one_hot_on_the_first_argmax(logits):
    p = target_probs(logits, SamplingParams(temperature=0))
    assert torch.equal(p.argmax(-1), logits.argmax(-1)) and torch.all(p.sum(-1) == 1)
    assert int(p[7].argmax()) == 0 and int(p[8].argmax()) == 0  # ties: the first index
    assert torch.equal(target_probs(logits.reshape(2, 16, -1), SamplingParams(temperature=0)).reshape(p.shape), p)


def test_a_sparse_rows_lookups_equal_the_dense_rows():
    """TargetRow.at on a nucleus row gives what the dense row of the same p gives; sample_replaced
    inverts the CDF of p in the row's order with the drafted tokens' weights swapped in."""
    from stand_runtime.target.sampling import TargetRow, sample_index
    rng = np.random.default_rng(0)
    for _ in range(50):
        vocab = 30
        ids = rng.permutation(vocab)[: rng.integers(1, 10)]
        probs = rng.dirichlet(np.ones(len(ids)))
        dense = np.zeros(vocab)
        dense[ids] = probs
        sparse, full = TargetRow(probs, ids), TargetRow.dense(dense)
        tokens = rng.permutation(vocab)[: rng.integers(0, 6)]
        assert np.array_equal(sparse.at(tokens), full.at(tokens))
        weights = [w * float(p) for w, p in zip(rng.random(len(tokens)), full.at(tokens))]  # a residual: <= p
        uniform = float(rng.random())
        replaced = probs.copy()  # the reference: p in the row's order, each drafted token's weight swapped in
        for token, weight in zip(tokens.tolist(), weights):
            if token in ids.tolist():
                replaced[ids.tolist().index(token)] = weight
        assert sparse.sample_replaced(tokens, weights, uniform) == int(ids[sample_index(replaced, uniform)])
    empty = TargetRow(np.zeros(0), np.zeros(0, dtype=np.int64))
    assert empty.at(np.array([3, 4])).tolist() == [0.0, 0.0]
