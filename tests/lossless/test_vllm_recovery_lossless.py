"""Lossless, vLLM 0.32's CPU sampler with the cpu032 fixes: the recovered token's law under top-p."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scipy import stats
from types import SimpleNamespace
from test_vllm_cpu_sampling import pytestmark as vllm_cpu_sampling_required


@vllm_cpu_sampling_required
@pytest.mark.parametrize("one_hot", [False, True])
@pytest.mark.parametrize("seeded", [False, True])
def test_recovery_law_with_a_nucleus(vllm_sampling, seeded, one_hot):
    """p zero outside a nucleus (tokens 0-4 of 8), q with mass outside it or one-hot on the draft
    token (draft_probs None): each position's recovered token follows max(p - q, 0) normalised
    (chi-square over 3,000 draws), from seeded generators or the global one, with requests without
    drafts in between and two positions per drafting request sharing its noise."""
    from stand_runtime.vllm.cpu032 import cpu_sampling

    vocab, requests = 8, 3000
    p = torch.tensor([0.40, 0.25, 0.15, 0.12, 0.08, 0.0, 0.0, 0.0])
    q = torch.tensor([0.10, 0.40, 0.10, 0.05, 0.05, 0.10, 0.20, 0.00])
    drafts = [2 if i % 3 else 0 for i in range(requests)]
    tokens = sum(drafts)
    draft_ids = torch.ones(tokens, dtype=torch.int32)  # every draft is token 1
    generators = {i: torch.Generator().manual_seed(i) for i in range(requests)} if seeded else {}
    torch.manual_seed(1)
    out = cpu_sampling.sample_recovered_tokens(
        2, drafts, torch.tensor(np.cumsum(drafts), dtype=torch.int32), draft_ids,
        None if one_hot else q.repeat(tokens, 1).contiguous(), p.repeat(tokens, 1).contiguous(),
        SimpleNamespace(generators=generators), torch.device("cpu"))
    residual = (p - (torch.nn.functional.one_hot(torch.tensor(1), vocab).float() if one_hot else q)).clamp(min=0)
    residual = residual.double().numpy()
    support = residual > 0
    for position in (0, 1):  # first and second draft position of each request
        counts = np.bincount(out[position::2].numpy(), minlength=vocab)
        assert counts[~support].sum() == 0, "a token without residual mass was recovered"
        expected = residual[support] / residual[support].sum() * counts[support].sum()
        assert stats.chisquare(counts[support], expected).pvalue > 1e-3
