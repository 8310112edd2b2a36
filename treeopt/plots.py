"""Plots (PNG, matplotlib): depth profiles side by side, acceptance length against trajectory index."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stand_runtime import StandError, check_writable


def plot_profiles(profiles: list, path: str | Path) -> Path:
    """Draw depth profiles side by side (nodes and sum alpha-hat per depth) into a PNG.

    Raises:
        StandError: matplotlib is not installed (``pip install matplotlib``), or the path is unwritable.
    """
    plt = pyplot()
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
        if axis.get_legend_handles_labels()[1]:  # a panel with nothing labelled gets no legend
            axis.legend(fontsize=8)
    figure.tight_layout()
    return _save(figure, plt, path)


def plot_acceptance_by_trajectory(results, path: str | Path) -> Path:
    """Acceptance length of the t-th trajectory per method (a shared drafter memory should make it grow).

    Raises:
        StandError: matplotlib is missing or the path is unwritable.
    """
    plt = pyplot()
    check_writable(path)
    figure, axis = plt.subplots(figsize=(6, 4))
    for result in results:
        values = result.acceptance_by_trajectory()
        axis.plot(range(1, len(values) + 1), values, marker="o", label=result.label)
    axis.set(xlabel="trajectory", ylabel="acceptance length (tokens/step)", title="acceptance length vs trajectories")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return _save(figure, plt, path)


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no screen).

    Raises:
        StandError: matplotlib is not installed.
    """
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
