"""The sampler's top-p nuclei reused by the STAND vLLM proposer (stand_runtime/vllm/cpu032/nuclei.py): what
a cut records equals the proposer's own computation of p's top-k, a step's calls are put in the
order of its logits rows, and a proposer fed from them builds the same stores as one that computes
every row itself."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from stand_runtime.target.sampling import SamplingParams, top_target_probs
from stand_runtime.vllm.cpu032 import nuclei

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed")

K = 10


def _logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Peaked, in-between and flat rows (the flat ones: a nucleus wider than the probe)."""
    generator = torch.Generator().manual_seed(seed)
    scales = torch.tensor([8.0, 4.0, 2.0, 1.0, 0.3, 0.05])[torch.arange(rows) % 6]
    return torch.randn(rows, vocab, generator=generator) * scales[:, None]


@pytest.fixture(params=["native", "torch"])
def probe_cut(monkeypatch, request):
    """``top_p_by_probe`` with vLLM's own function stubbed for the paths it hands over; with the native
    cut (where built) and with the torch one."""
    from stand_runtime.vllm.cpu032 import cpu_sampling

    if request.param == "torch":
        monkeypatch.setenv("STAND_NATIVE_NUCLEUS", "0")

    monkeypatch.setitem(cpu_sampling.VLLM_ORIGINALS, "apply_top_k_top_p_pytorch",
                        lambda logits, k, p, allow_cpu_sync=False: logits)
    return cpu_sampling.top_p_by_probe


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_a_cut_records_the_top_k_the_proposer_computes(probe_cut, temperature):
    logits = _logits(12, 2000, 0)
    top_p = torch.tensor([0.95, 0.8, 1.0, 0.9, 0.95, 0.5] * 2)
    with nuclei.recording(K) as calls:
        probe_cut(logits / temperature, None, top_p)
    assert len(calls) == 1
    call = calls[0]
    assert call.known.tolist() == (top_p < 1).tolist()
    for row in range(12):
        if top_p[row] >= 1:
            continue
        params = SamplingParams(temperature=temperature, top_p=float(top_p[row]))
        ids, probs = top_target_probs(logits[row: row + 1], params, K)
        kept = probs[0] > 0
        assert torch.equal(call.ids[row][kept], ids[0][kept])
        assert torch.allclose(call.probs[row], probs[0], atol=1e-6)
    # nothing is recorded outside a recording, and a call that cuts nothing records an unknown call
    probe_cut(logits.clone(), None, top_p)
    with nuclei.recording(K) as calls:
        probe_cut(logits.clone(), None, torch.ones(12))
        probe_cut(logits.clone(), torch.full((12,), 5), top_p)  # a top-k: vLLM's own function
    assert [call.rows for call in calls] == [12, 12] and not any(bool(call.known.any()) for call in calls)


def test_a_steps_calls_follow_its_logits_rows():
    def call(rows, start):
        ids = torch.arange(start, start + rows)[:, None].repeat(1, K)
        return nuclei.NucleusCall(torch.ones(rows, dtype=torch.bool), ids, torch.full((rows, K), 0.1))

    # two requests with 2 and 0 drafts: rows [t0, t1, bonus0, bonus1]
    metadata = SimpleNamespace(bonus_logits_indices=torch.tensor([2, 3]), target_logits_indices=torch.tensor([0, 1]))
    step = nuclei.step_nuclei([call(2, 100), call(2, 200)], 4, metadata)
    assert step.ids[:, 0].tolist() == [200, 201, 100, 101]
    assert nuclei.step_nuclei([call(4, 0)], 4, None).ids[:, 0].tolist() == [0, 1, 2, 3]
    # calls that are not the sampler's for this step: no nuclei
    assert nuclei.step_nuclei([call(3, 0)], 4, None) is None
    assert nuclei.step_nuclei([call(2, 100)], 4, metadata) is None
    assert nuclei.step_nuclei([call(2, 100), call(2, 200)], 4, SimpleNamespace(num_draft_tokens=[2, 0])) is None
    overlapping = SimpleNamespace(bonus_logits_indices=torch.tensor([1, 3]), target_logits_indices=torch.tensor([0, 1]))
    assert nuclei.step_nuclei([call(2, 100), call(2, 200)], 4, overlapping) is None


def test_a_proposer_fed_from_the_sampler_builds_the_same_stores(probe_cut, monkeypatch):
    """Two proposers see the same steps; one's runner samples as vLLM's CPU sampler does (bonus rows
    cut first, then the draft positions), the other's cuts nothing: same store contents, and the
    first never computed p's top-k itself."""
    from test_vllm import FakeRunner, _fake_config, _vllm_params

    from stand_runtime.drafters import feeds
    from stand_runtime.vllm import cpu032
    from stand_runtime.vllm.proposer import StandProposer

    monkeypatch.setattr(cpu032, "INSTALLED", True)  # the runner access reads nuclei only where the patch set is in

    class Runner(FakeRunner):
        cuts = False

        def _sample(self, logits, spec_decode_metadata):
            self.sampled_with.append(logits.shape)
            top_p = torch.full((len(self.input_batch.req_ids),), 0.9)
            if not self.cuts:
                pass
            elif spec_decode_metadata is None:
                probe_cut(logits / 0.7, None, top_p)
            else:
                counts = spec_decode_metadata.num_draft_tokens
                probe_cut(logits[spec_decode_metadata.bonus_logits_indices] / 0.7, None, top_p)
                probe_cut(logits[spec_decode_metadata.target_logits_indices] / 0.7, None,
                          top_p.repeat_interleave(torch.tensor(counts)))
            return "sampled"

        def step_with(self, logits, metadata, sampled, lengths, tokens):
            assert self._sample(logits, metadata) == "sampled"
            return self.drafter.propose(sampled, np.array(lengths), tokens)

    def step_metadata(counts):
        if counts is None:
            return None
        ends = np.cumsum([c + 1 for c in counts])
        bonus = torch.tensor(ends - 1)
        target = torch.tensor([e - 1 - c + j for e, c in zip(ends, counts) for j in range(c)], dtype=torch.int64)
        return SimpleNamespace(num_draft_tokens=counts, bonus_logits_indices=bonus, target_logits_indices=target)

    vocab, prompt = 64, [5, 6, 5, 7]
    requests = [(name, prompt, _vllm_params(0.7, 0.9, seed=i)) for i, name in enumerate("abc")]
    runners = [Runner(requests), Runner(requests)]
    runners[0].cuts = True
    proposers = [StandProposer(_fake_config(k=3, vocab=vocab)) for _ in runners]
    for runner, proposer in zip(runners, proposers):
        runner.load_model(proposer)
    computed = []
    original_top = feeds.LogitsFeed.top
    monkeypatch.setattr(feeds.LogitsFeed, "top", lambda self, *a: computed.append(a) or original_top(self, *a))
    generator = torch.Generator().manual_seed(3)
    for index, (runner, proposer) in enumerate(zip(runners, proposers)):
        tokens = np.zeros((3, 64), dtype=np.int32)
        tokens[:, :4] = prompt
        lengths, counts, drafts = [4] * 3, None, [[]] * 3
        generator.manual_seed(3)
        for _ in range(12):
            rows = 3 if counts is None else sum(counts) + 3
            logits = torch.randn(rows, vocab, generator=generator) * 3
            sampled = []
            for i in range(3):
                accepted = drafts[i][: int(torch.randint(0, len(drafts[i]) + 1, (1,), generator=generator))]
                out = [*accepted, int(torch.randint(0, vocab, (1,), generator=generator))]
                tokens[i, lengths[i]: lengths[i] + len(out)] = out
                lengths[i] += len(out)
                sampled.append(out)
            drafts = runner.step_with(logits, step_metadata(counts), sampled, lengths, tokens)
            counts = [len(d) for d in drafts]
        if index == 0:
            assert computed == [], "the sampling runner's steps were fed from the sampler's nuclei"
    assert computed, "the other runner's steps were computed by the proposer"
    stores = [proposer.stores.get(tuple(prompt)) for proposer in proposers]
    contexts = sorted(stores[1].contexts())
    assert contexts and sorted(stores[0].contexts()) == contexts
    for context in contexts:
        ours, theirs = (store.lookup(context) for store in stores)
        assert list(ours.id_list) == list(theirs.id_list)
        assert np.allclose(ours.prob_list, theirs.prob_list, atol=1e-5)
