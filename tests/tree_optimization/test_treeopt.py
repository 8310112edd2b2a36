"""treeopt: candidate trees, exact pruning, export, calibration files, bad input."""

import json

import numpy as np
import pytest

from stand_runtime import DraftTree, StandError, load_tree, save_tree
from stand_runtime.trees.tree import validate_paths
from treeopt.optimize.calibrate import CalibrationConfig
from treeopt.optimize.calibration import Calibration, load_calibration
from treeopt.optimize.candidate import Prior, candidate_tree, per_depth_tree
from treeopt.optimize.export import export_tree
from stand_runtime import LatencyProfile
from stand_runtime.target.latency import choose_size
from treeopt.optimize.profile import depth_profile
from treeopt.optimize.prune import best_sums, prune


def test_default_candidate_is_wide_and_deep():
    tree = candidate_tree()
    assert tree.num_nodes == 625 and tree.max_depth >= 20
    assert tree.width_per_depth()[0] == 10
    validate_paths(tree.paths)  # closed under parent and elder sibling
    profile = depth_profile(tree)
    assert sum(profile.nodes_per_depth) == 625


def test_per_depth_tree_has_the_requested_profile():
    tree = per_depth_tree([8, 21, 25, 15, 8, 3])
    assert tree.nodes_per_depth() == [8, 21, 25, 15, 8, 3]
    assert load_tree("heuristic-80").tree.paths == tree.paths
    with pytest.raises(StandError, match="cannot hold"):
        per_depth_tree([2, 30])
    for bad in ({"base": 1.5}, {"base": 1e-300}, {"decay": 1025.0}, {"decay": 0.0}):
        with pytest.raises(StandError, match="prior needs 0.001 <= base < 1 and 0 < decay <= 16"):
            Prior(**bad)
    assert candidate_tree(40, Prior(base=0.001)).num_nodes == 40 and candidate_tree(40, Prior(decay=16.0)).num_nodes == 40


def random_valid_subtree(tree: DraftTree, k: int, rng) -> list[int]:
    """A random K-node subtree closed under parent and elder sibling (grown on its frontier)."""
    index = {path: i + 1 for i, path in enumerate(tree.paths)}
    chosen, frontier = [], [index[(0,)]]
    while len(chosen) < k:
        node = frontier.pop(rng.integers(len(frontier)))
        chosen.append(node)
        path = tree.paths[node - 1]
        for nxt in (path + (0,), path[:-1] + (path[-1] + 1,)):
            if nxt in index:
                frontier.append(index[nxt])
    return chosen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prune_beats_random_search_and_is_valid(seed):
    rng = np.random.default_rng(seed)
    tree = candidate_tree(120)
    # noisy, non-monotone alpha, as calibration estimates are
    alpha = np.exp(-0.4 * tree.depths[1:]) * rng.random(tree.num_nodes)
    pruned, pruned_alpha = prune(tree, alpha, 20)
    assert pruned.num_nodes == 20
    validate_paths(pruned.paths)
    lookup = dict(zip(tree.paths, alpha))
    assert np.allclose(pruned_alpha, [lookup[p] for p in pruned.paths])
    best = pruned_alpha.sum()
    assert best == pytest.approx(best_sums(tree, alpha, 20)[20])
    for _ in range(3000):
        nodes = random_valid_subtree(tree, 20, rng)
        assert alpha[np.array(nodes) - 1].sum() <= best + 1e-12


@pytest.mark.parametrize("nodes, seed", [(11, 5), (14, 6)])
def test_prune_is_exact_on_a_small_tree_by_enumeration(nodes, seed):
    """Every size at once: the size-capped tables (each stops at its subtree's size) lose nothing."""
    import itertools

    tree = candidate_tree(nodes)
    alpha = np.round(np.random.default_rng(seed).random(nodes), 1)  # rounded: ties too
    best = np.full(nodes + 1, -1.0)
    best[0] = 0.0
    for subset in itertools.chain.from_iterable(itertools.combinations(range(nodes), k) for k in range(1, nodes + 1)):
        try:
            validate_paths([tree.paths[i] for i in subset])
        except StandError:
            continue
        best[len(subset)] = max(best[len(subset)], alpha[list(subset)].sum())
    assert np.allclose(best_sums(tree, alpha, nodes), best)
    for k in range(1, nodes + 1):
        assert prune(tree, alpha, k)[1].sum() == pytest.approx(best[k])


def test_prune_rejects_bad_sizes():
    tree = candidate_tree(10)
    with pytest.raises(StandError, match="larger than the candidate tree"):
        prune(tree, np.ones(10), 11)
    with pytest.raises(StandError, match=">= 1"):
        prune(tree, np.ones(10), 0)


def test_auto_size_picks_the_best_ratio():
    sums = np.array([0.0, 0.6, 1.0, 1.2, 1.3])
    profile = LatencyProfile((1, 2, 4, 8), (1.0, 1.1, 1.3, 2.0))
    assert profile.at(3) == pytest.approx(1.2) and profile.at(10) == pytest.approx(2.35)
    k, curve = choose_size(sums, profile)
    ratios = [(1 + s) / profile.at(n + 1) for n, s in enumerate(sums)]
    assert k == int(np.argmax(ratios)) and len(curve) == 5
    sums[k] = -np.inf  # a size the family does not have is skipped, not the end of the curve
    k2, curve = choose_size(sums, profile)
    assert k2 != k and len(curve) == 4


def fake_calibration(tree: DraftTree, seed=0) -> Calibration:
    rng = np.random.default_rng(seed)
    calibration = Calibration(tree, np.zeros(tree.num_nodes + 1))
    for prompt in range(3):
        alpha_sum = np.concatenate([[0.0], 10 * rng.random(tree.num_nodes) * np.exp(-0.5 * tree.depths[1:])])
        calibration.add_prompt(f"p{prompt}", alpha_sum, 20.0, 40)
    calibration.metadata = {"model": "m", "method": "replay", "settings": {}}
    return calibration


def test_calibration_file_round_trip_and_export(tmp_path):
    tree = candidate_tree(60)
    calibration = fake_calibration(tree)
    path = calibration.save(tmp_path / "cal.json")
    loaded = load_calibration(path)
    assert np.allclose(loaded.alpha, calibration.alpha, atol=1e-7)
    assert loaded.steps == 60.0 and len(loaded.per_prompt) == 3
    assert np.all(np.isfinite(loaded.alpha_stderr()))
    exported = export_tree(loaded, 15)
    assert exported.tree.num_nodes == 15
    assert exported.metadata["expected_acceptance_length"] == pytest.approx(1 + sum(exported.expected_acceptance), abs=1e-3)
    out = save_tree(exported, tmp_path / "tree.json")
    assert load_tree(out).expected_acceptance == pytest.approx(exported.expected_acceptance, abs=1e-6)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: "{not json", "corrupt calibration file"),
        (lambda d: json.dumps({**d, "format": "x"}), "not a stand-calibration file"),
        (lambda d: json.dumps({**d, "version": 9}), "version 9 is not supported"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "per_prompt"}), "bad or missing field"),
        (lambda d: json.dumps({**d, "steps": 1}), "steps do not add up"),
        (lambda d: json.dumps({**d, "candidate": [[0], [0, 0, 0]]}), "has no parent"),
        # a JSON integer too large for a float (was an OverflowError traceback)
        (lambda d: json.dumps({**d, "per_prompt": [{**d["per_prompt"][0], "alpha_sum": [10 ** 400] * 21}]}),
         "alpha_sum values that are not finite numbers"),
    ],
)
def test_corrupt_calibration_is_a_one_line_error(tmp_path, mutate, message):
    data = fake_calibration(candidate_tree(20)).to_json()
    path = tmp_path / "cal.json"
    path.write_text(mutate(data))
    with pytest.raises(StandError, match=message) as info:
        load_calibration(path)
    assert "\n" not in str(info.value)


def test_config_validation():
    with pytest.raises(StandError, match="unknown calibration method"):
        CalibrationConfig(method="magic")
    with pytest.raises(StandError, match="samples must be an integer >= 1, got 0"):
        CalibrationConfig(samples=0)
    # a user test of the library: each of these was taken (or read "no" as True) and failed later
    for settings, message in (({"samples": 2.5}, "samples must be an integer"), ({"offset": -5}, "offset must be"),
                              ({"candidate_nodes": 100000}, "candidate_nodes must be"),
                              ({"candidate_nodes": True}, "candidate_nodes must be"),
                              ({"dataset": None}, "dataset must be a name or a path"),
                              ({"field": 5}, "field must be a column name"),
                              ({"deterministic_drafts": "no"}, "deterministic_drafts must be True or False"),
                              ({"prior_base": "0.5"}, "prior_base must be a number")):
        with pytest.raises(StandError, match=message):
            CalibrationConfig(**settings)


def test_a_replay_calibration_with_alpha_hat_above_one_loads_and_profiles(tmp_path):
    """Replay's importance weights (min(1, p/q) / p per level) make alpha-hat unbiased, not bounded by 1:
    a small calibration can hold a node above 1, and calibrate itself writes it; loading (resume, show)
    and the depth profile take it (export refuses to make a tree of it)."""
    tree = candidate_tree(20)
    calibration = Calibration(tree, np.zeros(tree.num_nodes + 1))
    calibration.add_prompt("p0", np.concatenate([[0.0], np.full(tree.num_nodes, 30.0)]), 20.0, 40)
    loaded = load_calibration(calibration.save(tmp_path / "cal.json"))
    assert loaded.alpha.max() == pytest.approx(1.5)
    assert depth_profile(loaded.candidate, loaded.alpha).expected_acceptance_length == pytest.approx(1 + 1.5 * 20)
    with pytest.raises(StandError, match="not probabilities"):
        export_tree(loaded, 5)
