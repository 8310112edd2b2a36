"""Drafter-invariant verification (docs/seeds.md): a seeded run of any method, tree, batch shape or
timing emits plain decoding's tokens for that seed; and plain Gumbel-max sampling has the target's law."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stand_runtime import (HFBackend, Method, NGramStore, RowSpec, SamplingParams, SizingSession, decode_rows, generate,
                           generate_batch)
from stand_runtime.engine.backend import DecodeRequest
from stand_runtime.engine.batch_sampling import sample_recorded
from stand_runtime.randomness import PositionNoise
from stand_runtime.store.native_store import NativeNGramStore
from stand_runtime.target.sampling import TargetRow
from stand_runtime.verify import gumbel_max_token, verify_invariant
from test_allocation import flat_profile

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [1, 2, 3, 1, 2, 3, 1, 2], [9, 4, 9, 4, 9]]
SAMPLINGS = {"T0.6 top-p 0.95": SamplingParams(temperature=0.6, top_p=0.95),
             "T1.0": SamplingParams(temperature=1.0, top_p=1.0),
             "T0.8 top-k 5": SamplingParams(temperature=0.8, top_p=1.0, top_k=5)}
TOKENS = 40


def plain(model, prompt, params, seed, tokens=TOKENS):
    return generate(model, None, prompt, method="ar", sampling=params, max_new_tokens=tokens, seed=seed,
                    eos_token_ids=[]).tokens


def accepted(results) -> int:
    return sum(sum(r.stats.accepted_per_step) for r in results)


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("name,tree", [("stand", None), ("stand", "dynamic-20"), ("stand", "heuristic-80"),
                                       ("stand-det", "heuristic-80"), ("stand-det", "dynamic-12"), ("pld", None),
                                       ("suffix", None), ("recycle", None)])
def test_every_method_gives_plain_decodings_tokens_for_a_seed(tiny_qwen2, name, tree, sampling):
    """One sequence per prompt, three seeds: the method's tokens are plain decoding's, and it drafted
    tokens that were accepted (the identity is not plain decoding in disguise)."""
    params = SAMPLINGS[sampling]
    method = Method.parse(name, tree, tiny_qwen2)
    assert method.verification == "invariant"
    results = []
    for seed, prompt in enumerate(PROMPTS):
        result = generate(tiny_qwen2, None, prompt, method=method, sampling=params, max_new_tokens=TOKENS, seed=seed,
                          eos_token_ids=[])
        assert result.tokens == plain(tiny_qwen2, prompt, params, seed), (name, tree, seed)
        results.append(result)
    assert accepted(results) > 0, f"{name} [{tree}] accepted no draft"


@pytest.mark.parametrize("batch_verify", [False, True])
def test_batches_continuous_batching_and_mixed_samplings_give_plain_tokens(tiny_qwen2, batch_verify):
    """Rows of one prompt, rows of several prompts with a sampling each (greedy among them), and a
    batch narrower than its rows (continuous batching): every row is plain decoding with its seed, on
    the host walk and on the batched verifier alike."""
    samplings = list(SAMPLINGS.values()) + [SamplingParams(temperature=0)]
    method = Method.parse("stand", "dynamic-20", tiny_qwen2, batch=4).ablated(batch_verify=batch_verify)
    rows = generate_batch(tiny_qwen2, None, PROMPTS[:2], n=3, method=method, sampling=samplings[0],
                          max_new_tokens=TOKENS, seed=11, eos_token_ids=[])
    assert [r.tokens for r in rows] == [plain(tiny_qwen2, PROMPTS[i // 3], samplings[0], 11 + i) for i in range(6)]
    specs = [RowSpec(PROMPTS[i % 3], samplings[i % 4], 20 + i, TOKENS - 5 * (i % 3), None, (), ()) for i in range(6)]
    mixed = decode_rows(tiny_qwen2, None, specs, method=method, slots=3)
    assert [r.tokens for r in mixed] == [plain(tiny_qwen2, s.prompt, s.sampling, s.seed, s.max_new_tokens)
                                         for s in specs]
    assert accepted(rows) > 0 and accepted(mixed) > 0


def test_native_and_python_drafting_give_the_same_tokens(tiny_qwen2):
    """The native store drafts with the same position noise (C++ computes the hash): the same drafts, so
    the same acceptance, and plain decoding's tokens either way."""
    params = SAMPLINGS["T0.6 top-p 0.95"]
    method = Method.parse("stand", "dynamic-20", tiny_qwen2)
    outs = {}
    for kind, store in (("python", NGramStore(max_n=8)), ("native", NativeNGramStore(max_n=8))):
        outs[kind] = [generate(tiny_qwen2, None, prompt, method=method, sampling=params, max_new_tokens=TOKENS,
                               seed=3, store=store, eos_token_ids=[]) for prompt in PROMPTS]
    assert [r.tokens for r in outs["python"]] == [r.tokens for r in outs["native"]] == \
        [plain(tiny_qwen2, prompt, params, 3) for prompt in PROMPTS]
    assert [r.stats.accepted_per_step for r in outs["python"]] == [r.stats.accepted_per_step for r in outs["native"]]
    assert accepted(outs["native"]) > 0


def test_a_seed_repeats_under_a_perturbed_latency_profile(tiny_qwen2, monkeypatch):
    """The value-sized tree drafts other sizes when the latency profile changes between two runs; the
    tokens stay those of the seed (plain decoding's), where recursive rejection would drift."""
    params = SAMPLINGS["T0.6 top-p 0.95"]
    runs = []
    for slope in (0.001, 0.05):
        flat_profile(monkeypatch, slope)
        method, sizing = Method.parse("stand", "dynamic-auto-20", tiny_qwen2, batch=2), SizingSession.for_model(tiny_qwen2)
        rows = generate_batch(tiny_qwen2, None, PROMPTS[:1], n=2, method=method, sampling=params, max_new_tokens=TOKENS,
                              seed=5, eos_token_ids=[], sizing=sizing)
        runs.append(rows)
    assert [r.tokens for r in runs[0]] == [r.tokens for r in runs[1]] == \
        [plain(tiny_qwen2, PROMPTS[0], params, 5 + i) for i in range(2)]
    drafted = [[r.stats.drafted_per_step for r in rows] for rows in runs]
    assert drafted[0] != drafted[1], "the perturbed profile should have sized other drafts"
    assert accepted(runs[0]) > 0 and accepted(runs[1]) > 0


def test_search_backends_and_the_calibration_sampler_give_plain_tokens(tiny_qwen2):
    """Best-of-N through the search backend (batched, continuous) and calibration's recording plain
    sampler give, per seed, the tokens of generate(method='ar')."""
    params = SAMPLINGS["T1.0"]
    backend = HFBackend(tiny_qwen2, None, Method.parse("stand", None, tiny_qwen2, batch=2), max_batch=2)
    requests = [DecodeRequest(prompt, n=3, max_new_tokens=TOKENS, sampling=params, seed=100 * i)
                for i, prompt in enumerate(PROMPTS[:2])]
    completions = backend.generate(requests)
    assert [[c.tokens for c in request] for request in completions] == \
        [[plain(tiny_qwen2, PROMPTS[i], params, 100 * i + j) for j in range(3)] for i in range(2)]
    recorded = sample_recorded(tiny_qwen2, PROMPTS, params, TOKENS, [], [7, 8, 9], batch_size=2)
    assert [r.tokens for r in recorded] == [plain(tiny_qwen2, prompt, params, 7 + i) for i, prompt in enumerate(PROMPTS)]


def test_rejection_verification_stays_available_and_differs_per_seed(tiny_qwen2):
    """The STAND paper's recursive rejection sampling is the other rule: its seeded output is its own
    (another coupling), while the invariant rule's is plain decoding's."""
    params = SAMPLINGS["T1.0"]
    paper = Method.parse("stand", "dynamic-20", tiny_qwen2, verification="rejection")
    invariant = Method.parse("stand", "dynamic-20", tiny_qwen2)
    assert paper.verification == "rejection" and paper != invariant
    differ = 0
    for seed, prompt in enumerate(PROMPTS):
        ours = generate(tiny_qwen2, None, prompt, method=invariant, sampling=params, max_new_tokens=TOKENS, seed=seed,
                        eos_token_ids=[]).tokens
        theirs = generate(tiny_qwen2, None, prompt, method=paper, sampling=params, max_new_tokens=TOKENS, seed=seed,
                          eos_token_ids=[]).tokens
        assert ours == plain(tiny_qwen2, prompt, params, seed)
        differ += ours != theirs
    assert differ > 0


def test_a_draft_never_changes_the_verified_tokens():
    """verify_invariant on random p along a chain: whatever tokens are drafted (the target's own
    samples, wrong ones, or none), the emitted path is the Gumbel-max tokens, up to the first miss."""
    from stand_runtime.trees.draft import DraftBuilder

    rng = np.random.default_rng(0)
    noise = PositionNoise.seeded(1)
    for trial in range(200):
        p = [rng.dirichlet(np.full(6, 0.3)) for _ in range(5)]
        rows = [TargetRow.dense(row) for row in p]
        truth = [gumbel_max_token(rows[d], noise, 10 + d) for d in range(5)]
        guess = [t if rng.random() < 0.6 else int(rng.integers(6)) for t in truth[:4]]
        builder, node = DraftBuilder(3), 0
        for token in guess:
            node = builder.add(node, token)
        verification = verify_invariant(builder.build(False), lambda position: rows[position], noise, 10)
        hits = next((d for d, (g, t) in enumerate(zip(guess, truth)) if g != t), 4)
        assert verification.accepted == list(range(1, hits + 1))
        assert verification.token == truth[hits]


def test_gumbel_max_sampling_has_the_targets_law():
    """The engine's plain draw (gumbel_max_token over a nucleus, position noise fresh per position) and
    the recording sampler's (a dense row) are draws of p: chi-square over 20,000 positions."""
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    ids = np.array([11, 3, 40, 7, 25, 2])
    noise = PositionNoise.seeded(2026)
    sparse, dense = TargetRow(p, ids), np.zeros(50)
    dense[ids] = p
    for row in (sparse, TargetRow.dense(dense)):
        draws = [gumbel_max_token(row, noise, t) for t in range(20_000)]
        counts = np.array([draws.count(int(v)) for v in ids])
        assert sum(counts) == len(draws)  # never a token outside p's support
        assert stats.chisquare(counts, p * len(draws)).pvalue > 1e-3


def test_plain_decodings_law_end_to_end(tiny_qwen2):
    """Two tokens of plain decoding, 600 seeds in one batch: chi-square against the exact law of the
    continuation (the Gumbel-max draw through the engine has the target's law)."""
    from test_engine import exact_continuations

    params = SamplingParams(temperature=1.0, top_p=0.9)
    prompt = PROMPTS[0]
    exact = exact_continuations(tiny_qwen2, prompt, params, 2)
    rows = generate_batch(tiny_qwen2, None, [prompt], n=600, method="ar", sampling=params, max_new_tokens=2, seed=0,
                          eos_token_ids=[])
    seen: dict = {}
    for row in rows:
        seen[tuple(row.tokens)] = seen.get(tuple(row.tokens), 0) + 1
    assert set(seen) <= set(exact)
    keys = sorted(exact, key=exact.get, reverse=True)
    common = [k for k in keys if exact[k] * len(rows) >= 5]
    observed = [seen.get(k, 0) for k in common] + [len(rows) - sum(seen.get(k, 0) for k in common)]
    expected = [exact[k] * len(rows) for k in common] + [len(rows) * (1 - sum(exact[k] for k in common))]
    assert stats.chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize("strategy", ["best-of-n", "dvts"])
def test_a_seeded_search_finds_what_plain_decodings_search_finds(tiny_qwen2, strategy):
    """Best-of-N and DVTS (rounds of candidates scored by the verifier, problems in flight together)
    through STAND give the texts plain decoding's search gives for the same seed: the verifier scores
    the same candidates, so it keeps the same steps."""
    from conftest import DigitsTokenizer
    from treeopt.data.datasets import Prompt
    from treeopt.evaluate.search import SearchSettings, run_search
    from treeopt.evaluate.verifiers import ConfidenceVerifier

    tokenizer = DigitsTokenizer()
    problems = [Prompt("a", "3 1 4 1 5 3 1 4 1 5"), Prompt("b", "2 7 1 8 2 8 2 7 1 8")]
    settings = SearchSettings(strategy, n=4, subtrees=2 if strategy == "dvts" else 1, max_new_tokens=24,
                              step_tokens=6, max_rounds=4, sampling=SAMPLINGS["T1.0"], seed=3, in_flight=2)
    found = {}
    for name in ("ar", "stand"):
        backend = HFBackend(tiny_qwen2, tokenizer, Method.parse(name, None, tiny_qwen2, batch=4), max_batch=4)
        found[name] = run_search(backend, tokenizer, problems, settings, ConfidenceVerifier(), 16)
    assert [r.texts for r in found["stand"]] == [r.texts for r in found["ar"]]
    assert sum(r.tokens for r in found["stand"]) == sum(r.tokens for r in found["ar"])
    assert sum(r.forwards for r in found["stand"]) < sum(r.forwards for r in found["ar"])  # drafts were accepted
