"""Depth profiles of draft trees (docs/trees.md §6.8): where a tree's nodes and expected acceptance sit."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from stand_runtime import DraftTree, StandError, load_tree
from stand_runtime.trees.tree_io import is_family, load_family

from .calibration import CALIBRATION_FORMAT, load_calibration, resolve_calibration
from .prune import check_alpha


@dataclass(frozen=True)
class DepthProfile:
    """Per-depth shape of a tree: nodes and widest fan-out into each depth 1 .. ``max_depth``, and with
    alpha-hat the sum per depth (expected accepted tokens there) and ``expected_acceptance_length``
    (1 + sum alpha-hat, tokens per target forward), else None."""

    nodes_per_depth: list[int]
    width_per_depth: list[int]
    alpha_per_depth: list[float] | None
    max_depth: int
    num_nodes: int
    expected_acceptance_length: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def depth_profile(tree: DraftTree, alpha: np.ndarray | None = None) -> DepthProfile:
    """The depth profile of ``tree``; ``alpha`` is ``[N]`` alpha-hat per node (breadth-first) or None.

    Raises:
        StandError: not a DraftTree, or alpha that is not ``[N]`` finite numbers >= 0 (a replay
            calibration's importance-weighted alpha-hat may exceed 1 by noise; §6.3).
    """
    if not isinstance(tree, DraftTree):
        raise StandError(f"a depth profile needs a DraftTree, not {type(tree).__name__}")
    alpha_per_depth = None
    expected = None
    if alpha is not None:
        alpha = check_alpha(tree, alpha, "a depth profile")
        if (alpha < 0).any():
            raise StandError("alpha must be finite numbers >= 0")
        sums = np.bincount(tree.depths[1:], weights=alpha, minlength=tree.max_depth + 1)
        alpha_per_depth = [float(x) for x in sums[1:]]
        expected = 1.0 + float(alpha.sum())
    return DepthProfile(tree.nodes_per_depth(), tree.width_per_depth(), alpha_per_depth, tree.max_depth, tree.num_nodes, expected)


def load_tree_or_calibration(spec: str) -> tuple[DraftTree, np.ndarray | None]:
    """A tree and its alpha-hat (or None) from a tree file, a bundled tree name, a calibration file,
    a shipped calibration's name, or a tree family (its largest member).

    Raises:
        StandError: unreadable or invalid file, unknown name.
    """
    path = resolve_calibration(spec)
    if path.is_file():
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            head = None  # not a calibration: load_tree gives the precise error
        if isinstance(head, dict) and head.get("format") == CALIBRATION_FORMAT:
            calibration = load_calibration(path)
            return calibration.candidate, calibration.alpha
    if is_family(spec):  # its largest member (every smaller one is the best tree of its size)
        family = load_family(spec)
        tree_file = family.members[max(family.members)]
        return tree_file.tree, np.array(tree_file.expected_acceptance)
    tree_file = load_tree(spec)
    alpha = None if tree_file.expected_acceptance is None else np.array(tree_file.expected_acceptance)
    return tree_file.tree, alpha
