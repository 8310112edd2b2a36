"""The ceiling of a measured acceptance (treeopt.evaluate.ceiling): its formula on known profiles,
depth rows merged by counts, and the benchmark script reading bench and search files alike."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from stand_runtime import StandError
from stand_runtime.target.latency import LatencyProfile
from treeopt.evaluate.ceiling import ceiling, chain_gains, depth_rates, merge_depths

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def test_a_flat_profile_allows_the_whole_chain_and_a_steep_one_nothing():
    rates = [0.5, 0.5, 0.5]
    assert list(chain_gains(rates)) == [1.0, 1.5, 1.75, 1.875]
    flat = LatencyProfile(SIZES, tuple(1.0 for _ in SIZES))
    assert ceiling(rates, flat, 4) == (1.875, 3)
    steep = LatencyProfile(SIZES, tuple(float(s) for s in SIZES))  # cost proportional to tokens
    assert ceiling(rates, steep, 1) == (1.0, 0)


def test_depth_rows_merge_by_counts_and_bad_input_is_refused():
    merged = merge_depths([[{"depth": 1, "offered": 4, "accepted": 2, "rate": 0.5}],
                           [{"depth": 1, "offered": 6, "accepted": 6, "rate": 1.0},
                            {"depth": 2, "offered": 6, "accepted": 3, "rate": 0.5}]])
    assert merged == [{"depth": 1, "offered": 10, "accepted": 8, "rate": 0.8},
                      {"depth": 2, "offered": 6, "accepted": 3, "rate": 0.5}]
    assert depth_rates(merged) == [0.8, 0.5] and depth_rates(merged, deepest=1) == [0.8]
    flat = LatencyProfile(SIZES, tuple(1.0 for _ in SIZES))
    with pytest.raises(StandError, match="in \\[0, 1\\]"):
        ceiling([1.5], flat, 1)
    with pytest.raises(StandError, match=">= 1 row"):
        ceiling([0.5], flat, 0)


def test_the_script_reads_a_search_file(tmp_path):
    profile = {"sizes": list(SIZES), "seconds": [0.01] * len(SIZES)}
    report = {"latency_profile": profile, "summary": {
        "ar": {"tokens_per_s": 10.0, "acceptance_length": 1.0, "acceptance_by_depth": []},
        "stand": {"tokens_per_s": 15.0, "acceptance_length": 1.5,
                  "acceptance_by_depth": [{"depth": 1, "offered": 10, "accepted": 5, "rate": 0.5}]}}}
    path = tmp_path / "search.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ceiling.py"), str(path), "--method", "stand",
                           "--batches", "1", "4"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "1.50x plain" in done.stdout and "B   4: ceiling 1.50x plain (chain of 1" in done.stdout
