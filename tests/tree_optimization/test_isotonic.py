"""Alpha-hat made monotone along the tree (treeopt.optimize.isotonic): the exact least-squares
projection, checked against a general-purpose solver and on the bundled replay calibration."""

import numpy as np
import pytest
from scipy.optimize import minimize

from stand_runtime import DraftTree, StandError
from treeopt.optimize.calibration import load_calibration
from treeopt.optimize.candidate import Prior, candidate_tree
from treeopt.optimize.isotonic import tree_isotonic
from stand_runtime.trees.tree_io import bundled_root


def random_tree(rng, nodes):
    paths = [(0,)]
    while len(paths) < nodes:
        parent = paths[rng.integers(len(paths))] if rng.random() < 0.8 else ()
        rank = sum(1 for p in paths if p[:-1] == parent and len(p) == len(parent) + 1)
        paths.append(parent + (rank,))
    return DraftTree.from_paths(paths)


def reference(tree, alpha):
    """The projection by SLSQP: minimise ||x - alpha||^2 subject to x[parent] - x[child] >= 0."""
    index = {p: i for i, p in enumerate(tree.paths)}
    pairs = [(index[p[:-1]], i) for i, p in enumerate(tree.paths) if len(p) > 1]
    constraints = [{"type": "ineq", "fun": lambda x, a=a, b=b: x[a] - x[b],
                    "jac": lambda x, a=a, b=b: np.eye(len(x))[a] - np.eye(len(x))[b]} for a, b in pairs]
    result = minimize(lambda x: float(((x - alpha) ** 2).sum()), alpha.copy(), jac=lambda x: 2 * (x - alpha),
                      constraints=constraints, method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    assert result.success
    return result.x, pairs


@pytest.mark.parametrize("seed", range(12))
def test_tree_isotonic_is_the_least_squares_projection(seed):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, int(rng.integers(3, 16)))
    alpha = rng.random(tree.num_nodes) ** 2
    fitted = tree_isotonic(tree, alpha)
    expected, pairs = reference(tree, alpha)
    assert all(fitted[a] >= fitted[b] - 1e-12 for a, b in pairs)
    np.testing.assert_allclose(fitted, expected, atol=1e-6)
    assert np.isclose(fitted.sum(), alpha.sum())  # each block takes its mean: the total is kept


def test_ordered_alpha_is_left_as_it_is_and_a_chain_pools_its_violators():
    chain = DraftTree.from_paths([(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)])
    np.testing.assert_array_equal(tree_isotonic(chain, [0.9, 0.5, 0.5, 0.1]), [0.9, 0.5, 0.5, 0.1])
    np.testing.assert_allclose(tree_isotonic(chain, [0.2, 0.6, 0.1, 0.3]), [0.4, 0.4, 0.2, 0.2])
    # a parent that pools with its child may then pool with its own parent (G 0.1, P 0.5, B 0.4)
    np.testing.assert_allclose(tree_isotonic(chain, [0.1, 0.5, 0.4, 0.0]), [1 / 3, 1 / 3, 1 / 3, 0.0])
    # depth-1 nodes have nothing above them; siblings are not ordered
    fan = DraftTree.from_paths([(0,), (1,), (2,)])
    np.testing.assert_array_equal(tree_isotonic(fan, [0.1, 0.7, 0.3]), [0.1, 0.7, 0.3])


def test_the_bundled_replay_calibration_becomes_monotone_and_keeps_its_mass():
    calibration = load_calibration(bundled_root() / "stand-smollm2-humaneval.calibration.json")
    tree, alpha = calibration.candidate, calibration.alpha
    index = {p: i for i, p in enumerate(tree.paths)}
    pairs = [(index[p[:-1]], i) for i, p in enumerate(tree.paths) if len(p) > 1]
    assert sum(alpha[b] > alpha[a] for a, b in pairs) > 0  # the replay's estimates are not ordered
    fitted = tree_isotonic(tree, alpha)
    assert all(fitted[a] >= fitted[b] - 1e-15 for a, b in pairs)
    assert np.isclose(fitted.sum(), alpha.sum())
    assert np.abs(fitted - alpha).max() < 0.01  # the violations are small ones, far down the tree


def test_tree_isotonic_refuses_what_does_not_fit():
    import torch

    tree = candidate_tree(8, Prior())
    with pytest.raises(StandError, match=r"alpha must be \[8\] real numbers, one per draft node, got \[7\]"):
        tree_isotonic(tree, np.zeros(7))
    with pytest.raises(StandError, match="alpha must be finite"):
        tree_isotonic(tree, [np.nan] * 8)
    for bad in (["0.5"] * 8, [10 ** 400] * 8, torch.ones(8, requires_grad=True), [1j] * 8):
        with pytest.raises(StandError, match=r"alpha must be \[8\] real numbers"):
            tree_isotonic(tree, bad)
    with pytest.raises(StandError, match="needs a DraftTree"):
        tree_isotonic([(0,)], [0.5])
    chain = DraftTree.from_paths([(0,), (0, 0)])  # pooled means are not sums: no overflow from finite values
    np.testing.assert_allclose(tree_isotonic(chain, [1e308, 1.7e308]), [1.35e308, 1.35e308])


def test_export_writes_probabilities_when_alpha_hat_exceeds_one_by_rounding():
    """Export takes alpha-hat up to 1 + 1e-9 (rounding); the tree file it writes holds [0, 1]."""
    from treeopt.optimize.calibration import Calibration
    from treeopt.optimize.export import export_family, export_tree

    tree = candidate_tree(6, Prior())
    alpha_sum = np.concatenate([[0.0], np.full(tree.num_nodes, 1.0 + 5e-10)])
    calibration = Calibration(tree, alpha_sum, 1.0, [], {})
    exported = export_tree(calibration, 3)
    assert max(exported.expected_acceptance) == 1.0
    assert all(max(member.expected_acceptance) == 1.0 for member in export_family(calibration, (1, 2)).members.values())
