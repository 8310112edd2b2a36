"""Loading anything with a tree in it (tree file, bundled tree, calibration) and plotting profiles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from stand_runtime import DraftTree, StandError, load_tree

from .calibrate import CALIBRATION_FORMAT, load_calibration


def load_any(spec: str) -> tuple[DraftTree, np.ndarray | None]:
    """A tree and its alpha-hat (or None) from a tree file, a bundled tree name or a calibration file.

    Raises:
        StandError: unreadable or invalid file, unknown name.
    """
    path = Path(spec)
    if path.is_file():
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            head = None  # not a calibration: load_tree gives the precise error
        if isinstance(head, dict) and head.get("format") == CALIBRATION_FORMAT:
            calibration = load_calibration(path)
            return calibration.candidate, calibration.alpha
    tree_file = load_tree(spec)
    alpha = None if tree_file.expected_acceptance is None else np.array(tree_file.expected_acceptance)
    return tree_file.tree, alpha


def plot_profiles(profiles: list, path: str | Path) -> Path:
    """Draw depth profiles side by side (nodes and sum alpha-hat per depth) into a PNG.

    Raises:
        StandError: matplotlib is not installed (``pip install matplotlib``), or the path is unwritable.
    """
    plt = _pyplot()
    from stand_runtime.tree_io import check_writable

    check_writable(path)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(len(profiles), 1)
    for number, (name, profile) in enumerate(profiles):
        depths = np.arange(1, profile.max_depth + 1) + (number - (len(profiles) - 1) / 2) * width
        axes[0].bar(depths, profile.nodes_per_depth, width=width, label=name)
        if profile.alpha_per_depth is not None:
            axes[1].bar(depths, profile.alpha_per_depth, width=width, label=f"{name} (τ̂ = {profile.expected_acceptance_length:.2f})")
    axes[0].set(title="nodes per depth", xlabel="depth", ylabel="nodes")
    axes[1].set(title="expected accepted tokens per depth (Σα̂)", xlabel="depth", ylabel="Σα̂")
    for axis in axes:
        axis.legend(fontsize=8)
    figure.tight_layout()
    return _save(figure, plt, path)


def plot_acceptance_by_trajectory(results, path: str | Path) -> Path:
    """Acceptance length of the t-th trajectory per method (a shared drafter memory should make it grow).

    Raises:
        StandError: matplotlib is missing or the path is unwritable.
    """
    plt = _pyplot()
    from stand_runtime.tree_io import check_writable

    check_writable(path)
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        values = result.acceptance_by_trajectory()
        axis.plot(range(1, len(values) + 1), values, marker="o", label=result.label)
    axis.set(xlabel="trajectory", ylabel="acceptance length (tokens/step)", title="acceptance length vs trajectories")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return _save(figure, plt, path)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise StandError("plots need matplotlib: pip install matplotlib (or the project's [plot] extra)") from None
    return plt


def _save(figure, plt, path) -> Path:
    tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
    figure.savefig(tmp, dpi=110)
    plt.close(figure)
    tmp.replace(path)
    return Path(path)
