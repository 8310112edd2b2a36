"""The batched verifier (stand_runtime.verify_batch, docs/algorithms.md §4.7) against the reference walk.

Same uniforms, same outcomes: many random batches of trees (stochastic drafts with q, deterministic
drafts with and without q, copied children, lone roots, rows of different widths) and random p
(sparse nucleus, dense, top-k, wide nuclei that fall back to the walk) are verified by both
verifiers from equally seeded streams; the outcomes and the streams' next draws must agree. The
exact law (conftest.draw_law) shows the emitted token is distributed as p, and the engine decodes
token for token as plain decoding (greedy) and by the same law (sampling) with it switched on.
"""

import itertools
from unittest.mock import patch

import numpy as np
import pytest
import torch

from stand_runtime import SamplingParams, generate, generate_batch
from stand_runtime.errors import StandError
from stand_runtime.method import Method
from stand_runtime.randomness import PositionNoise, RandomStream
from stand_runtime.target.sampling import target_probs, target_row
from stand_runtime.trees.draft import Draft, DraftBuilder
from stand_runtime.verify import gumbel_max_token, verify_greedy, verify_invariant, verify_sampling
import stand_runtime.verify_batch as verify_batch_module
from stand_runtime.verify_batch import verify_batch, verify_rows
from conftest import draw_law

KINDS = ("stochastic", "deterministic", "deterministic-q", "copied")


def random_draft(rng: np.random.Generator, vocab: int, nodes: int, kind: str) -> Draft:
    """A random tree of up to ``nodes`` drafted nodes: per node up to 3 children, with q (a random
    support of distinct tokens, children a random without-replacement order of it) unless the kind
    is deterministic, and (kind "copied") a copied child after the drawn ones now and then."""
    builder = DraftBuilder(int(rng.integers(vocab)))
    frontier = [0]
    while frontier and len(builder) <= nodes:
        node = frontier.pop(0)
        m = int(rng.integers(0, 4)) if node else int(rng.integers(1, 5))
        m = min(m, nodes + 1 - len(builder))
        if m == 0:
            continue
        tokens = rng.choice(vocab, size=m + int(rng.integers(0, 4)), replace=False)
        if kind == "deterministic":
            kids = [builder.add(node, int(t)) for t in tokens[:m]]
        else:
            probs = rng.dirichlet(np.full(len(tokens), 0.5))
            builder.set_distribution(node, tokens.astype(np.int64), probs)
            kids = [builder.add(node, int(tokens[s]), s) for s in range(m)]
            if kind == "copied" and rng.random() < 0.6 and len(builder) <= nodes:
                kids.append(builder.add_copy(node, int(rng.choice(np.setdiff1d(np.arange(vocab), tokens[:m])))))
        frontier += kids
    return builder.build(stochastic=kind in ("stochastic", "copied"))


def random_logits(rng: np.random.Generator, draft: Draft, vocab: int, flat: float) -> torch.Tensor:
    """``[n, vocab]`` logits that favour the drafted tokens (so paths go deep); a row is flat (a wide
    nucleus) with probability ``flat``."""
    logits = torch.as_tensor(rng.normal(size=(len(draft.tokens), vocab)) * 3.0, dtype=torch.float32)
    for v, kids in enumerate(draft.children):
        for c in kids:
            logits[v, draft.tokens[c]] += float(rng.normal(7.0, 2.0))
        if rng.random() < flat:
            logits[v] = torch.as_tensor(rng.normal(size=vocab) * 0.01, dtype=torch.float32)
    return logits


def reference(drafts, logits, params, streams):
    if params.greedy:
        return [verify_greedy(d, lambda v, x=x: int(torch.argmax(x[v]))) for d, x in zip(drafts, logits)]
    return [verify_sampling(d, lambda v, x=x: target_row(x[v], params), s) for d, x, s in zip(drafts, logits, streams)]


def padded_views(logits):
    """The rows' logits as slices of one padded ``[B, N, vocab]`` tensor (as the batched forward gives them)."""
    padded = torch.full((len(logits), max(len(x) for x in logits) + 2, logits[0].shape[1]), float("nan"))
    for b, x in enumerate(logits):
        padded[b, : len(x)] = x
    return [padded[b, : len(x)] for b, x in enumerate(logits)]


def assert_both_agree(drafts, logits, params, seed):
    """Both verifiers, equally seeded streams (a small block: lends cross refills): same outcomes, and
    the streams go on with the same uniforms and Gumbel noise. Returns the outcomes."""
    ours = [RandomStream.seeded(seed + b, block=16) for b in range(len(drafts))]
    theirs = [RandomStream.seeded(seed + b, block=16) for b in range(len(drafts))]
    got = verify_batch(drafts, padded_views(logits) if seed % 2 else logits, params, ours)
    want = reference(drafts, logits, params, theirs)
    assert got == want
    for a, b in zip(ours, theirs):  # the same uniforms consumed, the generator where the walk left it
        assert [a.uniform() for _ in range(70)] == [b.uniform() for _ in range(70)]
        assert np.array_equal(a.gumbel(5), b.gumbel(5))
    return got


PARAMS = [SamplingParams(0.6, 0.95), SamplingParams(1.0, 1.0), SamplingParams(0.8, 1.0, 20),
          SamplingParams(1.2, 0.9, 50), SamplingParams(0.0)]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"T{p.temperature}-p{p.top_p}-k{p.top_k}")
@pytest.mark.parametrize("vocab", [30, 1200])
def test_batched_outcomes_equal_the_reference_walk(params, vocab):
    rng = np.random.default_rng(vocab + int(params.temperature * 10) + params.top_k)
    accepted = 0
    for trial in range(16):
        batch = int(rng.integers(1, 6))
        kinds = rng.choice(KINDS, size=batch)
        drafts = [Draft.root_only(3) if rng.random() < 0.15 else
                  random_draft(rng, vocab, int(rng.integers(1, 30)), kind) for kind in kinds]
        logits = [random_logits(rng, d, vocab, flat=0.05) for d in drafts]
        accepted += sum(len(v.accepted) for v in assert_both_agree(drafts, logits, params, seed=100 * trial + trial % 2))
    assert accepted > 16  # paths went past the roots


@pytest.mark.parametrize("params", [p for p in PARAMS if not p.greedy], ids=lambda p: f"T{p.temperature}-p{p.top_p}-k{p.top_k}")
def test_drafter_invariant_batches_equal_the_reference_walk(params):
    """Drafter-invariant verification on the device (position noise in torch) gives each row's
    verify_invariant, for drafts whose tokens are often the target's own Gumbel-max samples (so paths
    go deep), on padded views of one forward; wide nuclei fall back to the walk."""
    rng = np.random.default_rng(int(params.temperature * 10) + params.top_k)
    accepted = 0
    for trial in range(12):
        vocab = int(rng.choice([30, 1200]))
        drafts = [random_draft(rng, vocab, int(rng.integers(1, 25)), str(rng.choice(KINDS))) for _ in range(4)]
        logits = [random_logits(rng, d, vocab, flat=0.05) for d in drafts]
        noises = [PositionNoise.seeded(trial * 10 + b) for b in range(len(drafts))]
        bases = [int(rng.integers(1, 50)) for _ in drafts]
        for b, draft in enumerate(drafts):  # plant the target's samples along the first child chain
            node = 0
            while draft.children[node]:
                child = draft.children[node][0]
                if rng.random() < 0.8:
                    draft.tokens[child] = gumbel_max_token(target_row(logits[b][node], params), noises[b],
                                                           bases[b] + int(draft.depths[node]))
                node = child
        want = [verify_invariant(d, lambda v, x=x: target_row(x[v], params), n, base)
                for d, x, n, base in zip(drafts, logits, noises, bases)]
        got = verify_batch(drafts, padded_views(logits), params, noises=[n.at(base) for n, base in zip(noises, bases)])
        assert got == want
        accepted += sum(len(v.accepted) for v in got)
    assert accepted > 12


def test_wide_nuclei_on_the_path_fall_back_to_the_walk_with_the_same_uniforms(monkeypatch):
    walks = []
    monkeypatch.setattr(verify_batch_module, "verify_sampling", lambda *a: walks.append(1) or verify_sampling(*a))
    rng = np.random.default_rng(7)
    params = SamplingParams(1.0, 0.95)
    for trial in range(6):
        drafts = [random_draft(rng, 2000, 12, kind) for kind in KINDS]
        logits = [random_logits(rng, d, 2000, flat=0.5) for d in drafts]
        assert_both_agree(drafts, logits, params, seed=trial)
    assert 0 < len(walks) < 24  # some rows met a wide nucleus on their path, not all


def test_greedy_argmax_ties_take_the_first_index_as_the_walk_does():
    builder = DraftBuilder(0)
    a = builder.add(0, 5)
    builder.add(0, 2)
    builder.add(a, 7)
    builder.add(a, 4)
    draft = builder.build(stochastic=False)
    logits = torch.zeros(len(draft.tokens), 10)
    logits[0, [2, 5]] = 3.0  # argmax 2 (first index): the second child, a leaf
    logits[1, [4, 7]] = 3.0
    logits[2:] = 1.0  # every token ties: argmax 0
    got = verify_batch([draft, draft], [logits, logits.flip(-1)], SamplingParams(0.0))
    assert got == reference([draft, draft], [logits, logits.flip(-1)], SamplingParams(0.0), None)
    assert got[0].accepted == [2] and got[0].token == 0 and got[0].bonus


def test_a_fully_drafted_nucleus_is_never_rejected():
    """p on two tokens, both drafted (q = p): the residual is empty, so one child is always accepted."""
    builder = DraftBuilder(0)
    builder.set_distribution(0, np.array([3, 8]), np.array([0.5, 0.5]))
    builder.add(0, 3, 0)
    builder.add(0, 8, 1)
    draft = builder.build(stochastic=True)
    logits = torch.full((3, 12), -30.0)
    logits[0, [3, 8]] = 0.0
    for seed in range(20):
        got = assert_both_agree([draft], [logits], SamplingParams(1.0, 1.0, 2), seed)
        assert len(got[0].accepted) == 1


def test_rows_of_different_sampling_are_verified_by_their_own_p():
    rng = np.random.default_rng(3)
    drafts = [random_draft(rng, 50, 10, kind) for kind in KINDS]
    logits = [random_logits(rng, d, 50, flat=0.0) for d in drafts]
    params = [SamplingParams(0.0), SamplingParams(0.7, 0.9), SamplingParams(0.0), SamplingParams(1.0, 1.0)]
    ours, theirs = [RandomStream.seeded(b) for b in range(4)], [RandomStream.seeded(b) for b in range(4)]
    want = [reference([d], [x], p, [s])[0] for d, x, p, s in zip(drafts, logits, params, theirs)]
    assert verify_rows(drafts, logits, params, ours) == want


def test_non_finite_logits_on_the_path_are_an_error_off_it_are_not():
    builder = DraftBuilder(0)
    builder.add(0, 1)
    builder.add(0, 2)
    draft = builder.build(stochastic=False)
    logits = torch.full((3, 6), -5.0)
    logits[0, 1] = 5.0  # the walk goes to node 1, never to node 2
    logits[2] = float("nan")
    for params in (SamplingParams(0.0), SamplingParams(1.0, 0.9)):
        assert_both_agree([draft], [logits], params, seed=1)
        broken = logits.clone()
        broken[1] = float("nan")
        with pytest.raises(StandError, match="draft node 1 .*not finite"):
            verify_batch([draft], [broken], params, [RandomStream.seeded(0)])


def test_lent_uniforms_given_back_leave_the_stream_as_one_by_one_draws():
    for used in range(0, 9):
        lending, drawing = RandomStream.seeded(5, block=4), RandomStream.seeded(5, block=4)
        for _ in range(3):
            lending.uniform(), drawing.uniform()
        values = lending.lend_uniforms(8)
        lending.give_back_uniforms(8 - used)
        assert values[:used].tolist() == [drawing.uniform() for _ in range(used)]
        assert [lending.uniform() for _ in range(9)] == [drawing.uniform() for _ in range(9)]
        assert np.array_equal(lending.gumbel(6), drawing.gumbel(6))
    stream = RandomStream.seeded(1)
    with pytest.raises(StandError, match="none were lent"):
        stream.give_back_uniforms(1)
    stream.lend_uniforms(2)
    with pytest.raises(StandError, match="2 were lent"):
        stream.give_back_uniforms(3)


def batched_law(run) -> dict:
    """The exact law of ``run()`` when its randomness goes through the batched verifier's
    :func:`stand_runtime.verify_batch.sample_indices` (conftest.draw_law for tensors): each row of each
    call is one draw; every index of positive weight is taken in turn, checked to be what the real
    function gives at the midpoint of its CDF interval, and weighted by its share."""
    real = verify_batch_module.sample_indices
    law, pending = {}, [()]
    while pending:
        script, state = list(pending.pop()), {"at": 0, "prob": 1.0}

        def choose(weights, uniforms):
            out = []
            for row in weights.tolist():
                w = np.asarray(row)
                at = state["at"]
                state["at"] += 1
                if at == len(script):
                    options = np.flatnonzero(w > 0).tolist()
                    pending.extend(tuple(script) + (o,) for o in options[1:])
                    script.append(options[0])
                index = script[at]
                cdf = np.cumsum(w)
                middle = ((cdf[index - 1] if index else 0.0) + cdf[index]) / 2 / cdf[-1]
                assert int(real(torch.tensor([row]), torch.tensor([middle]))[0]) == index
                state["prob"] *= w[index] / cdf[-1]
                out.append(index)
            return torch.tensor(out, dtype=torch.long, device=weights.device)

        with patch.object(verify_batch_module, "sample_indices", choose):
            key = run()
        law[key] = law.get(key, 0.0) + state["prob"]
    return law


def small_tree(stochastic: bool, order=(0, 1, 2)) -> Draft:
    """Root with three children from q over tokens 1, 2, 4 (drawing ``order``; the third copied when
    deterministic), the first with two children of its own, over a vocabulary of 6."""
    q_ids, q = np.array([1, 2, 4]), np.array([0.5, 0.3, 0.2])
    builder = DraftBuilder(0)
    builder.set_distribution(0, q_ids, q)
    kids = [builder.add(0, int(q_ids[s]), s) for s in order[:2]]
    if stochastic:
        builder.add(0, int(q_ids[order[2]]), order[2])
    else:
        builder.add_copy(0, int(q_ids[order[2]]))
    builder.set_distribution(kids[0], np.array([3, 5, 0]), np.array([0.6, 0.3, 0.1]))
    builder.add(kids[0], 3, 0)
    builder.add(kids[0], 5, 1)
    return builder.build(stochastic=stochastic)


@pytest.mark.parametrize("params", [SamplingParams(1.0, 1.0), SamplingParams(0.7, 0.8)], ids=["dense", "nucleus"])
def test_exact_law_equals_the_walks_and_emits_p(params):
    logits = torch.tensor([[0.1, 1.0, 0.3, -1.0, 0.7, -0.2]] * 6) + torch.arange(6.0)[:, None] * 0.1
    row, p = target_row(logits[0], params), np.zeros(6)  # p as the verifiers hold it (float64)
    p[np.arange(6) if row.ids is None else row.ids] = row.probs / row.total
    assert np.abs(p - target_probs(logits[0], params).numpy()).max() < 1e-6
    orders = list(itertools.permutations(range(3)))
    q = np.array([0.5, 0.3, 0.2])
    first = np.zeros(6)
    for stochastic in (True, False):
        for order in orders if stochastic else [(0, 1, 2)]:
            draft = small_tree(stochastic, order)
            rows = logits[: len(draft.tokens)]
            ours = batched_law(lambda: _key(verify_batch([draft], [rows], params, [RandomStream.seeded(0)])[0]))
            walk = draw_law(lambda: _key(verify_sampling(draft, lambda v: target_row(rows[v], params), RandomStream.seeded(0))))
            assert ours.keys() == walk.keys() and all(abs(ours[k] - walk[k]) < 1e-12 for k in ours)
            law = np.zeros(6)
            for (accepted, token), weight in ours.items():
                law[draft.tokens[accepted[0]] if accepted else token] += weight
            if not stochastic:  # any fixed proposal: the first token is p's
                assert np.abs(law - p).max() < 1e-12
            else:  # averaged over the drawing orders of q without replacement
                a, b, c = order
                first += law * q[a] * q[b] / (1 - q[a]) / (1 - q[a] - q[b]) * q[c]
    assert np.abs(first - p).max() < 1e-12


def _key(verification):
    return tuple(verification.accepted), verification.token


BATCH_PROMPTS = [[3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1], [2, 7, 2, 7, 2, 9], [5], [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4]]


@pytest.fixture(scope="module")
def plain_greedy(tiny_qwen2):
    """Plain greedy decoding (method "ar", one row at a time) of every prompt: the reference."""
    return [generate(tiny_qwen2, None, prompt, method="ar", sampling=SamplingParams(temperature=0), max_new_tokens=24,
                     eos_token_ids=[]).tokens for prompt in BATCH_PROMPTS]


@pytest.mark.parametrize("method,tree", [("stand", "heuristic-80"), ("stand", "dynamic-16"), ("pld", None), ("ar", None)])
def test_engine_greedy_with_the_batched_verifier_equals_plain_decoding(tiny_qwen2, plain_greedy, method, tree):
    parsed = Method.parse(method, tree, tiny_qwen2, batch=8).ablated(batch_verify=True)
    results = generate_batch(tiny_qwen2, None, BATCH_PROMPTS, method=parsed, sampling=SamplingParams(temperature=0),
                             n=2, max_new_tokens=24, eos_token_ids=[])
    assert [r.tokens for r in results] == [plain_greedy[row // 2] for row in range(8)]
    assert method == "ar" or sum(r.stats.new_tokens - r.stats.target_forwards for r in results) >= 24


@pytest.mark.parametrize("method,tree", [("stand", "heuristic-80"), ("stand", "dynamic-16"), ("stand-det", "heuristic-80")])
def test_engine_sampling_with_the_batched_verifier_is_the_walks_decode(tiny_qwen2, method, tree):
    """Seeded rows decode the same tokens with either verifier (they draw the same uniforms), so the
    batched verifier inherits the walk's exact law (tests/runtime/engine/test_batch.py, tests/lossless/test_verify.py)."""
    params = [SamplingParams(0.8, 0.95), SamplingParams(1.0, 1.0), SamplingParams(0.6, 0.9, 5), SamplingParams(0.0)] * 2
    runs = [generate_batch(tiny_qwen2, None, BATCH_PROMPTS, n=2, sampling=params, max_new_tokens=16, seed=11,
                           eos_token_ids=[], method=Method.parse(method, tree, tiny_qwen2, batch=8).ablated(batch_verify=on))
            for on in (True, False)]
    assert [r.tokens for r in runs[0]] == [r.tokens for r in runs[1]]
    assert sum(r.stats.new_tokens - r.stats.target_forwards for r in runs[0]) >= 16  # drafts were accepted


def test_the_batched_verifier_is_on_by_default_for_a_batch_on_an_accelerator(tiny_qwen2):
    from stand_runtime.engine.loop import BatchCache, SequenceCache, default_batch_verify

    batch = BatchCache(tiny_qwen2)
    assert default_batch_verify(batch, "cuda:0") and not default_batch_verify(batch, "cpu")
    assert not default_batch_verify(SequenceCache(tiny_qwen2), "cuda")
    with pytest.raises(StandError, match="batch_verify must be True or False"):
        Method.parse("ar").ablated(batch_verify="yes")


@pytest.mark.parametrize("params", PARAMS[:4], ids=lambda p: f"T{p.temperature}-p{p.top_p}-k{p.top_k}")
def test_device_rows_hold_the_hosts_target_rows(params):
    from stand_runtime.target.sampling import DeviceRows
    from stand_runtime.target.sampling import target_rows

    logits = torch.randn(6, 3000, generator=torch.Generator().manual_seed(0)) * 4
    logits[4] *= 0.001  # a wide nucleus
    logits[5, 7] = float("nan")
    rows = DeviceRows(logits, params)
    for r, want in enumerate(target_rows(logits, params)):
        if r == 5:
            assert not np.isfinite(rows.total[r].item())
            continue
        if rows.wide is not None and rows.wide[r]:
            assert r == 4 and len(want.probs) > 512
            continue
        size = len(want.probs)
        assert np.allclose(rows.values[r, :size].double().numpy(), want.probs, rtol=1e-12, atol=0)
        assert rows.ids is None or rows.ids[r, :size].tolist() == want.ids.tolist()
        assert rows.values[r, size:].sum() == 0 and abs(rows.total[r].item() - want.total) < 1e-12


def test_one_sequence_with_the_batched_verifier_equals_plain_decoding(tiny_qwen2, plain_greedy):
    parsed = Method.parse("stand", "heuristic-80", tiny_qwen2).ablated(batch_verify=True)
    result = generate(tiny_qwen2, None, BATCH_PROMPTS[0], method=parsed, sampling=SamplingParams(temperature=0),
                      max_new_tokens=24, eos_token_ids=[])
    assert result.tokens == plain_greedy[0] and result.stats.target_forwards < 24
