"""Lossless, vLLM's rejection sampler as STAND's proposer feeds it: each position follows p."""

from __future__ import annotations

import pytest
import torch

from test_vllm_rejection import CASES, _chi_square, _metadata, _p, _sampler, _sampling
from test_vllm_rejection import pytestmark as vllm_rejection_required


@vllm_rejection_required
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


@vllm_rejection_required
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
