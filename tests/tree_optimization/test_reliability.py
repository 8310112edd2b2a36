"""Reliability of a value-sized tree's predicted acceptance: the aggregation, the collection through the
value rule, and ``treeopt bench`` printing and saving it (docs/algorithms.md §3.7)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import DigitsTokenizer, tiny_model
from stand_runtime import Method, NGramStore, SamplingParams, SizingSession, StandError, generate
from stand_runtime.target import latency
from treeopt.evaluate.reliability import ReliabilityLog, reliability

FLAT = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), tuple(1 + 0.01 * s for s in (1, 2, 4, 8, 16, 32, 64, 128)))


@pytest.fixture()
def flat_latency(tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "cache"))  # no cached acceptance seed
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency", lambda model, name: FLAT)


def test_the_reliability_table_of_hand_made_predictions():
    predicted = np.array([0.5, 0.5, 0.5, 0.5, 0.02, 0.02, 0.00005, 1.0])
    accepted = np.array([1, 1, 1, 0, 0, 1, 0, 1], dtype=bool)
    table = reliability(predicted, accepted)
    assert table["nodes"] == 8
    assert table["mean_predicted"] == pytest.approx(predicted.mean()) and table["observed"] == 5 / 8
    rows = {(round(r["low"], 6), round(r["high"], 6)): r for r in table["bins"]}
    assert [r["nodes"] for r in table["bins"]] == [1, 2, 4, 1]  # empty bins are left out, in bin order
    low = rows[(1e-4, round(10 ** -3.75, 6))]  # below the first edge: the first bin
    assert low["mean_predicted"] == 0.00005 and low["observed"] == 0 and low["gap"] == pytest.approx(-0.00005)
    assert rows[(round(10 ** -1.75, 6), round(10 ** -1.5, 6))]["observed"] == 0.5
    half = rows[(round(10 ** -0.5, 6), round(10 ** -0.25, 6))]
    assert half["mean_predicted"] == 0.5 and half["observed"] == 0.75 and half["gap"] == pytest.approx(0.25)
    top = rows[(round(10 ** -0.25, 6), 1.0)]  # P = 1 falls in the last bin
    assert top["nodes"] == 1 and top["gap"] == 0
    assert table["ece"] == pytest.approx((1 * 0.00005 + 2 * 0.48 + 4 * 0.25 + 0) / 8, rel=1e-12)
    empty = reliability(np.zeros(0), np.zeros(0, dtype=bool))
    assert empty == {"nodes": 0, "mean_predicted": None, "observed": None, "ece": None, "bins": []}
    with pytest.raises(StandError, match="3 predictions but 2 outcomes"):
        reliability(np.ones(3) / 2, np.ones(2, dtype=bool))
    with pytest.raises(StandError, match=r"in \[0, 1\]"):
        reliability(np.array([1.5]), np.array([True]))


def test_the_log_concatenates_steps():
    log = ReliabilityLog()
    log.add(np.ones(2), np.zeros(2, dtype=bool), np.array([0.5, 0.5]), np.array([True, False]))
    log.add(np.ones(1), np.ones(1, dtype=bool), np.array([0.02]), np.array([True]))
    summary = log.summary()
    assert summary == reliability(np.array([0.5, 0.5, 0.02]), np.array([True, False, True]))
    assert ReliabilityLog().summary()["nodes"] == 0


def test_the_value_rule_reports_what_it_predicted_when_it_sized(flat_latency):
    """Each step's report holds the drafted nodes, the estimate the map gave before that step was
    verified, and the accepted paths; decoding stays plain decoding's (greedy)."""
    model = tiny_model()
    prompt, greedy = [3, 1, 4, 1, 5, 9, 2, 6] * 4, SamplingParams(temperature=0)
    plain = generate(model, None, prompt, method="ar", sampling=greedy, max_new_tokens=20, eos_token_ids=[])
    method, sizing = Method.parse("stand", "dynamic-auto-12", model), SizingSession.for_model(model)
    sizing.latency(1).ratio = lambda tokens: 1.0  # sizes from the profile alone, not from this run's timings
    reports, tables = [], []
    acceptance = sizing.acceptance
    original = acceptance.observe

    def observe(scores, copied, accepted):  # the map's estimate just before each update
        tables.append(acceptance.table())
        original(scores, copied, accepted)

    acceptance.observe = observe
    sizing.on_outcome = lambda scores, copied, predicted, outcome: reports.append((scores, copied, predicted, outcome))
    fast = generate(model, None, prompt, method=method, sampling=greedy, max_new_tokens=20, eos_token_ids=[],
                    store=NGramStore(max_n=8), sizing=sizing)
    assert fast.tokens == plain.tokens
    assert sum(len(r[0]) for r in reports) == sum(fast.stats.drafted_per_step) > 0
    assert sum(int(r[3].sum()) for r in reports) == sum(fast.stats.accepted_per_step) > 0
    for (scores, copied, predicted, outcome), table in zip(reports, tables):
        bins = np.clip(np.searchsorted(latency_edges(), scores, side="right") - 1, 0, 15)
        assert np.array_equal(predicted, table[copied.astype(int), bins])
    # without a collector the drafter keeps no prediction
    store = NGramStore(max_n=8)
    quiet, alone = Method.parse("stand", "dynamic-auto-12", model).ablated(allocation="row"), SizingSession.for_model(model)
    # sizes from the flat profile, not this run's timings (under load they drafted nothing)
    alone.latency(1).ratio, alone.latency(1).explore = (lambda tokens: 1.0), (lambda tokens=None: False)
    generate(model, None, prompt, method=quiet, sampling=greedy, max_new_tokens=20, eos_token_ids=[], store=store,
             sizing=alone)
    rule = alone.last_rule  # the drafter sizes its drafts (rows sized alone)
    drafter = quiet.drafter(store, None, greedy, 16, value=rule)
    first = drafter.draft(prompt + plain.tokens, 8)
    assert first.num_nodes > 0 and rule.recall(first) is None  # nobody listens: nothing kept
    rule.on_outcome = reports.append
    second = drafter.draft(prompt + plain.tokens, 8)
    assert second.num_nodes > 0 and rule.recall(second) is not None


def latency_edges():
    from stand_runtime.sizing.value import EDGES

    return EDGES


def test_bench_prints_and_saves_the_reliability_of_value_sized_trees(flat_latency, tmp_path, monkeypatch, capsys):
    from typer.testing import CliRunner

    from cli import app
    from treeopt_cli import loading

    monkeypatch.setattr(loading, "load_model", lambda *args: (tiny_model(), DigitsTokenizer()))
    monkeypatch.setattr(loading, "cached_profile", lambda *args, **kwargs: FLAT)
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "3 1 4 1 5 3 1 4 1 5 3 1 4"}\n{"question": "2 7 1 8 2 8 2 7 1 8"}\n')
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["bench", "--dataset", str(data), "--field", "question", "--samples", "2", "--methods", "ar,stand",
            "--tree", "dynamic-auto-16", "--tree", "dynamic-16", "--max-new-tokens", "16", "--json", str(out)]
    plot = importlib.util.find_spec("matplotlib") is not None  # the PNG needs it; the table does not
    result = CliRunner().invoke(app, args + (["--png", str(png)] if plot else []))
    assert result.exit_code == 0, result.output
    output = " ".join((result.output + capsys.readouterr().out).split())  # rich may write past the runner; titles wrap
    assert "predicted vs observed acceptance per drafted node (ECE" in output
    assert "mean predicted" in output and "│ all" in output
    results = {r["label"]: r for r in json.loads(out.read_text())["results"]}
    assert results["ar"]["reliability"] is None and results["stand[dynamic-16]"]["reliability"] is None
    table = results["stand[dynamic-auto-16]"]["reliability"]
    assert table["nodes"] == round(results["stand[dynamic-auto-16]"]["mean_drafted"] * results["stand[dynamic-auto-16]"]["steps"])
    assert table["nodes"] == sum(row["nodes"] for row in table["bins"]) > 0
    assert 0 <= table["ece"] <= 1
    if plot:
        picture = tmp_path / "bench-reliability.png"
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="plots need matplotlib")
def test_bins_never_accepted_are_drawn_apart_on_the_floor(tmp_path, monkeypatch):
    """From a user test: an observed 0 was drawn at 1e-4 as if measured, the line falling to it."""
    import matplotlib.axes

    from treeopt.evaluate import plots

    drawn = []
    scatter = matplotlib.axes.Axes.scatter
    monkeypatch.setattr(matplotlib.axes.Axes, "scatter",
                        lambda self, x, y, **kw: drawn.append((list(y), kw)) or scatter(self, x, y, **kw))
    bins = [{"nodes": 30, "mean_predicted": 0.01, "observed": 0.0},
            {"nodes": 50, "mean_predicted": 0.3, "observed": 0.28}]
    path = plots.plot_reliability([("stand", {"bins": bins, "ece": 0.05})], tmp_path / "r.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (seen, _), (floor, style) = drawn
    assert seen == [0.28] and floor == [plots.FLOOR] and style["marker"] == "v" and "none accepted" in style["label"]


def test_a_forward_log_compares_predicted_and_observed_rates_by_width():
    from treeopt.evaluate.reliability import ForwardLog

    log = ForwardLog()
    log.add((0, 0), 2.0, 0.1, 2, 0.1)      # no drafts: 2 tokens in 0.1 s, as predicted
    log.add((3, 1), 4.0, 0.2, 3, 0.3)      # widest row 3: predicted 20 tok/s, observed 10
    log.add((2, 2), 3.0, 0.1, 3, 0.1)
    summary = log.summary()
    assert summary["forwards"] == 3
    assert summary["predicted_tokens_per_s"] == pytest.approx(9.0 / 0.4)
    assert summary["observed_tokens_per_s"] == pytest.approx(8.0 / 0.5)
    first, second = summary["bins"]
    assert (first["low"], first["high"], first["forwards"]) == (0, 1, 1)
    assert first["predicted_tokens_per_s"] == first["observed_tokens_per_s"] == pytest.approx(20.0)
    assert (second["low"], second["high"], second["forwards"]) == (2, 4, 2)
    assert second["predicted_tokens"] == 3.5 and second["observed_tokens"] == 3.0
    assert second["predicted_tokens_per_s"] == pytest.approx(7.0 / 0.3)
    assert second["observed_tokens_per_s"] == pytest.approx(6.0 / 0.4)
