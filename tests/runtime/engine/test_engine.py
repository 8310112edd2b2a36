"""The decoding engine on transformers models: tree attention, KV compaction, losslessness, edge cases."""

import importlib.util

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import assert_tree_logits_match_paths, full_logits, random_tree_step, tiny_model
from stand_runtime import (
    Method,
    NGramStore,
    RecyclingMatrix,
    SamplingParams,
    StandError,
    generate,
    load_model,
    load_tree,
)
from stand_runtime.target.sampling import target_probs
from stand_runtime.trees.tree import DraftTree
from stand_runtime.target.kv_cache import keep_tree_entries
from stand_runtime.target.forward import with_cache

needs_arctic = pytest.mark.skipif(importlib.util.find_spec("arctic_inference") is None,
                                  reason="method 'suffix' needs arctic-inference (README Quickstart line 2 installs it)")


def test_tree_forward_matches_each_path_alone_tiny_qwen2(tiny_qwen2):
    tree = load_tree("heuristic-80").tree
    assert_tree_logits_match_paths(tiny_qwen2, tree, [3, 1, 4, 1, 5, 9, 2, 6], range(tree.num_nodes + 1), tol=1e-4)


@pytest.mark.model
def test_tree_forward_matches_each_path_alone_default_model(default_model):
    model, tokenizer = default_model
    tree = load_tree("heuristic-80").tree
    prefix = tokenizer("def fibonacci(n):\n    if n < 2:\n        return n\n")["input_ids"]
    deepest = [int(i) for i in np.flatnonzero(tree.depths == tree.max_depth)]
    nodes = sorted({0, 1, 2, 8, 9, 20, 30, 40, 50, 60, 70, *deepest})
    assert_tree_logits_match_paths(model, tree, prefix, nodes, tol=1e-4)


def test_compaction_then_decoding_matches_fresh_forward(tiny_qwen2):
    model = tiny_qwen2
    tree = load_tree("heuristic-80").tree
    prefix = [3, 1, 4, 1, 5, 9, 2, 6]
    tokens, _, cache = random_tree_step(model, tree, prefix, seed=1)
    deepest = int(np.flatnonzero(tree.depths == tree.max_depth)[0])
    accepted = []
    node = deepest
    while node > 0:
        accepted.append(node)
        node = int(tree.parents[node])
    accepted = accepted[::-1]
    keep_tree_entries(cache, len(prefix) - 1, [0, *accepted], len(tokens))
    sequence = prefix + [tokens[i] for i in accepted]
    assert cache.get_seq_length() == len(sequence)
    next_token = 7
    with torch.inference_mode():
        continued = model(
            input_ids=torch.tensor([[next_token]]), position_ids=torch.tensor([[len(sequence)]]), **with_cache(model, cache)
        ).logits[0, -1]
    fresh = full_logits(model, sequence + [next_token])[-1]
    assert (continued - fresh).abs().max().item() <= 1e-4




REPEAT_PROMPT = [3, 1, 4, 1, 5] * 6


def exact_continuations(model, prompt, params, length):
    """Exact probability of every ``length``-token continuation under the target's p."""
    table = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, prob in table.items():
            p = target_probs(full_logits(model, prompt + list(prefix))[-1], params).double().numpy()
            for token in np.flatnonzero(p):
                grown[prefix + (int(token),)] = prob * p[token]
        table = grown
    return table


def chi_square_against(counts: dict, exact: dict, samples: int):
    assert set(counts) <= set(exact), "sampled a continuation the target cannot produce"
    keys = sorted(exact, key=lambda k: -exact[k])
    expected = np.array([exact[k] * samples for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a too-small remainder into the last large bin
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp / exp.sum() * obs.sum())


@pytest.fixture(scope="module")
def loop_prompt(tiny_qwen2):
    """A repetitive prompt followed by the tiny model's own greedy continuation, so that every
    drafter (including prompt lookup) finds matches the model tends to accept."""
    greedy = generate(tiny_qwen2, None, REPEAT_PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=30, eos_token_ids=[])
    return REPEAT_PROMPT + greedy.tokens


SAMPLING = SamplingParams(temperature=0.8, top_p=0.95)




def greedy_tiny_runs(model, prompt, **kwargs):
    greedy = SamplingParams(temperature=0)
    plain = generate(model, None, prompt, method="ar", sampling=greedy, eos_token_ids=[], **kwargs)
    fast = generate(model, None, prompt, method=Method.parse("stand", "heuristic-80", model), sampling=greedy,
                    eos_token_ids=[], **kwargs)
    return plain, fast




def test_eos_inside_an_accepted_run_truncates_there(tiny_qwen2):
    plain, fast = greedy_tiny_runs(tiny_qwen2, REPEAT_PROMPT, max_new_tokens=60)
    assert fast.tokens == plain.tokens
    # find a token whose first occurrence is inside a multi-token step, not at its end
    start, chosen = 0, None
    for size in fast.stats.tokens_per_step:
        for offset in range(size - 1):
            position = start + offset
            if fast.tokens[position] not in fast.tokens[:position]:
                chosen = position
                break
        if chosen is not None:
            break
        start += size
    assert chosen is not None, "no accepted run held a first occurrence to use as EOS"
    eos = fast.tokens[chosen]
    for method in ("ar", "stand"):
        result = generate(tiny_qwen2, None, REPEAT_PROMPT, method=Method.parse(method, None if method == "ar" else "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[eos])
        assert result.tokens == plain.tokens[: chosen + 1], method


def test_store_is_fed_only_at_committed_positions(tiny_qwen2):
    """An EOS that cuts an accepted run: the store gets p at the committed positions only, not at
    the accepted nodes drafted past the EOS."""
    prompt = [1, 1, 2, 3, 5, 8, 13] * 2
    free = generate(tiny_qwen2, None, prompt, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[])
    assert free.stats.tokens_per_step[0] >= 3  # the first step accepts 2+ tokens: cut it after its first
    store = NGramStore()
    result = generate(tiny_qwen2, None, prompt, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[free.tokens[0]], store=store)
    stats = result.stats
    assert result.tokens == free.tokens[:1] and stats.accepted_per_step[-1] > stats.tokens_per_step[-1]
    committed_rows = sum(1 + min(a, t) for a, t in zip(stats.accepted_per_step, stats.tokens_per_step))
    observations = sum(store.match(key)[1].count for key in store.contexts() if len(key) == 1)
    assert observations == len(prompt) - 1 + committed_rows




def test_shared_store_across_calls_grows(tiny_qwen2):
    """A store passed to two calls holds exactly what feeding it p (top-10) at every committed
    position of both sequences, in order, gives."""
    from stand_runtime.target.sampling import top_target_probs

    store = NGramStore()
    first = generate(tiny_qwen2, None, REPEAT_PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.8), max_new_tokens=10, seed=0, store=store, eos_token_ids=[])
    size = len(store)
    result = generate(tiny_qwen2, None, [2, 7, 2, 7], method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.8), max_new_tokens=10, seed=1, store=store, eos_token_ids=[])
    assert len(store) > size and result.stats.store["entries"] == len(store)
    expected = NGramStore()
    for sequence in (REPEAT_PROMPT + first.tokens, [2, 7, 2, 7] + result.tokens):
        ids, probs = top_target_probs(full_logits(tiny_qwen2, sequence)[:-1], SamplingParams(0.8), 10)
        expected.update_sequence(sequence, range(len(sequence) - 1), ids.numpy(), probs.double().numpy())
    assert store.contexts() == expected.contexts()
    for context in expected.contexts():
        got, want = store.match(context)[1], expected.match(context)[1]
        assert got.count == want.count and got.id_list == want.id_list, context
        np.testing.assert_allclose(got.prob_list, want.prob_list, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prompt_or_ids": []}, "empty prompt"),
        ({"prompt_or_ids": "   "}, "empty prompt"),
        ({"prompt_or_ids": [1] * 200, "max_new_tokens": 100}, "context too long"),
        ({"prompt_or_ids": [1, 2], "method": "beam"}, "unknown method 'beam'"),
        ({"prompt_or_ids": [1, 2], "method": "recycle", "store": NGramStore(), "max_new_tokens": 8}, "RecyclingMatrix"),
        ({"prompt_or_ids": [1, 2], "method": "pld", "feed_rejected": True, "max_new_tokens": 8}, "feed_rejected applies to stand and stand-det"),
        ({"prompt_or_ids": [1, 2], "top_p": 0}, "top_p must be in"),
        ({"prompt_or_ids": [1, 2], "top_p": 1e-100}, "top_p must be >= 1.1754943508222875e-38 .float32's smallest normal"),
        ({"prompt_or_ids": [1, 2], "tree": "no-such-tree", "max_new_tokens": 8}, "tree not found"),
        ({"prompt_or_ids": [1, 16]}, "prompt token id 16 is outside the model's vocabulary .16 tokens."),
        ({"prompt_or_ids": [1, 2], "store": "STORE_FOR_ANOTHER_MODEL"}, "store holds token id 99, outside the model's vocabulary"),
        ({"prompt_or_ids": [1, 2], "method": "recycle", "store": "SMALL_MATRIX"}, "RecyclingMatrix has 8 rows but the model's vocabulary is 16"),
        ({"prompt_or_ids": [1, 2], "seed": 2**64}, "seed must be in .0, 2..64."),
        ({"prompt_or_ids": [1, 2], "seed": -1}, "seed must be in"),
        ({"prompt_or_ids": [1, 2], "seed": "3"}, "seed must be an integer"),
        ({"prompt_or_ids": [1, 2], "seed": 1.5}, "seed must be an integer"),
        ({"prompt_or_ids": [1, 2], "seed": True}, "seed must be an integer"),
        ({"prompt_or_ids": [1, 2], "max_new_tokens": 2.5}, "max_new_tokens must be an integer"),
        ({"prompt_or_ids": [1, 2], "max_new_tokens": None}, "max_new_tokens must be an integer"),
        ({"prompt_or_ids": [1, 2], "max_new_tokens": "8"}, "max_new_tokens must be an integer"),
        ({"prompt_or_ids": [1, 2], "max_new_tokens": True}, "max_new_tokens must be an integer"),
        ({"prompt_or_ids": [1, 2], "method": "ar", "tree": "heuristic-80"}, "method 'ar' drafts no static tree"),
        ({"prompt_or_ids": [1, 2], "method": "pld", "tree": "heuristic-80"}, "method 'pld' drafts no static tree"),
        ({"prompt_or_ids": [1, 2], "method": "ar", "store": "STORE"}, "method 'ar' has no memory to share"),
        ({"prompt_or_ids": [1, 2], "method": "pld", "store": "STORE"}, "method 'pld' has no memory to share"),
        ({"prompt_or_ids": [1, 2], "tree": "EMPTY_TREE"}, "has no draft nodes: use method 'ar'"),
        ({"prompt_or_ids": [1, 2], "stop": [""]}, "stop strings must be non-empty"),
        ({"prompt_or_ids": [1, 2], "stop": ["x"]}, "stop strings need a tokenizer"),
    ],
)
def test_bad_input_is_a_one_line_error(tiny_qwen2, tmp_path, kwargs, message):
    kwargs = dict(kwargs)
    kwargs.setdefault("max_new_tokens", 8)
    if kwargs.get("store") == "STORE_FOR_ANOTHER_MODEL":
        kwargs["store"] = NGramStore(max_n=8)  # the default tree (dynamic-auto) drafts contexts up to 8
        kwargs["store"].update([1], [99], [1.0])
    elif kwargs.get("store") == "SMALL_MATRIX":
        kwargs["store"] = RecyclingMatrix(8)
    elif kwargs.get("store") == "STORE":
        kwargs["store"] = NGramStore()
    if kwargs.get("tree") == "EMPTY_TREE":
        kwargs["tree"] = str(tmp_path / "empty.json")
        (tmp_path / "empty.json").write_text('{"format": "stand-tree", "version": 1, "paths": []}')
    options = {k: kwargs.pop(k) for k in ("tree", "feed_rejected", "extend", "copy_tokens") if k in kwargs}
    sampling = {k: kwargs.pop(k) for k in ("temperature", "top_p", "top_k") if k in kwargs}
    with pytest.raises(StandError, match=message) as info:
        if sampling:
            kwargs["sampling"] = SamplingParams(**sampling)
        if options:
            kwargs["method"] = Method.parse(kwargs.pop("method", "stand"), options.pop("tree", None), tiny_qwen2, **options)
        generate(tiny_qwen2, None, **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["no-such-model-xyz", "org/no-such-model", "/nowhere/model.gguf", "./missing-dir/"])
def test_unknown_model_spec_is_a_one_line_error(spec, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub's own switch: a hub id stays in the local cache
    with pytest.raises(StandError, match="unknown model") as info:
        load_model(spec)
    assert "\n" not in str(info.value)
    if spec == "org/no-such-model":
        assert "HF_HUB_OFFLINE" in str(info.value)


def test_a_model_folder_without_tokenizer_files_is_named(tmp_path):
    """transformers lists what is missing on the lines after its first; the one-line error keeps them."""
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(StandError, match="cannot load") as info:
        load_model(str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and not message.endswith("from one of:") and len(message) > 120


def test_a_file_named_gguf_that_is_not_one_is_refused_before_dequantizing(tmp_path, monkeypatch):
    """No "dequantizing once" note, and one line naming the file, before transformers is asked."""
    from stand_runtime.target.models import first_load_note

    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "cache"))
    fake = tmp_path / "garbage.gguf"
    fake.write_bytes(b"not a model")
    assert first_load_note(str(fake)) is None
    with pytest.raises(StandError, match="not a GGUF file") as info:
        load_model(str(fake))
    assert "\n" not in str(info.value) and "garbage.gguf" in str(info.value)


def test_feeding_rejected_nodes_stores_their_contexts(tiny_qwen2):
    """With feed_rejected the store gets p at every node of a step's tree, rejected ones included,
    keyed by the node's real context and equal to the target's p after that context."""
    params = SamplingParams(temperature=0.8, top_p=0.95)
    prompt = REPEAT_PROMPT
    steps = []
    for feed in (False, True):
        store = NGramStore()
        first = []
        generate(tiny_qwen2, None, prompt, method=Method.parse("stand", "heuristic-80", tiny_qwen2, feed_rejected=feed), sampling=SamplingParams(temperature=0.8, top_p=0.95), max_new_tokens=8, seed=3, eos_token_ids=[], store=store, on_step=lambda step: first.append((step.draft, step.verification)))
        steps.append((store, first[0]))
    # the first step is the same in both runs (same seed, same prompt-only store): check the first run's
    (only_accepted, (draft, verification)), (every_node, _) = steps
    assert draft.num_nodes > len(verification.accepted) + 1, "the step must reject some nodes"
    paths = {0: []}
    for position in range(1, len(draft.tokens)):
        paths[position] = paths[int(draft.parents[position])] + [draft.tokens[position]]
    rejected = [p for p in range(1, len(draft.tokens)) if p not in verification.accepted]
    checked = 0
    for position in rejected:
        context = prompt + paths[position]
        n, entry = every_node.match(context)
        assert n == 3
        if entry.count == 1:  # a context seen once holds exactly the top-10 of p after it
            p = target_probs(full_logits(tiny_qwen2, context)[-1], params).double().numpy()
            top = np.argsort(-p, kind="stable")[: len(entry.id_list)]
            assert sorted(entry.id_list) == sorted(top.tolist())
            np.testing.assert_allclose(sorted(entry.prob_list), sorted(p[top]), atol=1e-4)
            checked += 1
    assert checked >= 5, checked
    assert any(only_accepted.match(prompt + paths[p]) is None or only_accepted.match(prompt + paths[p])[0] < 3
               for p in rejected)


def test_chunked_prefill_feeds_the_same_store(tiny_qwen2, monkeypatch):
    """A long prompt's prefill runs (and feeds the store) in chunks, in bounded memory; the store
    it leaves equals the one-chunk prefill's, and decoding continues identically."""
    import stand_runtime.target.forward as forward

    prompt = (REPEAT_PROMPT * 3)[:77]
    stores, runs = [], []
    for chunk in (1000, 8):
        monkeypatch.setattr(forward, "PREFILL_CHUNK", chunk)
        store = NGramStore()
        runs.append(generate(tiny_qwen2, None, prompt, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.8), max_new_tokens=12, seed=5, store=store, eos_token_ids=[]))
        stores.append(store)
    whole, chunked = stores
    assert sorted(whole.contexts()) == sorted(chunked.contexts())
    for context in whole.contexts():
        a, b = whole.match(context)[1], chunked.match(context)[1]
        assert a.count == b.count and a.id_list == b.id_list
        np.testing.assert_allclose(a.prob_list, b.prob_list, atol=1e-5)
    assert runs[0].tokens == runs[1].tokens


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_non_finite_logits_are_an_error_not_an_acceptance(temperature):
    model = tiny_model("qwen2", seed=3)
    with torch.no_grad():
        model.lm_head.weight[5] = float("nan")
    with pytest.raises(StandError, match="not finite") as info:
        generate(model, None, REPEAT_PROMPT, method=Method.parse("stand", "heuristic-80", model), sampling=SamplingParams(temperature=temperature), max_new_tokens=8, eos_token_ids=[], seed=0)
    assert "\n" not in str(info.value)


def test_tree_attention_packs_grouped_query_heads_exactly(tiny_qwen2):
    """Grouped-query heads packed for tree steps (no KV copy) give the same logits as transformers'
    own SDPA, and tree logits still equal each path run alone."""
    import copy

    from stand_runtime.target.forward import use_tree_attention

    assert tiny_qwen2.config.num_attention_heads // tiny_qwen2.config.num_key_value_heads == 2
    packed = copy.deepcopy(tiny_qwen2)
    assert use_tree_attention(packed) and packed.config._attn_implementation == "stand_sdpa"
    tree = load_tree("heuristic-80").tree
    prefix = [3, 1, 4, 1, 5, 9, 2, 6]
    _, stock_logits, _ = random_tree_step(tiny_qwen2, tree, prefix, seed=4)
    _, packed_logits, _ = random_tree_step(packed, tree, prefix, seed=4)
    assert (stock_logits - packed_logits).abs().max().item() <= 2e-5  # float32 summation order
    assert_tree_logits_match_paths(packed, tree, prefix, range(tree.num_nodes + 1), tol=1e-4)


def test_tree_attention_repeats_each_forwards_own_mask():
    """The packed mask is made once per forward (one mask object for every layer), never reused for
    another mask of the same shape: each call equals SDPA on the heads expanded."""
    from types import SimpleNamespace

    from stand_runtime.target.forward import tree_sdpa_attention

    generator = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=2, training=False)
    query = torch.randn(1, 4, 3, 8, generator=generator)
    key, value = torch.randn(1, 2, 5, 8, generator=generator), torch.randn(1, 2, 5, 8, generator=generator)
    for allowed in (torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]),
                    torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])):
        mask = torch.zeros(1, 1, 3, 5).masked_fill_(allowed[None, None] == 0, torch.finfo(torch.float32).min)
        for _ in range(2):  # two layers of one forward
            out, _ = tree_sdpa_attention(module, query, key, value, mask, scaling=0.5)
            expected = torch.nn.functional.scaled_dot_product_attention(
                query, key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1), attn_mask=mask, scale=0.5)
            assert torch.allclose(out, expected.transpose(1, 2), atol=1e-6)


@pytest.mark.model
def test_fast_cpu_forward_matches_the_stock_model(default_model):
    """The default model as load_model gives it (linears prepacked for oneDNN, the stock kernel for
    forwards as small as measured faster here, packed tree attention) against the stock transformers
    model: logits of an 80-node tree step and of 1-5 token forwards within float32 noise, same argmax."""
    model, tokenizer = default_model
    stock, _ = load_model("smollm2-135m", device="cpu", fast=False)
    stock.set_attn_implementation("sdpa")
    assert any(type(m).__name__ == "PackedLinear" for m in model.modules())
    tree = load_tree("heuristic-80").tree
    prefix = tokenizer("def fibonacci(n):\n    if n < 2:\n        return n\n")["input_ids"]
    _, fast_logits, _ = random_tree_step(model, tree, prefix, seed=0)
    _, stock_logits, _ = random_tree_step(stock, tree, prefix, seed=0)
    scale = stock_logits.abs().max().item()
    assert (fast_logits - stock_logits).abs().max().item() <= 1e-5 * scale, (fast_logits - stock_logits).abs().max()
    assert torch.equal(fast_logits.argmax(-1), stock_logits.argmax(-1))
    for n in (1, 2, 3, 5):  # the small forwards of plain decoding and value-sized drafts (either kernel, §5.3)
        chain = DraftTree.chain(n - 1)
        _, fast_logits, _ = random_tree_step(model, chain, prefix, seed=n)
        _, stock_logits, _ = random_tree_step(stock, chain, prefix, seed=n)
        assert (fast_logits - stock_logits).abs().max().item() <= 1e-5 * stock_logits.abs().max().item()
        assert torch.equal(fast_logits.argmax(-1), stock_logits.argmax(-1))
