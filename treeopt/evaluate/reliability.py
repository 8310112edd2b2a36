"""How well a value-sized tree's predicted acceptance matches what verification observed (docs/algorithms.md §3.7).

A value-sized dynamic tree (``dynamic-auto``) sizes each step from P(path accepted) per node, read
from its :class:`stand_runtime.sizing.value.AcceptanceMap`. :class:`ReliabilityLog` collects, per
verified step and drafted node, the P predicted and whether the node's path was accepted (the value
rule's ``on_outcome`` hook); :func:`reliability` bins the predictions and compares (a reliability
table, DeGroot and Fienberg, 1983; the expected calibration error of Naeini et al., 2015:
``ECE = sum_b (n_b / N) |mean predicted_b - observed_b|``), in the acceptance map's own bins
(:data:`stand_runtime.sizing.value.EDGES`, log-spaced: most drafted nodes have small P).
:class:`ForwardLog` does the same for the tokens per second a batched forward was forecast to give.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stand_runtime import StandError
from stand_runtime.sizing.value import EDGES


@dataclass
class ReliabilityLog:
    """Predictions and outcomes of drafted nodes, appended step by step (:meth:`add`)."""

    predicted: list[np.ndarray] = field(default_factory=list)
    accepted: list[np.ndarray] = field(default_factory=list)
    copied: list[np.ndarray] = field(default_factory=list)

    def add(self, scores: np.ndarray, copied: np.ndarray, predicted: np.ndarray, accepted: np.ndarray) -> None:
        """One verified step: ``[n]`` scores (unused: the prediction already reads them), ``[n]`` bool
        copied, ``[n]`` float P predicted, ``[n]`` bool path accepted (the hook's signature)."""
        self.predicted.append(np.asarray(predicted, dtype=np.float64).copy())
        self.accepted.append(np.asarray(accepted, dtype=bool).copy())
        self.copied.append(np.asarray(copied, dtype=bool).copy())

    def summary(self) -> dict:
        """:func:`reliability` of every node logged."""
        if not self.predicted:
            return reliability(np.zeros(0), np.zeros(0, dtype=bool))
        return reliability(np.concatenate(self.predicted), np.concatenate(self.accepted))


def reliability(predicted: np.ndarray, accepted: np.ndarray, edges: np.ndarray = EDGES) -> dict:
    """The reliability table (module docstring) of ``predicted`` (``[N]`` float P(path accepted) per node,
    in [0, 1]) against ``accepted`` (``[N]`` bool), in bins between ``edges`` (``[B + 1]`` increasing; values
    below the first go to the first bin).

    Returns:
        ``{"nodes": N, "mean_predicted", "observed", "ece", "bins": [...]}``, per bin holding nodes its
        ``low``, ``high``, ``nodes``, ``mean_predicted``, ``observed`` (the accepted share) and ``gap``
        (observed - mean predicted); means and ECE None when N is 0.

    Raises:
        StandError: arrays of different lengths, predictions not numbers in [0, 1], bad edges.
    """
    try:
        predicted = np.asarray(predicted, dtype=np.float64).ravel()
        edges = np.asarray(edges, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise StandError("predictions and edges must be numbers") from None
    if len(edges) < 2 or not (np.diff(edges) > 0).all():
        raise StandError(f"edges must be at least two increasing numbers, got {edges.tolist()}")
    accepted = np.asarray(accepted, dtype=bool).ravel()
    if predicted.shape != accepted.shape:
        raise StandError(f"{len(predicted)} predictions but {len(accepted)} outcomes")
    if predicted.size and not np.all((predicted >= 0) & (predicted <= 1)):
        raise StandError("predicted acceptance must lie in [0, 1]")
    total = int(predicted.size)
    bins = np.clip(np.searchsorted(edges, predicted, side="right") - 1, 0, len(edges) - 2)
    rows, ece = [], 0.0
    for b in range(len(edges) - 1):
        inside = bins == b
        count = int(inside.sum())
        if not count:
            continue
        mean, observed = float(predicted[inside].mean()), float(accepted[inside].mean())
        rows.append({"low": float(edges[b]), "high": float(edges[b + 1]), "nodes": count, "mean_predicted": mean,
                     "observed": observed, "gap": observed - mean})
        ece += count / total * abs(observed - mean)
    return {"nodes": total,
            "mean_predicted": float(predicted.mean()) if total else None,
            "observed": float(accepted.mean()) if total else None,
            "ece": ece if total else None, "bins": rows}


__all__ = ["ReliabilityLog", "reliability"]


WIDTHS = (0, 1, 2, 4, 8, 16, 32)
"""Lower edges of the bins of a batched forward's widest row (its drafted nodes): 0, 1, 2-3, ... 32+."""


@dataclass
class ForwardLog:
    """Forecasts and outcomes of batch-allocated forwards (the value rule's ``on_forward`` hook):
    per forward its rows' sizes, the tokens it was expected to emit and the seconds modelled, the
    tokens it emitted and the seconds its step took."""

    widths: list[int] = field(default_factory=list)
    expected: list[float] = field(default_factory=list)
    modelled: list[float] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, sizes, expected: float, modelled: float, emitted: int, seconds: float) -> None:
        """One forward (the signature of the value rule's ``on_forward`` hook, :mod:`stand_runtime.sizing.value`)."""
        self.widths.append(max(sizes, default=0))
        self.expected.append(float(expected))
        self.modelled.append(float(modelled))
        self.emitted.append(int(emitted))
        self.seconds.append(float(seconds))

    def summary(self) -> dict:
        """Predicted against observed tokens per second, over every forward and per bin of the widest
        row's drafted nodes (:data:`WIDTHS`): ``{"forwards", "predicted_tokens_per_s",
        "observed_tokens_per_s", "bins": [{"low", "high", "forwards", "predicted_tokens_per_s",
        "observed_tokens_per_s", "predicted_tokens", "observed_tokens"}, ...]}`` (``high`` None for the
        last bin; rates None without time): a bin observed far below its prediction is a width the
        rule chose wrongly."""
        widths = np.asarray(self.widths, dtype=np.int64)
        columns = [np.asarray(values, dtype=np.float64) for values in (self.expected, self.modelled, self.emitted, self.seconds)]
        rate = lambda tokens, seconds: tokens / seconds if seconds > 0 else None  # noqa: E731

        def cell(mask) -> dict:
            forwards = int(np.count_nonzero(mask))
            expected, modelled, emitted, seconds = (float(column[mask].sum()) for column in columns)
            return {"forwards": forwards, "predicted_tokens_per_s": rate(expected, modelled),
                    "observed_tokens_per_s": rate(emitted, seconds), "predicted_tokens": expected / max(1, forwards),
                    "observed_tokens": emitted / max(1, forwards)}

        bins = []
        for low, high in zip(WIDTHS, [*WIDTHS[1:], None]):
            mask = (widths >= low) & (True if high is None else widths < high)
            if np.any(mask):
                bins.append({"low": low, "high": high, **cell(mask)})
        overall = cell(np.ones(len(widths), dtype=bool))
        return {"forwards": overall["forwards"], "predicted_tokens_per_s": overall["predicted_tokens_per_s"],
                "observed_tokens_per_s": overall["observed_tokens_per_s"], "bins": bins}
