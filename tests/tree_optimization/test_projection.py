"""The trace bench projected onto a latency profile (issue 24, item 4): formula, profile files, CLI."""

import json

import pytest
from typer.testing import CliRunner

from cli import app
from stand_runtime import LatencyProfile, StandError
from test_traces import write_traces
from treeopt.evaluate.projection import load_latency_file, projected_speedup, projection_block
from conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"
PROFILE = LatencyProfile((1, 2, 4), (0.010, 0.012, 0.020))
"""t(1) 10 ms, t(2) 12 ms, t(4) 20 ms: t(3) = 16 ms between sizes, 4 ms per token beyond 4."""


def entry(label, tau, nodes, drafting_us, feeding_us, interval=None):
    return {"label": label, "acceptance_pooled": tau, "nodes_per_step": nodes, "drafting_us_per_step": drafting_us,
            "feeding_us_per_step": feeding_us, "interval_pooled_95": interval or [tau, tau]}


def test_projected_speedup_on_a_hand_made_profile():
    assert projected_speedup(3.0, 2.0, PROFILE) == pytest.approx(3 * 10 / 16)  # t(3) interpolated: 16 ms
    assert projected_speedup(3.0, 2.0, PROFILE, host_s=0.004) == pytest.approx(3 * 10 / 20)
    assert projected_speedup(2.8, 5.0, PROFILE) == pytest.approx(2.8 * 10 / 28)  # t(6) = 20 + 2 * 4 ms
    assert projected_speedup(1.0, 0.0, PROFILE) == pytest.approx(1.0)  # plain decoding against itself
    assert projected_speedup(2.0, 1.0, PROFILE, 0.001, plain_host_s=0.002) == pytest.approx(2 * 12 / 13)
    block = projection_block([entry("a", 3.0, 2.0, 1500.0, 2500.0, [2.4, 3.6]), entry("b", 2.8, 5.0, 0.0, 0.0)],
                             PROFILE, {"path": "p.json", "format": "latency-profile"})
    a, b = block["methods"]
    assert block["plain"]["t1_ms"] == pytest.approx(10.0) and block["plain"]["host_ms"] is None
    assert block["profile"] == {"path": "p.json", "format": "latency-profile", "sizes": [1, 2, 4],
                                "seconds": [0.010, 0.012, 0.020]}
    assert a["forward_ms"] == pytest.approx(16.0) and a["host_ms"] == pytest.approx(4.0)
    assert a["speedup"] == pytest.approx(1.5) and a["speedup_host_free"] == pytest.approx(1.875)
    assert a["host_cost"] == pytest.approx(0.2) and a["speedup_interval_95"] == pytest.approx([1.2, 1.8])
    assert not a["extrapolated"] and b["extrapolated"]
    assert b["speedup"] == pytest.approx(1.0) == b["speedup_host_free"] and b["host_cost"] == pytest.approx(0.0)


def test_both_profile_file_formats_load(tmp_path):
    cached = tmp_path / "cached.json"  # what cached_latency writes
    cached.write_text(json.dumps({"model": "m", "threads": 2, "cpu": "AVX2", "profile": PROFILE.as_dict()}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(PROFILE.as_dict()))
    gpu = tmp_path / "gpu.json"  # benchmarks/gpu/gpu_check.py: tokens -> ms
    gpu.write_text(json.dumps({"device": "x", "speed": {"float32": {"latency_ms": {"1": 10, "2": 12, "4": 20.0}},
                                                        "bfloat16": {"latency_ms": {"1": 99, "2": 99}}}}))
    for path, kind in ((cached, "stand-latency-cache"), (bare, "latency-profile"), (gpu, "gpu-check")):
        profile, found = load_latency_file(path)
        assert found == kind and profile.sizes == (1, 2, 4)
        assert profile.seconds == pytest.approx((0.010, 0.012, 0.020)), kind
    h200, kind = load_latency_file(RESULTS / "gpu-check-h200.json")
    assert kind == "gpu-check" and h200.at(1) == pytest.approx(0.01629) and h200.at(128) == pytest.approx(0.017191)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"model": "m"}', "no latency in this file"),
    ('{"profile": {"sizes": [1, 2]}}', "no latency in this file"),
    ('{"sizes": [1, 4, 2], "seconds": [1, 2, 3]}', "strictly increasing"),
    ('{"sizes": [1, 2, 2], "seconds": [1, 2, 3]}', "strictly increasing"),
    ('{"sizes": [2, 4], "seconds": [1, 2]}', "must start at 1 token"),
    ('{"sizes": [1], "seconds": [1]}', "at least two sizes"),
    ('{"sizes": [1, 2], "seconds": [1]}', "2 sizes but 1 latencies"),
    ('{"sizes": [1, 2.5], "seconds": [1, 2]}', "whole token counts"),
    ('{"sizes": [1, 2], "seconds": [1, -2]}', "positive numbers"),
    ('{"sizes": "1,2", "seconds": [1, 2]}', "must be lists"),
    ('{"speed": {"bfloat16": {"latency_ms": {"1": 1, "2": 2}}}}', "no speed.float32.latency_ms"),
    ('{"speed": {"float32": {"latency_ms": {"1": 1, "x": 2}}}}', "whole token counts"),
    ('{"speed": {"float32": {"latency_ms": {"1": "fast", "2": 2}}}}', "positive numbers"),
])
def test_bad_profile_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(StandError, match=message):
        load_latency_file(path)
    traces = write_traces(tmp_path / "t.jsonl", groups=2, per_group=2)
    result = CliRunner().invoke(app, ["bench-traces", str(traces), "--latency", str(path)])
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


def test_bench_traces_cli_projects_onto_a_profile(tmp_path):
    """End to end on the trace tests' fixture: the table, and a JSON projection block whose numbers
    are the formula on the JSON's own τ, K and host µs."""
    traces = write_traces(tmp_path / "t.jsonl", groups=2, per_group=2)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"model": "m", "profile": PROFILE.as_dict()}))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["bench-traces", str(traces), "--methods", "stand,pld,recycle", "--max-tokens", "40",
                                      "--latency", str(profile), "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "projected speedup over plain decoding" in text and "host 0" in text and "ar is not a trace-bench method" in text
    data = json.loads(out.read_text())
    block = data["projection"]
    assert block["profile"]["format"] == "stand-latency-cache" and block["profile"]["sizes"] == [1, 2, 4]
    assert [m["label"] for m in block["methods"]] == [r["label"] for r in data["results"]] == ["stand", "pld", "recycle"]
    for r, m in zip(data["results"], block["methods"]):
        host_s = (r["drafting_us_per_step"] + r["feeding_us_per_step"]) / 1e6
        assert m["speedup"] == pytest.approx(projected_speedup(r["acceptance_pooled"], r["nodes_per_step"], PROFILE, host_s))
        assert m["speedup_host_free"] == pytest.approx(r["acceptance_pooled"] * 0.010 / PROFILE.at(r["nodes_per_step"] + 1))
        assert 0 < m["speedup"] < m["speedup_host_free"] and m["extrapolated"] == (r["nodes_per_step"] + 1 > 4)
    result = CliRunner().invoke(app, ["bench-traces", str(traces), "--max-tokens", "40", "--methods", "pld"])
    assert result.exit_code == 0 and "projected" not in result.output  # no --latency: no projection
