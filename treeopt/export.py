"""Export: prune a calibration to K nodes and describe the result as a versioned tree file."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from stand_runtime import StandError, TreeFile, __version__

from .calibration import Calibration
from .prune import prune


def export_tree(calibration: Calibration, num_nodes: int, extra_metadata: dict | None = None) -> TreeFile:
    """The best ``num_nodes``-node tree of a calibration, with alpha-hat per node and provenance.

    Raises:
        StandError: ``num_nodes`` < 1 or larger than the candidate, or a calibration with no steps.
    """
    if calibration.steps <= 0:
        raise StandError("the calibration has no decoding steps: nothing to export")
    if not (np.all(np.isfinite(calibration.alpha)) and np.all(calibration.alpha <= 1.0 + 1e-9)):
        raise StandError("the calibration's alpha-hat are not probabilities (some are > 1 or not finite)")
    tree, alpha = prune(calibration.candidate, calibration.alpha, num_nodes)
    source = calibration.metadata
    metadata = {
        "model": source.get("model"),
        "dataset": source.get("dataset"),
        "samples": source.get("samples"),
        "temperature": source.get("temperature"),
        "top_p": source.get("top_p"),
        "method": source.get("method"),
        "candidate_nodes": calibration.candidate.num_nodes,
        "calibration_steps": calibration.steps,
        "calibration_tokens": source.get("tokens"),
        "nodes": tree.num_nodes,
        "expected_acceptance_length": round(1.0 + float(alpha.sum()), 4),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "version": __version__,
        **(extra_metadata or {}),
    }
    return TreeFile(tree, tuple(float(a) for a in alpha), metadata)
