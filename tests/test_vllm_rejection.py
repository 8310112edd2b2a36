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


@pytest.mark.parametrize("case", list(CASES))
def test_each_position_follows_p_whatever_q(vllm_sampling, case):
    """Two drafts a request (x1 ~ q1, x2 ~ q2, q with mass outside p's nucleus; q one-hot: p's most likely tokens) over fixed target rows l1, l2
    and the bonus row l3: the first output token follows p1; given it is x1, the second follows p2;
    given both drafts kept, the third (the bonus) follows p3 (chi-square over 3,000 requests)."""
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import rejection

    cpu032.fix_cpu_sampling()
    torch.manual_seed(11)  # the unseeded requests' draws
    vocab, scale, top_p, q_given, seeded = CASES[case]
    requests, temperature = 3000, 0.8
    generator = torch.Generator().manual_seed(7)
    rows = torch.randn(3, vocab, generator=generator) * scale
    q = 0.6 * torch.softmax(rows[:2], dim=-1) + 0.4 * torch.softmax(torch.randn(2, vocab, generator=generator), dim=-1)
    if q_given:
        drafts = torch.stack([torch.multinomial(q[j], requests, replacement=True, generator=generator)
                              for j in (0, 1)], dim=1)
    else:
        drafts = rows[:2].argmax(dim=-1)[None, :].repeat(requests, 1)  # p's most likely tokens
    draft_probs = q.repeat(requests, 1).contiguous() if q_given else None
    logits = rows.repeat(requests, 1).contiguous()
    before = logits.clone()
    out = rejection.rejection_forward(_sampler(), _metadata([2] * requests, drafts.flatten().tolist()), draft_probs,
                                      logits, _sampling(requests, temperature, top_p, seeded)).sampled_token_ids.numpy()
    assert torch.equal(logits, before), "the logits are read, not changed"
    assert out.shape == (requests, 3)
    x1, x2 = drafts[:, 0].numpy(), drafts[:, 1].numpy()
    p = [_p(rows[j], temperature, top_p) for j in range(3)]
    assert _chi_square(out[:, 0], p[0]) > 1e-3
    first = out[:, 0] == x1
    assert (out[~first, 1:] == -1).all(), "nothing follows a recovered token"
    assert _chi_square(out[first, 1], p[1]) > 1e-3
    both = first & (out[:, 1] == x2)
    assert (out[first & ~both, 2] == -1).all()
    assert both.sum() > 200 and _chi_square(out[both, 2], p[2]) > 1e-3


def test_requests_of_other_settings_and_draft_counts_each_follow_their_own_p(vllm_sampling):
    """Requests alternate A (1 draft, T 0.6, top-p 0.9) and B (2 drafts, T 1.5, top-p 0.95) over the
    same target rows: each request's positions follow p at its own temperature and top-p (chi-square
    over 3,000 pairs), so the per-request settings are expanded to their own draft rows."""
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.cpu032 import rejection

    cpu032.fix_cpu_sampling()
    torch.manual_seed(5)
    pairs, vocab = 3000, 8
    generator = torch.Generator().manual_seed(7)
    rows = torch.randn(3, vocab, generator=generator) * 1.5  # two draft rows and the bonus row
    q = torch.softmax(torch.randn(2, vocab, generator=generator), dim=-1)
    drafts = torch.stack([torch.multinomial(q[j], 2 * pairs, replacement=True, generator=generator) for j in (0, 1)], 1)
    counts, ids, logits, probs = [], [], [], []
    for i in range(pairs):
        a, b = drafts[2 * i], drafts[2 * i + 1]
        counts += [1, 2]
        ids += [int(a[0]), int(b[0]), int(b[1])]
        logits += [rows[0], rows[2], rows[0], rows[1], rows[2]]  # A: draft row, bonus; B: 2 draft rows, bonus
        probs += [q[0], q[0], q[1]]
    sampling = _sampling(2 * pairs, 1.0, 0.9, seeded=False)
    sampling.temperature = torch.tensor([0.6, 1.5] * pairs)
    sampling.top_p = torch.tensor([0.9, 0.95] * pairs)
    out = rejection.rejection_forward(_sampler(), _metadata(counts, ids), torch.stack(probs).contiguous(),
                                      torch.stack(logits).contiguous(), sampling).sampled_token_ids.numpy()
    for request, (temperature, top_p), (x1, x2) in ((0, (0.6, 0.9), (drafts[0::2, 0], None)),
                                                  (1, (1.5, 0.95), (drafts[1::2, 0], drafts[1::2, 1]))):
        mine = out[request::2]
        p = [_p(rows[j], temperature, top_p) for j in range(3)]
        assert _chi_square(mine[:, 0], p[0]) > 1e-3, f"request {'AB'[request]}'s first token"
        first = mine[:, 0] == x1.numpy()
        assert first.sum() > 200
        assert _chi_square(mine[first, 1], p[1 if x2 is not None else 2]) > 1e-3, f"request {'AB'[request]}'s second token"


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
