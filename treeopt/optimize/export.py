"""Export: prune a calibration to K nodes and describe the result as a versioned tree file.

Alpha-hat is first made monotone along the candidate (a child at most its parent;
:mod:`treeopt.optimize.isotonic`): replay calibrations estimate nodes separately and may order a
child above its parent, which no acceptance probability can.

``--nodes auto`` (:func:`choose_export_size`) picks K from the machine's latency profile: the size
whose calibrated accepted tokens per second of forward time is highest.
"""

from __future__ import annotations


from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from stand_runtime import StandError, TreeFile, __version__
from stand_runtime.checks import check_int
from stand_runtime.trees.tree_io import TreeFamily

from .calibration import Calibration, step_count
from .isotonic import tree_isotonic
from .prune import KnapsackSolution, best_sums, prune, subtree

FAMILY_SIZES = tuple(range(1, 17)) + tuple(range(20, 65, 4)) + (72, 80, 96, 112, 128)
"""Sizes of an exported tree family: every size up to 16 (CPUs), then coarser (GPUs)."""


def export_tree(calibration: Calibration, num_nodes: int, extra_metadata: dict | None = None) -> TreeFile:
    """The best ``num_nodes``-node tree of a calibration, with alpha-hat per node and provenance.

    Raises:
        StandError: what :func:`_exportable_alpha` raises, ``num_nodes`` not an integer >= 1 or larger
            than the candidate.
    """
    alpha = _exportable_alpha(calibration)
    tree, alpha = prune(calibration.candidate, alpha, num_nodes)
    return TreeFile(tree, tuple(float(a) for a in alpha), _metadata(calibration, tree.num_nodes, float(alpha.sum()),
                                                                    extra_metadata))


def export_family(calibration: Calibration, sizes=FAMILY_SIZES) -> TreeFamily:
    """The best tree of a calibration for each size in ``sizes`` (up to the candidate's), from one knapsack
    solve: the file :func:`stand_runtime.sizing.tree_choice.machine_tree` sizes a machine's tree from.

    Raises:
        StandError: what :func:`_exportable_alpha` raises, or sizes that are not integers.
    """
    alpha = _exportable_alpha(calibration)
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise StandError(f"family sizes must be a list of integers, got {sizes!r}")
    sizes = sorted({k for k in (check_int("a family size", k) for k in sizes) if 1 <= k <= calibration.candidate.num_nodes})
    if not sizes:
        raise StandError("no family size fits the candidate tree")
    solution = KnapsackSolution(calibration.candidate, alpha, sizes[-1])
    members = {}
    for k in sizes:
        tree, member_alpha = subtree(calibration.candidate, alpha, solution.nodes(k))
        members[k] = TreeFile(tree, tuple(float(a) for a in member_alpha))
    metadata = _metadata(calibration, None, None, {"sizes": sizes})
    return TreeFamily(members, metadata)


def _exportable_alpha(calibration: Calibration) -> np.ndarray:
    """``[N]`` the calibration's alpha-hat made monotone along the candidate (a child at most its
    parent: :func:`treeopt.optimize.isotonic.tree_isotonic`), once it is checked exportable.

    Raises:
        StandError: not a Calibration, one with no steps, or alpha-hat that are not probabilities.
    """
    if not isinstance(calibration, Calibration):
        raise StandError(f"export needs a Calibration (load_calibration), not {type(calibration).__name__}")
    if calibration.steps <= 0:
        raise StandError("the calibration has no decoding steps: nothing to export")
    alpha = calibration.alpha
    if not (np.all(np.isfinite(alpha)) and np.all(alpha <= 1.0 + 1e-9)):
        raise StandError("the calibration's alpha-hat are not probabilities (some are > 1 or not finite)")
    # clipped into [0, 1] after the projection (alpha-hat may exceed 1 by rounding): the projection onto
    # the order and the box at once, so the tree file's probabilities hold
    return np.clip(tree_isotonic(calibration.candidate, alpha), 0.0, 1.0)


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
        "calibration_steps": step_count(calibration.steps),
        "calibration_tokens": source.get("tokens"),
        **({} if nodes is None else {"nodes": nodes, "expected_acceptance_length": round(1.0 + alpha_sum, 4)}),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": __version__,
        **(extra or {}),
    }


def parse_nodes(text: str) -> int | None:
    """``--nodes``: a count of draft nodes, or None for ``auto`` (StandError otherwise)."""
    from stand_runtime.checks import parse_count

    if text == "auto":
        return None
    try:
        return parse_count("--nodes", text, 1)
    except StandError:  # one wording for every bad value: 0, -3, abc, ８０
        raise StandError(f"--nodes must be auto or an integer >= 1 in digits 0-9, got {text!r}") from None


def latency_model(calibration: Calibration, model: str | None = None) -> str:
    """The model whose latency sizes ``--nodes auto``: ``model``, else the calibration's, else the default."""
    return model or calibration.metadata.get("model") or "smollm2-135m"


@dataclass(frozen=True)
class SizeChoice:
    """The tree size ``--nodes auto`` chose: ``nodes`` (0: no tree beats plain decoding), the ``curve``
    (:func:`stand_runtime.target.latency.choose_size`'s), and the tree file's ``metadata`` (``nodes_auto``)."""

    nodes: int
    curve: list
    metadata: dict

    def check(self) -> None:
        """Raises StandError when no tree pays on this hardware (K = 0)."""
        if self.nodes == 0:
            raise StandError("--nodes auto: no tree beats plain decoding on this hardware (K = 0); "
                             "export a fixed size instead")


def choose_export_size(calibration: Calibration, profile, batch: int = 1) -> SizeChoice:
    """The tree size that maximises calibrated accepted tokens per second under ``profile`` (a
    :class:`stand_runtime.LatencyProfile`) for ``batch`` rows per forward."""
    from stand_runtime.target.latency import choose_size

    sums = best_sums(calibration.candidate, _exportable_alpha(calibration),
                     min(calibration.candidate.num_nodes, profile.sizes[-1] - 1))
    count, curve = choose_size(sums, profile, batch)
    return SizeChoice(count, curve, {"nodes_auto": {"latency": profile.as_dict(), "chosen": count, "batch": batch}})
