"""Presentation of value-sized trees (``dynamic-auto``, docs/algorithms.md §3.7): how well the acceptance
the rule predicted matched what verification observed (:mod:`treeopt.evaluate.reliability`)."""

from __future__ import annotations

from rich.table import Table


def reliability_tables(results) -> list[Table]:
    """One table per bench result that logged predictions (a value-sized tree): per bin of predicted
    P(path accepted) the bin's range, nodes, mean predicted, observed accepted share and their gap,
    with the overall expected calibration error in the title."""
    tables = []
    for result in results:
        if result.reliability is None:
            continue
        summary = result.reliability.summary()
        tables.append(reliability_table(result.label, summary))
    return tables


def reliability_table(label: str, summary: dict) -> Table:
    """The table of one :func:`treeopt.evaluate.reliability.reliability` summary."""
    ece = "–" if summary["ece"] is None else f"{summary['ece']:.4f}"
    table = Table(title=f"{label}: predicted vs observed acceptance per drafted node (ECE {ece}, "
                        f"{summary['nodes']} nodes)",
                  caption="predicted: P(path accepted) the value rule read from its acceptance map when it sized "
                          "the step · observed: share of those nodes whose path was accepted · gap = observed - "
                          "predicted", caption_justify="left")
    for name in ("predicted P bin", "nodes", "mean predicted", "observed", "gap"):
        table.add_column(name, justify="left" if name == "predicted P bin" else "right")
    for row in summary["bins"]:
        table.add_row(f"[{row['low']:.2g}, {row['high']:.2g})", str(row["nodes"]), f"{row['mean_predicted']:.4f}",
                      f"{row['observed']:.4f}", f"{row['gap']:+.4f}")
    if summary["nodes"]:
        table.add_row("all", str(summary["nodes"]), f"{summary['mean_predicted']:.4f}", f"{summary['observed']:.4f}",
                      f"{summary['observed'] - summary['mean_predicted']:+.4f}", style="bold")
    return table
