"""Export: prune a calibration to K nodes and describe the result as a versioned tree file."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from stand_runtime import StandError, TreeFamily, TreeFile, __version__

from .calibration import Calibration
from .prune import KnapsackSolution, prune, subtree

FAMILY_SIZES = tuple(range(1, 17)) + tuple(range(20, 65, 4)) + (72, 80, 96, 112, 128)
"""Sizes of an exported tree family: every size up to 16 (CPUs), then coarser (GPUs)."""


def export_tree(calibration: Calibration, num_nodes: int, extra_metadata: dict | None = None) -> TreeFile:
    """The best ``num_nodes``-node tree of a calibration, with alpha-hat per node and provenance.

    Raises:
        StandError: ``num_nodes`` < 1 or larger than the candidate, or a calibration with no steps.
    """
    _check_exportable(calibration)
    tree, alpha = prune(calibration.candidate, calibration.alpha, num_nodes)
    return TreeFile(tree, tuple(float(a) for a in alpha), _metadata(calibration, tree.num_nodes, float(alpha.sum()),
                                                                    extra_metadata))


def export_family(calibration: Calibration, sizes=FAMILY_SIZES) -> TreeFamily:
    """The best tree of a calibration for each size in ``sizes`` (up to the candidate's size), from
    one knapsack solve: the file a machine sizes its default tree from
    (:func:`stand_runtime.machine_tree`).

    Raises:
        StandError: a calibration with no steps, or alpha-hat that are not probabilities.
    """
    _check_exportable(calibration)
    sizes = sorted({k for k in sizes if 1 <= k <= calibration.candidate.num_nodes})
    if not sizes:
        raise StandError("no family size fits the candidate tree")
    solution = KnapsackSolution(calibration.candidate, calibration.alpha, sizes[-1])
    members = {}
    for k in sizes:
        tree, alpha = subtree(calibration.candidate, calibration.alpha, solution.nodes(k))
        members[k] = TreeFile(tree, tuple(float(a) for a in alpha))
    metadata = _metadata(calibration, None, None, {"sizes": sizes})
    return TreeFamily(members, metadata)


def _check_exportable(calibration: Calibration) -> None:
    if calibration.steps <= 0:
        raise StandError("the calibration has no decoding steps: nothing to export")
    if not (np.all(np.isfinite(calibration.alpha)) and np.all(calibration.alpha <= 1.0 + 1e-9)):
        raise StandError("the calibration's alpha-hat are not probabilities (some are > 1 or not finite)")


def _metadata(calibration: Calibration, nodes: int | None, alpha_sum: float | None, extra: dict | None) -> dict:
    source = calibration.metadata
    return {
        "model": source.get("model"),
        "dataset": source.get("dataset"),
        "samples": source.get("samples"),
        "temperature": source.get("temperature"),
        "top_p": source.get("top_p"),
        "method": source.get("method"),
        "candidate_nodes": calibration.candidate.num_nodes,
        "calibration_steps": calibration.steps,
        "calibration_tokens": source.get("tokens"),
        **({} if nodes is None else {"nodes": nodes, "expected_acceptance_length": round(1.0 + alpha_sum, 4)}),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": __version__,
        **(extra or {}),
    }
