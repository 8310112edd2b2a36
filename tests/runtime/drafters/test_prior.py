"""The target's successor prior (stand_runtime/drafters/prior.py): measured exactly, cached, filling the
contexts a store lacks, and STAND drafting with it still lossless (greedy token for token, sampling by
chi-square)."""

import os

import numpy as np
import pytest

from conftest import DigitsTokenizer, full_logits, tiny_model
from stand_runtime import Method, SamplingParams, StandError
from stand_runtime.errors import StandWarning
from stand_runtime.randomness import RandomStream
from stand_runtime.drafters.feeds import LogitsFeed, store_observation
from stand_runtime.drafters import prior as prior_module
from stand_runtime.store.native_store import NativeNGramStore
from stand_runtime.store.ngram_store import NGramStore
from stand_runtime.drafters.prior import SuccessorPrior, cached_prior, measure_prior, method_prior, prior_context

SAMPLING = SamplingParams(temperature=0.8, top_p=0.95)
VOCAB = 16


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", vocab=VOCAB, seed=3)


@pytest.fixture(scope="module")
def prior(model):
    return measure_prior(model, [3, 5, 7], SAMPLING, VOCAB)


@pytest.mark.parametrize("context", [[3, 5, 7], []])
@pytest.mark.parametrize("params", [SAMPLING, SamplingParams(temperature=0)])
def test_measured_rows_are_the_stores_observation_after_context_and_token(model, monkeypatch, context, params):
    """Row t is what the store would record after ``context + [t]`` (greedy: the softmax), in batches
    that split the vocabulary (the context's cache shared by each batch's rows)."""
    monkeypatch.setattr(prior_module, "BATCH", 5)
    measured = measure_prior(model, context, params, VOCAB)
    assert measured.ids.shape == measured.probs.shape == (VOCAB, 10)
    for token in range(VOCAB):
        logits = full_logits(model, context + [token])[-1:]
        ids, probs = store_observation(LogitsFeed(logits, params), [0], params)
        k = ids.shape[1]
        assert measured.ids[token, :k].tolist() == ids[0].tolist()
        assert np.allclose(measured.probs[token, :k], probs[0], atol=1e-5)
        assert (measured.probs[token, k:] == 0).all()


@pytest.mark.parametrize("store_class", [NGramStore, NativeNGramStore])
def test_fill_gives_a_missing_one_token_context_its_row_and_leaves_a_seen_one(prior, store_class):
    store = store_class(max_n=8)
    store.update((1, 4), [2], [1.0])
    seen = store.lookup((4,))
    assert prior.fill(store, 6) is True
    entry = store.lookup((6,))
    ids, probs = prior.row(6)
    assert entry.id_list == ids and np.allclose(entry.prob_list, probs) and entry.count == 1
    assert prior.fill(store, 6) is False  # now seen: left as it is
    if seen is not None:
        assert prior.fill(store, 4) is False and store.lookup((4,)).id_list == seen.id_list
    with pytest.raises(StandError, match="outside the successor prior"):
        prior.fill(store, VOCAB)


def test_prior_file_round_trip_and_bad_files(prior):
    again = SuccessorPrior.from_bytes(prior.to_bytes())
    assert (again.ids == prior.ids).all() and np.allclose(again.probs, prior.probs, atol=1e-7)
    with pytest.raises(StandError, match="not a successor prior file"):
        SuccessorPrior.from_bytes(b"not an npz")
    with pytest.raises(StandError, match="not a successor prior file"):
        SuccessorPrior.from_bytes(prior.to_bytes()[:1000])  # truncated: a bad zip
    repeated = prior.ids.copy()
    repeated[4, 1] = repeated[4, 0]  # a token twice in a row, both with mass
    flat = np.full_like(prior.probs, 0.0)
    flat[:, 0] = 1.0
    for ids, probs, reason in ((prior.ids, prior.probs * 3, "summing above 1"),
                               (prior.ids, -prior.probs, "negative"),
                               (repeated, np.where(prior.probs > 0, prior.probs, 0.01) / 2, "repeated within a row"),
                               (prior.ids[:, :0], prior.probs[:, :0], "shape"),
                               (prior.ids + VOCAB, flat, "token ids outside")):
        with pytest.raises(StandError, match=reason):
            SuccessorPrior.from_bytes(SuccessorPrior(ids, probs).to_bytes())
    assert SuccessorPrior.from_bytes(SuccessorPrior(prior.ids + VOCAB, flat).to_bytes(), id_bound=2 * VOCAB).vocab == VOCAB


def test_cached_prior_is_measured_once_and_again_when_corrupt(model, monkeypatch, tmp_path):
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prior_module, "_LOADED", {})
    measured = []
    real = prior_module.measure_prior
    monkeypatch.setattr(prior_module, "measure_prior", lambda *a, **k: measured.append(1) or real(*a, **k))
    announced = []
    first = cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB, on_batch=lambda done, total: announced.append(done))
    assert measured == [1] and announced == [0, VOCAB]
    (path,) = (tmp_path / "prior").glob("*.npz")
    monkeypatch.setattr(prior_module, "_LOADED", {})
    second = cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert measured == [1] and (second.ids == first.ids).all()
    path.write_bytes(b"garbage")
    monkeypatch.setattr(prior_module, "_LOADED", {})
    cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert measured == [1, 1]
    assert SuccessorPrior.from_bytes(path.read_bytes()).vocab == VOCAB
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("STAND_CACHE_DIR", str(blocked))
    monkeypatch.setattr(prior_module, "_LOADED", {})
    with pytest.warns(StandWarning, match="kept for this run only .cannot write .*: the next run measures it again"):
        again = cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert (again.ids == first.ids).all() and measured == [1, 1, 1]  # measured, not cached
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    other = SuccessorPrior(first.ids, first.probs, SamplingParams(temperature=0.3))
    path.write_bytes(other.to_bytes())  # a file of another distribution at this key: measured again
    monkeypatch.setattr(prior_module, "_LOADED", {})
    cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert measured == [1, 1, 1, 1] and SuccessorPrior.from_bytes(path.read_bytes()).serves(SAMPLING)
    path.unlink()
    os.mkfifo(path)  # a FIFO at the file's name: neither read nor written (either would wait for the other end)
    monkeypatch.setattr(prior_module, "_LOADED", {})
    with pytest.warns(StandWarning, match="not a regular file"):
        cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert measured == [1, 1, 1, 1, 1] and not path.is_file()


def test_a_cached_prior_without_its_distribution_is_taken_for_its_keys(model, monkeypatch, tmp_path):
    """A file written before priors recorded their distribution (an older cache) is read, not measured
    again, and recorded for the distribution its key names, in memory and in the file (``serve
    --prior`` hands vLLM the file): it no longer serves every request."""
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prior_module, "_LOADED", {})
    first = cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    (path,) = (tmp_path / "prior").glob("*.npz")
    path.write_bytes(SuccessorPrior(first.ids, first.probs).to_bytes())  # no distribution recorded
    monkeypatch.setattr(prior_module, "_LOADED", {})
    monkeypatch.setattr(prior_module, "measure_prior", lambda *a, **k: pytest.fail("measured again"))
    old = cached_prior(model, DigitsTokenizer(), SAMPLING, VOCAB)
    assert (old.ids == first.ids).all() and old.serves(SAMPLING)
    for again in (SuccessorPrior.from_bytes(old.to_bytes()), SuccessorPrior.from_bytes(path.read_bytes())):
        assert again.serves(SAMPLING) and not again.serves(SamplingParams(temperature=0.3, top_p=0.95))


def test_cached_prior_is_keyed_by_the_weights_not_the_folder(model, monkeypatch, tmp_path):
    """A model loaded from another folder (a moved cache) finds its prior; other weights do not."""
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    key = prior_module.prior_key(model, [1], SAMPLING, VOCAB)
    monkeypatch.setattr(model.config, "_name_or_path", "/somewhere/else", raising=False)
    assert prior_module.prior_key(model, [1], SAMPLING, VOCAB) == key
    assert prior_module.prior_key(tiny_model("llama", vocab=VOCAB, seed=4), [1], SAMPLING, VOCAB) != key
    assert prior_module.prior_key(model, [2], SAMPLING, VOCAB) != key
    assert prior_module.prior_key(model, [1], SamplingParams(temperature=0.5), VOCAB) != key


def test_a_top_k_that_keeps_every_token_shares_the_uncut_prior(model):
    """top-k >= the vocabulary cuts nothing: it is keyed and served as no top-k (not measured again)."""
    uncut = prior_module.prior_key(model, [1], SAMPLING, VOCAB)
    for top_k in (VOCAB, VOCAB + 1, 10**6):
        wide = SamplingParams(temperature=0.8, top_p=0.95, top_k=top_k)
        assert prior_module.prior_key(model, [1], wide, VOCAB) == uncut
    assert prior_module.prior_key(model, [1], SamplingParams(temperature=0.8, top_p=0.95, top_k=VOCAB - 1), VOCAB) != uncut
    prior = SuccessorPrior(np.zeros((VOCAB, 2), np.int32), np.zeros((VOCAB, 2), np.float32), SAMPLING)
    assert prior.serves(SamplingParams(temperature=0.8, top_p=0.95, top_k=10**6))
    assert not prior.serves(SamplingParams(temperature=0.8, top_p=0.95, top_k=4))


def test_measurement_names_non_finite_logits(model, monkeypatch):
    real = model.forward

    def broken(*args, **kwargs):
        out = real(*args, **kwargs)
        out.logits[0, -1, 0] = float("nan")
        return out

    monkeypatch.setattr(model, "forward", broken)
    with pytest.raises(StandError, match="not finite .* in the successor prior's measurement .tokens 0-"):
        measure_prior(model, [3], SAMPLING, VOCAB)


def test_interrupted_write_leaves_no_temporary_file(monkeypatch, tmp_path):
    from stand_runtime import files

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.write_bytes_atomic(tmp_path / "prior.npz", b"data")
    assert list(tmp_path.iterdir()) == []


def test_prior_context_and_which_methods_get_one(model):
    class Chat:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize, **template_kwargs):
            assert add_generation_prompt and not tokenize and messages[0]["content"] == "Hi"
            assert template_kwargs == {"date_string": prior_module.PRIOR_DATE}  # not today's: the key stays
            return "1 2 3"

        def encode(self, text, add_special_tokens):
            return [int(t) for t in text.split()]

    assert prior_context(Chat()) == [1, 2, 3]
    assert prior_context(DigitsTokenizer()) == []
    assert method_prior("suffix", model, DigitsTokenizer(), SAMPLING, VOCAB) is None
    assert method_prior("stand", model, DigitsTokenizer(), SAMPLING, VOCAB, enabled=False) is None
    assert method_prior("stand", model, None, SAMPLING, VOCAB) is None


def test_method_drafts_from_the_prior_and_refuses_a_prior_it_cannot_use(model, prior):
    method = Method.parse("stand", "dynamic-6", model, prior=prior)
    plain = Method.parse("stand", "dynamic-6", model)
    for drafting, drafts in ((method, True), (plain, False)):
        store = drafting.new_memory(VOCAB)
        assert len(store) == 0  # nothing up front
        draft = drafting.drafter(store, RandomStream.seeded(0), SAMPLING, VOCAB).draft([9], 3)
        assert (draft.num_nodes > 0) == drafts  # the root's context came from the prior, or nothing did
        assert (store.match((9,)) is not None) == drafts
    with pytest.raises(StandError, match="successor prior drafts for"):
        Method.parse("pld", None, model, prior=prior)
    with pytest.raises(StandError, match="vocabulary"):
        method.drafter(None, RandomStream.seeded(0), SAMPLING, VOCAB - 1)




def test_bench_gives_stand_the_prior_unless_told_noprior(model, monkeypatch, tmp_path):
    from treeopt.data.datasets import Prompt
    from treeopt.evaluate.bench import parse_methods, run_bench

    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    specs = parse_methods("stand,stand+noprior", ["dynamic-6"])
    assert [s.label for s in specs] == ["stand[dynamic-6]", "stand[dynamic-6]+noprior"]
    results = run_bench(model, DigitsTokenizer(), [Prompt("0", "1 2 3 1 2")], specs, sampling=SAMPLING,
                        max_new_tokens=8, seed=0, priors=True)
    assert [r.tokens for r in results] == [8, 8]
    assert len(list((tmp_path / "prior").glob("*.npz"))) == 1
    assert results[0].prior and not results[1].prior
    with pytest.raises(StandError):
        parse_methods("pld+noprior", None)
    (both,) = parse_methods("stand+rejected+noprior", ["dynamic-6"])
    assert both.feed_rejected and not both.prior and both.label == "stand[dynamic-6]+rejected+noprior"


def test_vllm_reads_a_prior_file_once_while_it_is_unchanged(tmp_path, monkeypatch):
    """vLLM's engine checks the proposer's prior option and then loads the prior: one read of the file;
    a rewritten file is read again."""
    from stand_runtime.vllm import options

    path = tmp_path / "prior.npz"
    ids, probs = np.zeros((8, 10), dtype=np.int64), np.zeros((8, 10))
    ids[:, 0], probs[:, 0] = 3, 1.0
    path.write_bytes(SuccessorPrior(ids, probs).to_bytes())
    reads = []
    real = SuccessorPrior.from_bytes.__func__
    monkeypatch.setattr(SuccessorPrior, "from_bytes", classmethod(lambda cls, data, *a: reads.append(1) or real(cls, data, *a)))
    first = options.load_prior(str(path))
    assert options.read_options(f'{{"prior": "{path}"}}')["prior"] == str(path)
    assert options.load_prior(str(path)) is first and len(reads) == 1
    ids[:, 0] = 4
    path.write_bytes(SuccessorPrior(ids, probs).to_bytes() + b"")
    os.utime(path, ns=(1, 1))  # another modification time
    assert options.load_prior(str(path)).row(0)[0] == [4] and len(reads) == 2
