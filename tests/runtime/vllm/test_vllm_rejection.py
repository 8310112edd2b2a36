"""vLLM's rejection sampler with its draft rows verified in a few passes (stand_runtime/vllm/cpu032/rejection.py):
lossless (each output position follows p whatever q, by chi-square, for a nucleus listed by the cut, a
nucleus wider than it and no top-p, with q given or one-hot, seeded or not), the same acceptance as
vLLM's own path on the same uniforms, the logits left as they were, and the nuclei recorded for the
STAND proposer's store feed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from scipy import stats

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")


def _metadata(counts: list[int], draft_ids: list[int]):
    """vLLM's SpecDecodeMetadata for requests laid out as [drafts..., bonus] rows in request order."""
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    target, bonus, row = [], [], 0
    for count in counts:
        target += range(row, row + count)
        bonus.append(row + count)
        row += count + 1
    return SpecDecodeMetadata(
        draft_token_ids=torch.tensor(draft_ids, dtype=torch.int32), num_draft_tokens=list(counts),
        cu_num_draft_tokens=torch.tensor(np.cumsum(counts), dtype=torch.int32),
        cu_num_sampled_tokens=torch.tensor(np.cumsum([c + 1 for c in counts]), dtype=torch.int32),
        target_logits_indices=torch.tensor(target, dtype=torch.int32),
        bonus_logits_indices=torch.tensor(bonus, dtype=torch.int32),
        logits_indices=torch.arange(row, dtype=torch.int32))


def _sampling(requests: int, temperature: float, top_p: float, seeded: bool, greedy: bool = False):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    return SamplingMetadata(
        temperature=torch.full((requests,), 0.0 if greedy else temperature), all_greedy=greedy, all_random=not greedy,
        top_p=None if top_p >= 1.0 else torch.full((requests,), top_p), top_k=None,
        generators={i: torch.Generator().manual_seed(1000 + i) for i in range(requests)} if seeded else {},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.zeros(requests),
        presence_penalties=torch.zeros(requests), repetition_penalties=torch.ones(requests),
        output_token_ids=[[] for _ in range(requests)], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=LogitsProcessors())


def _sampler():
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    return RejectionSampler(Sampler())


def _p(logits: torch.Tensor, temperature: float, top_p: float) -> np.ndarray:
    """vLLM's p: softmax at the temperature, top-p (a token stays when the mass strictly before it is
    below top_p), renormalised."""
    p = torch.softmax(logits.double() / temperature, dim=-1).numpy()
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    kept = np.zeros_like(p)
    kept[order] = p[order] * (before < top_p)
    return kept / kept.sum()


def _chi_square(tokens: np.ndarray, p: np.ndarray) -> float:
    """p-value of ``tokens`` against ``p``, bins of small expected counts merged; no token outside p's support."""
    counts = np.bincount(tokens, minlength=p.shape[0])
    assert counts[p <= 0].sum() == 0, "a token outside p's support was output"
    order = np.argsort(-p)
    expected, observed, bins_e, bins_o = p[order] * counts.sum(), counts[order], [], []
    e = o = 0.0
    for value, count in zip(expected, observed):  # merge from the least likely until each bin expects >= 20
        e, o = e + value, o + count
        if e >= 20:
            bins_e.append(e), bins_o.append(o)
            e = o = 0.0
    if e > 0 and bins_e:
        bins_e[-1], bins_o[-1] = bins_e[-1] + e, bins_o[-1] + o
    return stats.chisquare(bins_o, bins_e).pvalue


CASES = {  # vocab, logit scale, top-p, q given, seeded
    "nucleus listed, q given": (8, 1.5, 0.9, True, False),
    "nucleus listed, q one-hot, seeded": (8, 1.5, 0.9, False, True),
    "no top-p, q given, seeded": (8, 1.5, 1.0, True, True),
    "nucleus wider than the cut lists": (300, 0.1, 0.95, True, False),
}




def test_accepts_as_vllms_own_path_on_the_same_uniforms(vllm_sampling):
    """Seeded requests with 0-3 drafts each over random logits and q: the same drafts are kept as by
    vLLM's own forward (both test min(1, p/q) against vLLM's uniforms from the same generators); the
    recovered tokens may differ (other noise), each inside its residual's support."""
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import rejection

    cpu032.fix_cpu_sampling()
    vocab, requests = 500, 400
    generator = torch.Generator().manual_seed(3)
    counts = torch.randint(0, 4, (requests,), generator=generator).tolist()
    logits = torch.randn(sum(counts) + requests, vocab, generator=generator) * 3
    q = torch.softmax(torch.randn(sum(counts), vocab, generator=generator) * 3, dim=-1)
    metadata = _metadata(counts, [0] * sum(counts))
    metadata.draft_token_ids = torch.multinomial(q, 1, generator=generator)[:, 0].to(torch.int32)

    def kept(forward):
        out = forward(_sampler(), metadata, q, logits.clone(), _sampling(requests, 0.7, 0.9, seeded=True))
        out = out.sampled_token_ids.numpy()
        lengths, start = [], 0
        for i, count in enumerate(counts):
            drafted = metadata.draft_token_ids[start:start + count].numpy()
            lengths.append(int(np.cumprod(out[i, :count] == drafted).sum()))
            start += count
        return np.array(lengths)

    ours, theirs = kept(rejection.rejection_forward), kept(vllm_sampling.values["forward"])
    assert sum(counts) > 400 and 0 < ours.sum() < sum(counts)
    assert (ours != theirs).sum() <= 2, "acceptance differs beyond float rounding at the boundary"


def test_other_steps_go_to_vllms_forward_and_nuclei_are_recorded(vllm_sampling):
    """Greedy, top-k and logprobs steps take vLLM's own path; a sampled step records the bonus and the
    draft rows' nuclei for the STAND proposer's store feed, in the step's row order."""
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import nuclei, rejection

    cpu032.fix_cpu_sampling()
    sampler, vocab, counts = _sampler(), 200, [2, 0, 1]
    logits = torch.randn(sum(counts) + len(counts), vocab, generator=torch.Generator().manual_seed(5)) * 4
    metadata = _metadata(counts, [3, 4, 5])
    greedy = _sampling(3, 0.7, 0.9, seeded=False, greedy=True)
    assert not rejection.takes_fast_path(sampler, metadata, None, logits, greedy)
    out = rejection.rejection_forward(sampler, metadata, None, logits.clone(), greedy).sampled_token_ids
    argmax = logits.argmax(dim=-1)
    assert out[1, 0] == argmax[3] and out[0, 0] == argmax[0]  # vLLM's greedy rule: the target's argmax
    sampled = _sampling(3, 0.7, 0.9, seeded=False)
    for field, value in (("top_k", torch.full((3,), 5)), ("max_num_logprobs", 2)):
        changed = _sampling(3, 0.7, 0.9, seeded=False)
        setattr(changed, field, value)
        assert not rejection.takes_fast_path(sampler, metadata, None, logits, changed)
    assert rejection.takes_fast_path(sampler, metadata, None, logits, sampled)
    with nuclei.recording(10) as calls:
        rejection.rejection_forward(sampler, metadata, None, logits.clone(), sampled)
    step = nuclei.step_nuclei(calls, logits.shape[0], metadata)
    assert step is not None and bool(step.known.all())
    for row in range(logits.shape[0]):
        p = _p(logits[row], 0.7, 0.9)
        top = np.argsort(-p, kind="stable")[:10]
        live = p[top] > 0
        assert step.ids[row].numpy()[live].tolist() == top[live].tolist()
        assert np.allclose(step.probs[row].numpy()[live], p[top][live], atol=1e-5)
