"""STAND's dynamic draft tree (stand_runtime/store/drafting.py): budget, order, specs.

Its losslessness is tested with the other verification rules (tests/lossless/test_verify.py, Markov
chi-square) and end to end in tests/runtime/engine/test_engine.py (greedy identity, sampled distribution).
"""

import numpy as np
import pytest

from stand_runtime import DynamicTree, Method, NGramStore, StandError
from stand_runtime.drafters import check_method, new_memory
from stand_runtime.randomness import RandomStream
from stand_runtime.engine.row import truncate_draft
from stand_runtime.drafters import best_first_draft, parse_dynamic


def chain_store():
    """A store where 1 → 2 → 3 → ... → 30 is certain and 1 → 9 is rare (50 observations each)."""
    store = NGramStore(max_n=3)
    for token in range(1, 30):
        for _ in range(50):
            store.update([token], [token + 1, 9] if token == 1 else [token + 1], [0.8, 0.2] if token == 1 else [1.0])
    return store


def test_best_first_follows_the_likely_chain_within_the_budget():
    """Scores (blend and confidence ~0.98 per level): the chain's k-th node ~0.75 x 0.96^k, the rare
    sibling 9 ~0.19: the first nodes go to the chain; with a larger budget the sibling comes in once
    the chain's score falls below it (or the chain ends, past token 30)."""
    store = chain_store()
    draft = best_first_draft(DynamicTree(6), store, [0, 1], None)
    assert draft.tokens == [1, 2, 3, 4, 5, 6, 7] and list(draft.depths) == [0, 1, 2, 3, 4, 5, 6]
    wide = best_first_draft(DynamicTree(40), store, [0, 1], None)
    assert [wide.tokens[k] for k in wide.children[0]] == [2, 9]  # children in q's order
    assert wide.num_nodes == 40 and all(wide.parents[i] < i for i in range(1, 41))


def test_the_copy_chain_competes_for_the_budget_by_score_and_depth_limits_hold():
    """The chain [2, 3, 7, 7] follows the drafted path 2, 3 and leaves it at 7. Scored 1.0 per token it
    beats every drawn key (< 1): all four are taken first, the two on drawn nodes cost no slot, so 8
    nodes are 6 drawn (2..7) and two copied 7s under 3. Scored 0.5 per token it loses to the drawn
    path (keys ~0.75 x 0.96^k) for the first 12 nodes: its first token is taken for the 13th slot,
    free (node 2 holds it), its second (0.25) never, so nothing is copied and 16 nodes are drawn."""
    store = chain_store()
    first = best_first_draft(DynamicTree(8), store, [0, 1], None, chain=[2, 3, 7, 7], copy_rate=1.0)
    assert first.tokens == [1, 2, 3, 4, 5, 6, 7, 7, 7] and sorted(first.copied) == [7, 8]
    assert [first.parents[c] for c in (7, 8)] == [2, 7]
    last = best_first_draft(DynamicTree(16), store, [0, 1], None, chain=[2, 3, 7, 7], copy_rate=0.5)
    assert last.tokens == list(range(1, 18)) and not last.copied
    for budget in (1, 2):  # a chain that beats the drawn nodes fills a budget smaller than itself
        draft = best_first_draft(DynamicTree(budget), store, [0, 1], None, chain=[7] * 10, copy_rate=1.0)
        assert draft.tokens == [1] + [7] * budget and len(draft.copied) == budget
    limited = best_first_draft(DynamicTree(20), store, [0, 1], None, max_depth=2, chain=[50] * 10, copy_rate=1.0)
    assert int(max(limited.depths)) <= 2 and len(limited.copied) == 2
    assert best_first_draft(DynamicTree(20, max_depth=3), store, [0, 1], None).depths.max() <= 3


def test_a_store_miss_drafts_from_the_0_gram_table_and_an_empty_store_drafts_nothing():
    store = chain_store()
    draft = best_first_draft(DynamicTree(5), store, [0, 500], None)  # 500 never seen as a context
    assert draft.num_nodes == 5 and draft.draft_ids[0] is not None
    assert best_first_draft(DynamicTree(5), NGramStore(), [0, 1], None).num_nodes == 0


def test_stochastic_drafts_carry_q_and_a_prefix_stays_a_draft():
    store = chain_store()
    draft = best_first_draft(DynamicTree(12), store, [0, 1], RandomStream.seeded(3))
    assert draft.stochastic and draft.num_nodes == 12
    for node, kids in enumerate(draft.children):
        if kids:
            assert draft.draft_ids[node] is not None
            for kid in kids:
                assert draft.draft_ids[node][draft.slots[kid]] == draft.tokens[kid]
    cut = truncate_draft(draft, 5)  # best-first order: the first nodes are the best, parents first
    assert cut.num_nodes == 5 and all(cut.parents[i] < i for i in range(1, 6))


def test_dynamic_specs_and_which_methods_take_them():
    assert parse_dynamic("dynamic") == DynamicTree(80)
    assert parse_dynamic("dynamic-12").num_nodes == 12
    assert parse_dynamic("heuristic-80") is None and parse_dynamic(None) is None
    for bad in ("dynamic-0", "dynamic-x", "dynamic-", "dynamic-05", "dynamic-\u0663", "dynamic-99999"):
        with pytest.raises(StandError, match="bad dynamic tree"):
            parse_dynamic(bad)
    for kwargs in ({"num_nodes": 0}, {"num_nodes": 2000}, {"num_nodes": True}, {"num_nodes": 8.0}, {"max_depth": 0},
                   {"max_depth": None}, {"confidence": float("inf")}, {"confidence": "1"}, {"confidence": True},
                   {"beta": float("nan")}, {"beta": -1}):
        with pytest.raises(StandError, match="dynamic tree"):
            DynamicTree(**kwargs)
    assert DynamicTree(np.int64(8)).num_nodes == 8 and type(DynamicTree(np.int64(8)).num_nodes) is int
    assert Method.parse("stand-det", "dynamic-40").tree == DynamicTree(40)
    with pytest.raises(StandError, match="a dynamic tree applies to stand, stand-det"):
        Method.parse("recycle", "dynamic")
    with pytest.raises(StandError, match="a dynamic tree applies to stand, stand-det"):
        check_method("recycle", tree="dynamic-8")
    assert new_memory("stand", 100, "dynamic").max_n == 8 and new_memory("stand", 100, "heuristic-80").max_n == 3


def test_cli_dynamic_tree_errors_are_one_line():
    from test_cli import one_line_error, run

    code, output = run("generate", "hello", "--tree", "dynamic-x")
    assert code == 2
    one_line_error(output, "bad dynamic tree 'dynamic-x'")
    code, output = run("generate", "hello", "--method", "recycle", "--tree", "dynamic")
    assert code == 2
    one_line_error(output, "a dynamic tree applies to stand, stand-det")
