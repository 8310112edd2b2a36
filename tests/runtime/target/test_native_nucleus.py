"""The native top-p nucleus (csrc/nucleus.cpp, stand_runtime/target/sampling.py) against the
torch reference (stand_runtime.target.sampling.nucleus after a log-sum-exp) on the same rows."""

from __future__ import annotations

import pytest
import torch

from stand_runtime.target.sampling import logits_nucleus, native_nucleus_available
from stand_runtime.target.sampling import NUCLEUS_PROBE, nucleus

pytestmark = pytest.mark.skipif(not native_nucleus_available(), reason="native extension not built")


def _rows(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Peaked rows (nucleus of a few tokens) to flat ones (wider than the probe), a language model's
    heavy upper tail in some."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([12.0, 6.0, 3.0, 1.0, 0.3, 0.02])[torch.arange(rows) % 6]
    logits = torch.randn(rows, vocab, generator=generator) * scales[:, None]
    logits[::4, :5] += 20.0  # a few dominant tokens
    return logits


def _reference(logits: torch.Tensor, p: torch.Tensor):
    log_total = torch.logsumexp(logits, dim=-1, keepdim=True)
    return nucleus(logits, p, probs_of=lambda top: torch.exp(top - log_total), full_sort=False), log_total


@pytest.mark.parametrize("seed,vocab", [(0, 3000), (1, 49152), (2, 100)])
def test_same_nucleus_and_probabilities_as_the_reference(seed, vocab):
    logits = _rows(30, vocab, seed)
    p = torch.tensor([0.95, 0.5, 0.9, 0.99, 0.6, 0.8, 0.999, 0.1])[torch.arange(30) % 8]
    (found, log_total, mass), (ref, ref_total) = logits_nucleus(logits.clone(), p, mask=False), _reference(logits, p)
    assert torch.allclose(log_total, ref_total, rtol=1e-6, atol=1e-5)
    if vocab <= NUCLEUS_PROBE:  # the probe is the vocabulary: no row is wide
        assert ref.wide is None and not bool(found.wide.any())
    else:
        assert torch.equal(found.wide, ref.wide)
        assert int(found.wide.sum()) > 0 and int((~found.wide).sum()) > 0, "rows of both kinds were exercised"
    for r in range(30):
        if found.wide[r]:
            continue
        ours, theirs = found.values[r] > 0, ref.values[r] > 0
        assert set(found.ids[r][ours].tolist()) == set(ref.ids[r][theirs].tolist())
        assert torch.allclose(found.values[r][ours].sort().values, ref.values[r][theirs].sort().values, rtol=1e-5)
        assert bool((found.values[r][ours][:-1] >= found.values[r][ours][1:]).all()), "most likely first"
        assert abs(float(mass[r]) - float(ref.values[r].sum())) < 1e-5


@pytest.mark.parametrize("temperature", [0.6, 1.7])
def test_scale_reads_the_row_at_a_temperature(temperature):
    """``scale`` = 1 / T gives the cut of ``logits / T`` without a scaled copy (the rows unchanged)."""
    logits = _rows(18, 3000, 4)
    p = torch.full((18,), 0.9)
    kept = logits.clone()
    scaled = logits_nucleus(kept, p, mask=False, scale=1.0 / temperature)
    copied = logits_nucleus((logits / temperature).contiguous(), p, mask=False)
    assert torch.equal(kept, logits)
    assert torch.equal(scaled.found.wide, copied.found.wide)
    assert torch.allclose(scaled.log_total, copied.log_total, rtol=1e-6, atol=1e-5)
    for r in range(18):
        ours, theirs = scaled.found.values[r] > 0, copied.found.values[r] > 0
        if not scaled.found.wide[r]:
            assert scaled.found.ids[r][ours].tolist() == copied.found.ids[r][theirs].tolist()
            assert torch.allclose(scaled.found.values[r][ours], copied.found.values[r][theirs], rtol=1e-5)


def test_mask_in_place_keeps_the_nucleus_logits_only():
    """Masked in place, rows of any nucleus size (a flat row's exceeds the probe) keep exactly the
    reference's nucleus; the mass and the first tokens are reported for each."""
    logits = _rows(12, 3000, 3)
    p = torch.full((12,), 0.9)
    p[5] = 1.0  # skipped: left as it is
    masked = logits.clone()
    found, _, mass = logits_nucleus(masked, p, mask=True)
    reference = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
    assert not bool(found.wide.any())
    sizes = []
    for r in range(12):
        if p[r] >= 1.0:
            assert torch.equal(masked[r], logits[r])
            continue
        before = reference.values[r].cumsum(0) - reference.values[r]
        want = reference.indices[r][before < p[r]]
        finite = torch.isfinite(masked[r]).nonzero().flatten()
        assert set(finite.tolist()) == set(want.tolist())
        assert torch.equal(masked[r, want], logits[r, want])
        assert abs(float(mass[r]) - float(reference.values[r][before < p[r]].sum())) < 1e-4
        shown = found.ids[r][found.values[r] > 0]
        assert shown.tolist() == want[: len(shown)].tolist()
        sizes.append(len(want))
    assert max(sizes) > NUCLEUS_PROBE and min(sizes) < 10, "small and wide nuclei were exercised"
    assert float(found.values[5].abs().sum()) == 0.0 and not bool(found.wide[5])


def test_edge_rows():
    """-inf logits (banned tokens) are probability 0, a row with NaN or without finite logits is left
    to the caller (wide), ties keep the lower id first, and input of another kind is declined."""
    logits = torch.zeros(4, 200)
    logits[0, 10:] = float("-inf")
    logits[0, :10] = torch.arange(10.0)
    logits[1, 3] = float("nan")
    logits[2] = float("-inf")
    logits[3, [7, 3]] = 5.0  # a tie at the top
    found, log_total, _ = logits_nucleus(logits.clone(), torch.full((4,), 0.5), mask=False)
    assert not bool(found.wide[0]) and found.ids[0, 0] == 9
    assert abs(float(log_total[0]) - float(torch.logsumexp(logits[0], -1))) < 1e-5
    assert bool(found.wide[1]) and bool(found.wide[2])
    assert found.ids[3, :2].tolist() == [3, 7] and not bool(found.wide[3])
    assert logits_nucleus(logits.t().contiguous().t(), torch.full((4,), 0.5), mask=False) is None  # not contiguous
    assert logits_nucleus(logits.double(), torch.full((4,), 0.5), mask=False) is None
    assert logits_nucleus(torch.zeros(0, 200), torch.zeros(0), mask=False) is None
    assert found.values.shape == (4, min(NUCLEUS_PROBE, 200))


def test_switched_off_by_the_native_variable(monkeypatch):
    monkeypatch.setenv("STAND_NATIVE_NUCLEUS", "0")
    assert logits_nucleus(torch.zeros(2, 50), torch.full((2,), 0.9), mask=False) is None


def test_a_token_whose_preceding_mass_equals_top_p_is_left_out():
    """torch's rule keeps a token while the mass before it is below top_p: at exactly top_p it is out
    (two tokens of 0.5 at top_p 0.5 keep one; four of 0.25 keep two)."""
    logits = torch.full((2, 200), float("-inf"))
    logits[0, [4, 9]] = 0.0
    logits[1, [1, 2, 3, 5]] = 0.0
    found, _, mass = logits_nucleus(logits.clone(), torch.tensor([0.5, 0.5]), mask=False)
    assert (found.values[0] > 0).sum() == 1 and found.ids[0, 0] == 4
    assert (found.values[1] > 0).sum() == 2 and found.ids[1, :2].tolist() == [1, 2]
    assert abs(float(mass[0]) - 0.5) < 1e-7
