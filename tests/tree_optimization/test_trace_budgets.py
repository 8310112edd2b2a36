"""The trace bench's budget sweep (issue 61): every method at each budget K of drafted tokens per step."""

import json

import pytest
from typer.testing import CliRunner

from cli import app
from stand_runtime import StandError, replay_trace
from test_traces import SHARED, WordTokenizer, needs_arctic, write_traces
from treeopt.data.traces import load_traces, tokenize_groups
from treeopt.evaluate.trace_bench import (TRACE_METHODS, budget_limit, budget_methods, parse_budgets, run_trace_bench,
                                          trace_drafter, trace_results_json)

LOCAL = [m for m in TRACE_METHODS if not m.startswith("suffix")]
ALL = LOCAL + [pytest.param(m, marks=needs_arctic) for m in ("suffix", "suffix-tuned")]
BUDGETS = [1, 2, 3, 5, 8, 16, 80]


@pytest.mark.parametrize("text, budgets", [("2,4,8", [2, 4, 8]), (" 16, 2 ,80", [2, 16, 80]), ("1", [1])])
def test_budgets_parse_ascending(text, budgets):
    assert parse_budgets(text) == budgets


@pytest.mark.parametrize("text, message", [
    ("0", "bad budget '0'"), ("abc", "bad budget 'abc'"), ("2,,4", "bad budget ''"), ("-1", "bad budget '-1'"),
    ("1.5", "bad budget '1.5'"), ("", "comma-separated list of integers"), ("4,2,4", "listed twice"),
])
def test_bad_budgets_are_refused(text, message):
    with pytest.raises(StandError, match=message):
        parse_budgets(text)


def test_a_budget_over_a_methods_maximum_is_refused():
    assert budget_limit("recycle")[0] == 80 and budget_limit("stand-static")[0] == 80
    for name in ("stand", "stand-det", "pld", "recycle", "stand-static"):
        limit = budget_limit(name)[0]
        assert len(budget_methods(name, [limit])) == 1
        with pytest.raises(StandError, match=f"budget {limit + 1} is more than {name} drafts"):
            budget_methods(name, [2, limit + 1])
    with pytest.raises(StandError, match="copy_tokens is STAND's copy path"):
        budget_methods("pld,recycle", [2], copy_tokens=4)


def _groups(tmp_path, length=60):
    groups, _ = load_traces(write_traces(tmp_path / "t.jsonl", groups=2, per_group=3, length=length))
    tokenize_groups(groups, WordTokenizer(), max_tokens=length)
    return groups


@pytest.mark.parametrize("name", ALL)
def test_budget_k_never_drafts_more_than_k_tokens_a_step(tmp_path, name):
    """The replay's recorded drafted counts, step by step, stay within K, and reach it for some K."""
    groups = _groups(tmp_path)
    reached = False
    for spec in budget_methods(name, BUDGETS):
        for group in groups:
            memory = spec.method.new_memory(1000)
            for t, trace in enumerate(group.trace_ids):
                drafted = replay_trace(trace_drafter(spec, memory, t, 1000), group.prompt_ids, trace).stats.drafted_per_step
                assert max(drafted) <= spec.budget, (name, spec.budget)
                reached |= spec.budget > 1 and max(drafted) == spec.budget
    assert reached, name
    for result in run_trace_bench(groups, budget_methods(name, BUDGETS), 1000):
        assert result.most_drafted <= result.spec.budget and result.nodes_per_step <= result.spec.budget


@pytest.mark.skipif(not (SHARED / "traces_qwen25math_bon8.jsonl").is_file(), reason="shared trace data not present")
def test_budgets_hold_on_real_traces():
    from stand_runtime import load_tokenizer

    groups, _ = load_traces(SHARED / "traces_qwen25math_bon8.jsonl")
    tokenizer = load_tokenizer()
    groups = groups[:1]
    tokenize_groups(groups, tokenizer, 300)
    methods = ",".join(LOCAL) + ("" if needs_arctic.args[0] else ",suffix,suffix-tuned")
    for result in run_trace_bench(groups, budget_methods(methods, [2, 8, 80]), len(tokenizer)):
        assert result.most_drafted <= result.spec.budget, result.spec.label
        assert result.acceptance() > 1.0


def test_the_json_carries_per_budget_rows(tmp_path):
    groups = _groups(tmp_path)
    data = trace_results_json(run_trace_bench(groups, budget_methods("stand,pld,recycle", [2, 8])), {},
                              reference="pld")
    block = data["budgets"]
    assert block["budgets"] == [2, 8] and block["methods"] == ["stand", "pld", "recycle"]
    assert [(r["label"], r["budget"]) for r in block["rows"]] == [(m, k) for m in block["methods"] for k in (2, 8)]
    for row in block["rows"]:
        assert row["tau"] >= 1.0 and row["most_drafted_per_step"] <= row["budget"]
        assert row["tau_per_drafted"] == pytest.approx(row["tau"] / row["nodes_per_step"])
        assert row["accepted_per_drafted"] == pytest.approx((row["tau"] - 1) / row["nodes_per_step"])
    assert set(block["best"]) == {"2", "8"} and all(label in block["methods"] for label in block["best"].values())
    stand = [e for e in data["results"] if e["label"] == "stand"]
    assert [e["budget"] for e in stand] == [2, 8] and [e["tree"] for e in stand] == ["dynamic-2", "dynamic-8"]
    assert all("ratio_vs_pld" in e for e in stand)  # against pld at the same budget


def test_bench_traces_budgets_cli_writes_table_json_and_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = write_traces(tmp_path / "t.jsonl", groups=2, per_group=2)
    result = CliRunner().invoke(app, ["bench-traces", str(path), "--methods", "stand,pld,recycle", "--max-tokens", "40",
                                      "--budgets", "2,8", "--json", str(tmp_path / "r.json"),
                                      "--png", str(tmp_path / "r.png")])
    assert result.exit_code == 0, result.output
    assert "K=2" in result.output and "K=8" in result.output and "τ per drafted token" in " ".join(result.output.split())
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["settings"]["budgets"] == [2, 8] and len(data["budgets"]["rows"]) == 6
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (["--budgets", "0"], "bad budget '0'"), (["--budgets", "abc"], "bad budget 'abc'"),
    (["--budgets", "2,100"], "budget 100 is more than stand-static drafts"),
    (["--budgets", "2,100", "--methods", "pld"], "budget 100 is within"),
    (["--budgets", "2", "--tree", "dynamic-16"], "--tree does not apply to a budget sweep"),
])
def test_bad_budgets_on_the_command_line_are_one_line_errors_before_any_work(tmp_path, args, message):
    path = write_traces(tmp_path / "t.jsonl", groups=1, per_group=2)
    # a tokenizer that cannot load: the budgets are refused before it is asked for
    result = CliRunner().invoke(app, ["bench-traces", str(path), "--tokenizer", "no-such-model-xyz", *args])
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    if message == "budget 100 is within":  # pld takes 100 (its chain): the run goes on to the tokenizer
        assert result.exit_code == 2 and "no-such-model-xyz" in result.output, result.output
        return
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], \
        result.output
