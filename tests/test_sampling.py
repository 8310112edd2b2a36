"""The target distribution p: the partial top-k paths equal the exact full-sort definition."""

import numpy as np
import pytest
import torch

from stand_runtime import SamplingParams, StandError, target_probs
from stand_runtime.target.sampling import resolve_sampling, top_target_probs


def exact_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p by the textbook recipe in the same float32 arithmetic: a full sort of every row."""
    scaled = logits.float() / params.temperature
    if params.top_k:
        kth = torch.sort(scaled, descending=True).values[:, params.top_k - 1 : params.top_k]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    values, order = torch.sort(probs, descending=True)
    keep = (values.cumsum(-1) - values) < params.top_p
    out = torch.zeros_like(probs).scatter_(-1, order, values * keep)
    return out / out.sum(-1, keepdim=True)


@pytest.fixture(scope="module")
def logits():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(64, 4000, generator=gen) * 4
    rows[3] = torch.randn(4000, generator=gen) * 0.01  # nearly flat: its nucleus is larger than the probe
    rows[7, :2] = 30.0  # a sharp row with a tie at the top
    return rows


PARAMS = [SamplingParams(0.6, 0.95), SamplingParams(1.0, 1.0), SamplingParams(1.3, 0.7, 3),
          SamplingParams(0.8, 0.9, 50), SamplingParams(0.6, 0.999)]


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_partial_top_p_equals_the_full_sort(logits, params):
    """Rows whose nucleus exceeds the partial top-k fall back to a full sort on their own."""
    got = target_probs(logits, params)
    np.testing.assert_allclose(got.numpy(), exact_probs(logits, params).numpy(), atol=1e-6)


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_top_target_probs_equals_topk_of_p(logits, params):
    """Up to float rounding (a token exactly at the nucleus boundary may fall either way)."""
    ids, probs = top_target_probs(logits, params, 10, rows_per_batch=16)
    exact = exact_probs(logits, params)
    np.testing.assert_allclose(probs.numpy(), torch.gather(exact, 1, ids).numpy(), atol=1e-4)
    np.testing.assert_allclose(probs.numpy(), torch.topk(exact, 10).values.numpy(), atol=1e-4)


def test_greedy_is_one_hot_on_the_first_argmax(logits):
    p = target_probs(logits, SamplingParams(temperature=0))
    assert torch.equal(p.argmax(-1), logits.argmax(-1)) and torch.all(p.sum(-1) == 1)
    assert int(p[7].argmax()) == 0  # a tie: the first index


def test_sampling_given_twice_is_an_error():
    with pytest.raises(StandError, match="give sampling or top_p, not both"):
        resolve_sampling(SamplingParams(), top_p=0.9)
    assert resolve_sampling(None, 0.0) == SamplingParams(temperature=0.0)
