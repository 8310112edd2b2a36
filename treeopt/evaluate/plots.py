"""Plots (PNG, matplotlib): depth profiles side by side, draft trees node by node, acceptance length
against trajectory index or budget, and the reliability diagram of value-sized trees.

Every plot function takes the PNG's path (written atomically, :func:`_save`) and raises StandError when
matplotlib is missing (:func:`pyplot`) or the path is unwritable.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from stand_runtime import StandError
from stand_runtime.files import check_writable, write_bytes_atomic


def plot_profiles(profiles: list, path: str | Path) -> Path:
    """Depth profiles (``[(name, DepthProfile)]``) side by side: nodes per depth (every tree) and expected
    accepted tokens per depth, Σα̂ (the trees that carry calibration estimates; the others are named in
    the panel as having none)."""
    plt, figure, axes = _figure(path, 1, 2, figsize=(11, 4.2))
    _grouped_bars(axes[0], [(name, profile.nodes_per_depth) for name, profile in profiles])
    calibrated = [(f"{name} (τ̂ = {profile.expected_acceptance_length:.2f})", profile.alpha_per_depth)
                  for name, profile in profiles if profile.alpha_per_depth is not None]
    _grouped_bars(axes[1], calibrated)
    missing = [name for name, profile in profiles if profile.alpha_per_depth is None]
    if missing:
        axes[1].text(0.98, 0.6, "no estimates (not calibrated):\n" + "\n".join(missing), transform=axes[1].transAxes,
                     ha="right", va="top", fontsize=8, color="0.35")
    axes[0].set(title="nodes per depth", xlabel="depth", ylabel="nodes")
    axes[1].set(title="expected accepted tokens per depth (Σα̂)", xlabel="depth", ylabel="Σα̂ (tokens per step)")
    figure.text(0.5, 0.01, "α̂: a node's estimated chance to be accepted (calibration); "
                "τ̂ = 1 + Σα̂: expected tokens per target forward", ha="center", fontsize=8, color="0.35")
    for axis in axes:
        if axis.get_legend_handles_labels()[1]:  # a panel with nothing labelled gets no legend
            axis.legend(fontsize=8)
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(figure, plt, path)


def _grouped_bars(axis, series: list) -> None:
    if not series:
        return
    width = 0.8 / len(series)
    for number, (label, values) in enumerate(series):
        depths = np.arange(1, len(values) + 1) + (number - (len(series) - 1) / 2) * width
        axis.bar(depths, values, width=width, label=label)
    axis.set_xticks(range(1, max(len(values) for _, values in series) + 1))


def plot_trees(trees: list, path: str | Path) -> Path:
    """Draft trees (``[(name, DraftTree, alpha [K] per draft node or None)]``) node by node, one panel each:
    the root (the last committed token) a black square at the top, a node's children left to right in
    drawing order, node colour and size by α̂ where the tree carries calibration estimates (else grey)."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    check_writable(path)
    graphs = [tree.to_networkx() for _, tree, _ in trees]
    leaves = [sum(1 for v in g if g.out_degree(v) == 0) for g in graphs]
    widths = [max(6.5, 0.16 * n) for n in leaves]  # ~0.16 inch a leaf: 80-node trees do not overlap
    figure, axes = plt.subplots(1, len(trees), figsize=(sum(widths), 6.0), squeeze=False,
                                gridspec_kw={"width_ratios": widths})
    figure.subplots_adjust(bottom=0.12)  # room for the legend, before the colour bar takes its share
    scale = plt.get_cmap("viridis")
    known = [np.clip(np.asarray(alpha, dtype=float), 0, 1) for _, _, alpha in trees if alpha is not None]
    top = max((float(values.max(initial=0.0)) for values in known), default=1.0)
    top = max(0.05, float(np.ceil(top * 20) / 20))  # the colour scale spans the estimates drawn, not 0-1
    for axis, graph, (name, tree, alpha) in zip(axes[0], graphs, trees):
        _draw_tree(axis, graph, tree, alpha, name, scale, top)
    if known:
        mappable = plt.cm.ScalarMappable(cmap=scale, norm=plt.Normalize(0, top))
        figure.colorbar(mappable, ax=axes[0].tolist(), label="α̂: estimated acceptance probability (colour and size)",
                        shrink=0.8)
    legend = [Line2D([], [], marker="s", color="black", linestyle="", markersize=6,
                     label="root: the last committed token (not a draft)"),
              Line2D([], [], marker="o", color=scale(0.8) if known else "0.6", linestyle="", markersize=8,
                     label="draft node: larger and brighter = higher α̂" if known else "draft node (no α̂)"),
              Line2D([], [], color="0.7", label="children left to right by rank: q's most likely first")]
    figure.legend(handles=legend, loc="lower center", ncol=3, fontsize=8, frameon=False)
    return _save(figure, plt, path)


def _draw_tree(axis, graph, tree, alpha, name: str, scale, top: float) -> None:
    """One panel of :func:`plot_trees`: the tree's nodes at their depth, coloured and sized by α̂ / ``top``."""
    import networkx as nx

    x = _leaf_order_x(graph)
    position = {v: (x[v], -graph.nodes[v]["depth"]) for v in graph}
    drafted = [v for v in graph if v != 0]
    if alpha is not None:
        values = np.clip(np.asarray(alpha, dtype=float), 0, 1)
        colours = [scale(float(values[v - 1]) / top) for v in drafted]
        sizes = [12 + 150 * float(values[v - 1]) / top for v in drafted]
    else:  # no estimates: grey, so no colour is read off the α̂ scale
        colours, sizes = ["0.6"] * len(drafted), [40] * len(drafted)
    nx.draw_networkx_edges(graph, position, ax=axis, arrows=False, edge_color="0.7", width=0.8)
    nx.draw_networkx_nodes(graph, position, ax=axis, nodelist=drafted, node_color=colours, node_size=sizes,
                           linewidths=0)
    nx.draw_networkx_nodes(graph, position, ax=axis, nodelist=[0], node_color="black", node_shape="s",
                           node_size=50)  # the root: the last committed token, not a draft
    subtitle = f"{tree.num_nodes} nodes, depth {tree.max_depth}"
    if alpha is not None:
        subtitle += f", τ̂ = {1 + float(np.sum(alpha)):.2f}"
    else:
        subtitle += ", not calibrated (no α̂)"
    axis.set_title(f"{name}\n{subtitle}", fontsize=9)
    axis.set_yticks(range(0, -tree.max_depth - 1, -1), [str(d) for d in range(tree.max_depth + 1)])
    axis.set_ylabel("depth")
    axis.tick_params(left=True, labelleft=True, bottom=False, labelbottom=False)
    for side in ("top", "right", "bottom"):
        axis.spines[side].set_visible(False)


def _leaf_order_x(graph) -> dict:
    """x of each node: leaves at 0, 1, 2, ... in depth-first order (children in drawing order), a
    parent centred between its first and last child."""
    import networkx as nx

    x: dict = {}
    leaves = 0
    for node in nx.dfs_postorder_nodes(graph, 0, sort_neighbors=sorted):
        kids = list(graph.successors(node))
        if kids:
            x[node] = (min(x[kid] for kid in kids) + max(x[kid] for kid in kids)) / 2
        else:
            x[node] = float(leaves)
            leaves += 1
    return x


def plot_acceptance_by_trajectory(results, path: str | Path) -> Path:
    """Acceptance length of the t-th trajectory per method (a shared drafter memory should make it grow)."""
    plt, figure, axis = _figure(path, figsize=(6, 4))
    for result in results:
        values = result.acceptance_by_trajectory()
        axis.plot(range(1, len(values) + 1), values, marker="o", label=result.label)
    axis.set(xlabel="trajectory", ylabel="acceptance length (tokens/step)", title="acceptance length vs trajectories")
    axis.xaxis.get_major_locator().set_params(integer=True)  # trajectories are counted
    return _save(figure, plt, path, axis)


FLOOR = 1e-4
"""The reliability diagram's lowest value on both log axes."""


def plot_reliability(summaries: list, path: str | Path) -> Path:
    """Reliability diagram of ``[(label, summary)]`` (:func:`treeopt.evaluate.reliability.reliability`
    dicts): per bin of predicted P(path accepted), the observed accepted share against the mean
    prediction (log axes, marker area by nodes), the diagonal the ideal. A bin whose nodes were never
    accepted is an open triangle on the floor (``FLOOR``), named in the legend, left out of the line."""
    plt, figure, axis = _figure(path, figsize=(5.5, 5))
    axis.plot([FLOOR, 1], [FLOOR, 1], color="0.6", linestyle="--", linewidth=1, label="predicted = observed")
    zero_named = False
    for label, summary in summaries:
        rows = summary["bins"]
        if not rows:
            continue
        nodes = np.array([r["nodes"] for r in rows], dtype=np.float64)
        x = np.array([r["mean_predicted"] for r in rows])
        y = np.array([r["observed"] for r in rows])
        size = 20 + 180 * nodes / nodes.max()
        seen = y > 0
        line = axis.plot(x[seen], y[seen], marker="", label=f"{label} (ECE {summary['ece']:.3f})")[0]
        axis.scatter(x[seen], y[seen], s=size[seen], color=line.get_color(), alpha=0.7)
        if not seen.all():
            axis.scatter(x[~seen], np.full((~seen).sum(), FLOOR), s=size[~seen], marker="v", facecolors="none",
                         edgecolors=line.get_color(), label=None if zero_named else f"none accepted (drawn at {FLOOR:g})")
            zero_named = True
    axis.set(xscale="log", yscale="log", xlim=(FLOOR, 1.05), ylim=(FLOOR, 1.05), xlabel="mean predicted P(path accepted)",
             ylabel="observed accepted share", title="value-sized tree: reliability")
    return _save(figure, plt, path, axis)


def plot_trace_acceptance(data: dict, path: str | Path) -> Path:
    """Acceptance length vs trajectory index per method of a trace bench (its JSON), with the 95%
    bootstrap intervals as bands."""
    plt, figure, axis = _figure(path, figsize=(6, 4))
    for result in data["results"]:
        values = result["acceptance_by_trajectory"]
        _band(axis, range(1, len(values) + 1), values, result["interval_by_trajectory_95"], result["label"])
    axis.set(xlabel="trajectory", ylabel="acceptance length τ (tokens/step)", title="trace replay: τ vs trajectory")
    axis.xaxis.get_major_locator().set_params(integer=True)
    return _save(figure, plt, path, axis)


def plot_trace_budgets(data: dict, path: str | Path) -> Path:
    """τ pooled against the budget K of drafted tokens per step (log x) per method of a trace bench's
    budget sweep (its JSON's ``budgets``; StandError without one), with the 95% bootstrap intervals as bands."""
    if "budgets" not in data:
        raise StandError("this trace bench has no budget sweep to plot (run it with --budgets)")
    block = data["budgets"]
    plt, figure, axis = _figure(path, figsize=(6, 4))
    for label in block["methods"]:
        rows = sorted((r for r in block["rows"] if r["label"] == label), key=lambda r: r["budget"])
        _band(axis, [r["budget"] for r in rows], [r["tau"] for r in rows], [r["interval_95"] for r in rows], label)
    axis.set_xscale("log")
    axis.set_xticks(block["budgets"], [str(k) for k in block["budgets"]])
    axis.minorticks_off()
    axis.set(xlabel="budget K (drafted tokens per step)", ylabel="acceptance length τ (tokens/step)",
             title="trace replay: τ vs budget")
    return _save(figure, plt, path, axis)


def _band(axis, x, values, intervals, label: str) -> None:
    """A series with markers and its ``[(low, high)]`` intervals as a band of its colour."""
    line = axis.plot(x, values, marker="o", label=label)[0]
    low, high = zip(*intervals)
    axis.fill_between(x, low, high, color=line.get_color(), alpha=0.12)


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no screen).

    Raises:
        StandError: matplotlib is not installed, or fails to load (a bad ``MPLBACKEND``, a broken install).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise StandError("plots need matplotlib: pip install matplotlib (or the project's [plot] extra)") from None
    except Exception as error:  # matplotlib's own configuration errors (ValueError, RuntimeError)
        raise StandError(f"matplotlib failed to load: {' '.join(str(error).split())[:200]}") from None
    return plt


def _figure(path, *grid, **options):
    """``(pyplot, figure, axes)`` of ``plt.subplots(*grid, **options)``, once ``path`` is checked writable."""
    plt = pyplot()
    check_writable(path)
    return (plt, *plt.subplots(*grid, **options))


def _save(figure, plt, path, legend=None) -> Path:
    """Render ``figure`` (with the ``legend`` axis's legend and a tight layout, when given; the format
    follows the name's extension, PNG otherwise) and write it as every file of the toolkit is written
    (:func:`stand_runtime.files.write_bytes_atomic`)."""
    if legend is not None:
        legend.legend(fontsize=8)
        figure.tight_layout()
    path = Path(path)
    suffix = path.suffix.lower() if path.suffix.lower() in (".png", ".pdf", ".svg", ".jpg", ".jpeg") else ".png"
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, dpi=110, format=suffix.lstrip(".").replace("jpg", "jpeg"))
    finally:
        plt.close(figure)
    return write_bytes_atomic(path, buffer.getvalue())
