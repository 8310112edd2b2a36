"""vLLM's CPU sampling as this package's plugin changes it (stand_runtime/vllm/cpu032/cpu_sampling.py):
the top-p cut from a probe keeps exactly vLLM's nucleus, and the recovery noise drawn only for
requests with drafts and only inside p's support gives the residual law (reproducibly for seeded
requests)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")


def _logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Logits of several shapes: peaked rows (small nucleus), flat rows (nucleus wider than the
    probe) and in-between, all values distinct."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([8.0, 4.0, 2.0, 1.0, 0.3, 0.05])[torch.arange(rows) % 6]
    return torch.randn(rows, vocab, generator=generator) * scales[:, None]


def test_fix_replaces_top_p_noise_and_verification_and_can_be_turned_off(vllm_sampling, monkeypatch):
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import cpu_sampling, rejection

    monkeypatch.setenv(cpu032.FAST_SAMPLING_ENV, "0")
    cpu032.fix_cpu_sampling()
    assert vllm_sampling.topk.apply_top_k_top_p_pytorch.__wrapped__ is vllm_sampling.values["top_p"]  # empty_safe
    assert vllm_sampling.rejection.sample_recovered_tokens is vllm_sampling.values["recovered"]
    assert vllm_sampling.rejection.RejectionSampler.forward is vllm_sampling.values["forward"]
    monkeypatch.delenv(cpu032.FAST_SAMPLING_ENV)
    assert cpu032.fix_cpu_sampling()
    assert vllm_sampling.topk.apply_top_k_top_p_pytorch is cpu_sampling.top_p_by_probe
    assert vllm_sampling.rejection.sample_recovered_tokens is cpu_sampling.sample_recovered_tokens
    assert vllm_sampling.rejection.RejectionSampler.forward is rejection.rejection_forward
    assert cpu_sampling.VLLM_ORIGINALS[rejection.FORWARD] is vllm_sampling.values["forward"]
    cpu032.fix_cpu_sampling()  # a second run (every vLLM process runs the plugin) keeps vLLM's originals
    assert cpu_sampling.VLLM_ORIGINALS[rejection.FORWARD] is vllm_sampling.values["forward"]
    assert vllm_sampling.rejection.RejectionSampler.forward is rejection.rejection_forward
    assert not cpu_sampling.cpu_expand_is_broken()


@pytest.mark.parametrize("fast", [True, False])
def test_no_rows_with_a_top_k_pass_through(vllm_sampling, monkeypatch, fast):
    """The rejection sampler's call for the draft positions of a step without drafts has no rows: with
    a top-k, vLLM's own function raised on it (k.max() of an empty tensor) and the engine died."""
    from stand_runtime.vllm import cpu032

    none, k, p = torch.zeros(0, 50), torch.zeros(0, dtype=torch.long), torch.zeros(0)
    with pytest.raises(RuntimeError):  # top-k alone, as the rejection sampler asks for it
        vllm_sampling.values["top_p"](none.clone(), k, None, allow_cpu_sync=True)
    if not fast:
        monkeypatch.setenv(cpu032.FAST_SAMPLING_ENV, "0")
    assert cpu032.fix_cpu_sampling()
    for top_k, top_p in ((k, p), (k, None), (None, p)):
        kept = vllm_sampling.topk.apply_top_k_top_p_pytorch(none.clone(), top_k, top_p, allow_cpu_sync=True)
        assert kept.shape == (0, 50)
    rows = torch.randn(3, 50)
    kept = vllm_sampling.topk.apply_top_k_top_p_pytorch(rows.clone(), torch.tensor([2, 2, 2]), None, allow_cpu_sync=True)
    assert torch.isfinite(kept).sum(-1).tolist() == [2, 2, 2]  # rows still go to vLLM's top-k


@pytest.mark.parametrize("seed,cut", [(0, "native"), (1, "native"), (2, "native"), (0, "torch"), (1, "torch")])
def test_top_p_by_probe_keeps_vllms_nucleus(vllm_sampling, monkeypatch, seed, cut):
    """The same tokens stay (the rest -inf) as with vLLM's full sort, for per-row p (1.0 included),
    rows whose nucleus fits the probe and rows sorted in full, with the native cut (where built) and
    the torch one; a top-k goes to vLLM's own."""
    from stand_runtime.target.sampling import NUCLEUS_PROBE
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import cpu_sampling

    if cut == "torch":
        monkeypatch.setenv("STAND_NATIVE_NUCLEUS", "0")

    cpu032.fix_cpu_sampling()
    vllm_top_p = vllm_sampling.values["top_p"]
    logits = _logits(24, 3000, seed)
    p = torch.tensor([0.95, 0.5, 0.9, 1.0, 0.99, 0.6, 0.8, 0.95])[torch.arange(24) % 8]
    ours = cpu_sampling.top_p_by_probe(logits.clone(), None, p)
    theirs = vllm_top_p(logits.clone(), None, p)
    kept = torch.isfinite(theirs)
    assert torch.equal(torch.isfinite(ours), kept)
    assert torch.equal(ours[kept], theirs[kept])
    sizes = kept.sum(-1)
    assert int(sizes.min()) >= 1 and int(sizes.max()) > NUCLEUS_PROBE, "rows of both kinds were exercised"
    assert int(sizes[p >= 1.0].min()) == 3000

    k = torch.full((24,), 50)
    assert torch.equal(cpu_sampling.top_p_by_probe(logits.clone(), k, p), vllm_top_p(logits.clone(), k, p))
    half = logits.to(torch.bfloat16)  # not float32: vLLM's own cut
    assert torch.equal(cpu_sampling.top_p_by_probe(half.clone(), None, p), vllm_top_p(half.clone(), None, p))
    same_p = torch.full((24,), 0.9)  # every row cut: the in-place path without row selection
    assert torch.equal(torch.isfinite(cpu_sampling.top_p_by_probe(logits.clone(), None, same_p)),
                       torch.isfinite(vllm_top_p(logits.clone(), None, same_p)))


def _recovery_inputs(drafts: list[int], vocab: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    tokens = sum(drafts)
    target = torch.softmax(torch.randn(tokens, vocab, generator=generator) * 2, dim=-1)
    draft = torch.softmax(torch.randn(tokens, vocab, generator=generator) * 2, dim=-1)
    ids = torch.randint(0, vocab, (tokens,), generator=generator, dtype=torch.int32)
    cumulative = torch.tensor(np.cumsum(drafts), dtype=torch.int32)
    return ids, cumulative, target, draft


def test_seeded_recovery_is_reproducible_and_inside_the_residual(vllm_sampling):
    """Every request seeded: the same seeds give the same recovered tokens, and each is a token of
    positive residual max(p - q, 0) (p here zero outside a nucleus, as after top-p)."""
    from stand_runtime.vllm.cpu032 import cpu_sampling

    drafts = [2, 0, 3, 0, 1]
    ids, cumulative, target, draft = _recovery_inputs(drafts, 500, 0)
    target = torch.where(target >= target.topk(40, dim=-1).values[:, -1:], target, torch.zeros(()))
    target = target / target.sum(dim=-1, keepdim=True)

    def recovered():
        generators = {i: torch.Generator().manual_seed(100 + i) for i in range(len(drafts))}
        return cpu_sampling.sample_recovered_tokens(max(drafts), drafts, cumulative, ids, draft, target,
                                                    SimpleNamespace(generators=generators), torch.device("cpu"))

    first = recovered()
    assert torch.equal(first, recovered())
    residual = (target - draft).clamp(min=0)
    assert bool((residual[torch.arange(len(first)), first.long()] > 0).all())
    empty = cpu_sampling.sample_recovered_tokens(0, [0, 0], torch.zeros(2, dtype=torch.int32),
                                                 torch.zeros(0, dtype=torch.int32), None, torch.zeros(0, 500),
                                                 SimpleNamespace(generators={}), torch.device("cpu"))
    assert empty.shape == (0,)




def test_unseeded_recovery_follows_the_residual(vllm_sampling):
    """Requests without seeds (and some without drafts between them): each draft position's
    recovered token is distributed as max(p - q, 0) normalised (chi-square over 3,000 draws)."""
    from stand_runtime.vllm.cpu032 import cpu_sampling

    vocab, requests = 6, 3000
    p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    q = torch.tensor([0.10, 0.40, 0.10, 0.30, 0.05, 0.05])
    drafts = [1 if i % 3 else 0 for i in range(requests)]
    tokens = sum(drafts)
    torch.manual_seed(0)
    out = cpu_sampling.sample_recovered_tokens(
        1, drafts, torch.tensor(np.cumsum(drafts), dtype=torch.int32), torch.zeros(tokens, dtype=torch.int32),
        q.repeat(tokens, 1).contiguous(), p.repeat(tokens, 1).contiguous(), SimpleNamespace(generators={}),
        torch.device("cpu"))
    residual = (p - q).clamp(min=0).double().numpy()
    counts = np.bincount(out.numpy(), minlength=vocab)
    support = residual > 0
    assert counts[~support].sum() == 0, "a token without residual mass was recovered"
    expected = residual[support] / residual[support].sum() * counts[support].sum()
    assert counts.sum() == tokens and stats.chisquare(counts[support], expected).pvalue > 1e-3
