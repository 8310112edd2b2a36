"""Benchmark plumbing: method parsing, answer extraction and majority vote, a tiny interleaved run."""

import pytest

from conftest import DigitsTokenizer, tiny_model
from stand_runtime import SamplingParams, StandError
from treeopt.evaluate.answers import extract_answer, last_boxed, majority_vote, normalise
from treeopt.evaluate.bench import parse_methods, results_json, run_bench, speedups
from treeopt.data.datasets import Prompt


def test_parse_methods_and_unknown_method():
    specs = parse_methods("ar,pld,recycle,stand-det,stand", ["a.json", "heuristic-80"])
    assert [s.label for s in specs] == ["ar", "pld", "recycle[a.json]", "recycle[heuristic-80]", "stand-det[a.json]",
                                        "stand-det[heuristic-80]", "stand[a.json]", "stand[heuristic-80]"]
    defaults = parse_methods("recycle,stand", None)  # each tree method runs on its own default tree
    assert [(s.label, s.tree_name) for s in defaults] == [("recycle", "heuristic-80"), ("stand", "dynamic-auto")]
    with pytest.raises(StandError, match="unknown method .beam. .valid: stand, stand-det, pld, recycle, suffix, ar"):
        parse_methods("ar,beam", None)
    both = parse_methods("ar,stand,stand+rejected", None)
    assert [(s.label, s.feed_rejected) for s in both] == [("ar", False), ("stand", False), ("stand+rejected", True)]
    with pytest.raises(StandError, match="unknown method 'pld.rejected' .valid: stand, .*, stand-det.rejected"):
        parse_methods("pld+rejected", None)


@pytest.mark.parametrize(
    "text, answer",
    [
        ("so the answer is \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{ 1,234 }", "1234"),
        ("She makes 9 * 2 = $18 every day.", "18"),
        ("x = -4.0", "-4"),
        ("she pays $3.50", "3.5"),  # a decimal's trailing zeros go as 18.00's do: 3.50 matches 3.5
        ("it drops to -0 degrees", "0"),
        ("about 1e5 people", "100000"),  # an exponent is read, not just its last digits (was "5")
        ("\\boxed{1.0E+5}", "100000"),
        ("rate 2.5e-3", "0.0025"),
        ("agent 007", "7"),
        ("\\boxed{1e999}", "1e999"),  # too long to spell out: kept as written
        ("\\boxed{1e99999999999}", "1e99999999999"),  # past Decimal's exponent range: no Overflow
        ("1e-999999999", "1e-999999999"),  # tiny, not zero
        ("12345678901234567890123456789012345", "12345678901234567890123456789012345"),  # not rounded to 28 digits
        ("\\boxed{1.2345678901234567890123456789012345}", "1.2345678901234567890123456789012345"),
        ("about -.5 of it", "-0.5"),
        ("\\boxed{5.}", "5"),
        ("+5 points", "5"),
        ("\u22125 degrees", "-5"),  # a Unicode minus
        ("no answer here", None),
        ("it costs \\boxed{1{,}000} dollars", "1000"),  # LaTeX's grouping comma
        ("\\boxed{12\\,345}", "12345"),
        ("about 1\u202f000\u00a0000 stars", "1000000"),  # narrow and plain no-break spaces group digits
        ("so 3,\n4", "4"),  # a comma before a non-digit ends the number
        ("\\boxed{1 000}", "1000"),
        # a user test: every comma went, so tuples and lists collapsed into one number
        ("\\boxed{1,23}", "1,23"),
        ("\\boxed{(1, 2)}", "(1,2)"),
        ("\\boxed{3, 5, 7}", "3,5,7"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{18\\%}", "18"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{90^\\circ}", "90"),
        ("\\boxed{\\left( 1, -2 \\right)}", "(1,-2)"),
        ("\\boxed{\\dfrac{1}{2}\\,\\text{cm}}", "\\frac{1}{2}"),
        ("Page 5-6", "6"),  # a hyphen after a word is no minus sign
        ("so 1,2 and 3", "3"),
        ("it is 12,3456", "3456"),  # digits grouped by threes only
        ("\\boxed{11,\\! 111,\\! 111}", "11111111"),  # MATH's grouping comma
        ("\\boxed{\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix}-1\\\\2\\end{pmatrix}"),  # a new line stays
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_normalise_spells_numbers_exactly_whatever_the_decimal_context():
    import decimal

    with decimal.localcontext() as context:
        context.prec = 5
        assert normalise("123456789") == "123456789"
    assert normalise("1" * 60) == "1" * 60 and normalise("1" * 61) == "1" * 61
    assert normalise("1e" + "9" * 5000) == "1e" + "9" * 5000


def test_majority_vote_and_unbalanced_boxed():
    assert majority_vote(["3", None, "4", "3"]) == "3"
    assert majority_vote(["4", "3"]) == "4"
    assert majority_vote([None, None]) is None
    assert last_boxed("\\boxed{1") is None


def test_interleaved_bench_with_trajectories_and_accuracy():
    model = tiny_model()
    prompts = [Prompt("a", "3 1 4 1 5 3 1 4 1 5", answer="7"), Prompt("b", "2 7 2 7 2 7")]
    specs = parse_methods("ar,pld,recycle,stand", ["heuristic-80"])
    saved = []
    results = run_bench(model, DigitsTokenizer(), prompts, specs, sampling=SamplingParams(0.8, 0.95),
                        max_new_tokens=12, seed=0, trajectories=3,
                        on_prompt=lambda done, partial: saved.append((done, partial[0].tokens)))
    assert saved == [(1, 3 * 12), (2, 2 * 3 * 12)]  # partial results after every prompt
    assert [r.label for r in results] == ["ar", "pld", "recycle[heuristic-80]", "stand[heuristic-80]"]
    assert [r.tree for r in results] == [None, None, "heuristic-80", "heuristic-80"]
    for result in results:
        assert result.tokens == 2 * 3 * 12 and len(result.by_trajectory) == 3
        assert result.graded == 1 and result.accuracy in (0.0, 1.0)
        assert result.trajectories_graded == 3 and 0 <= result.trajectories_correct <= 3
    assert results[0].acceptance_length == 1.0
    assert speedups(results)["ar"] == pytest.approx(1.0)
    data = results_json(results, {"samples": 2})
    assert {"method", "tree", "acceptance_length", "tokens_per_s", "speedup", "accuracy"} <= set(data["results"][0])


def test_bench_diagnostics_add_up():
    """Per-depth acceptance counts the accepted tokens; root shares cover every STAND step root."""
    model = tiny_model()
    prompts = [Prompt("a", "3 1 4 1 5 3 1 4 1 5"), Prompt("b", "2 7 2 7 2 7")]
    results = run_bench(model, DigitsTokenizer(), prompts, parse_methods("ar,pld,stand", ["heuristic-80"]),
                        sampling=SamplingParams(0.8, 0.95), max_new_tokens=16, seed=1, trajectories=2)
    ar, pld, stand = results
    assert ar.diagnostics()["acceptance_by_depth"] == []
    for result in (pld, stand):
        by_depth = result.diagnostics()["acceptance_by_depth"]
        accepted = sum(row["accepted"] for row in by_depth)
        assert accepted == sum(result.accepted_per_step) >= result.tokens - result.steps
        assert all(0 <= row["accepted"] <= row["offered"] for row in by_depth)
    diag = stand.diagnostics()
    root = diag["root"]
    assert sum(root[n]["share"] for n in root if n != "all") == pytest.approx(1.0)
    # every step drafts from its root unless the store misses, the budget is spent, or the step is the last
    assert sum(root[n]["steps"] for n in root if n != "all") >= stand.steps - 2 * 2 * 2
    assert 0.0 <= root["all"]["top1"] <= root["all"]["topm"] <= 1.0 and 0.0 <= root["all"]["overlap"] <= 1.0
    assert sum(diag["lookup_hit_rate_by_n"].values()) <= 1.0 and diag["lookups"] > 0
    from rich.console import Console

    from treeopt_cli.render import diagnostics_tables

    console = Console(record=True, width=200, markup=False)  # as the CLI: tree names look like markup
    for table in diagnostics_tables(results):
        console.print(table)
    text = console.export_text()
    assert "stand[heuristic-80]" in text and "pld" in text and "n=3" in text and "miss" in text
    assert "\n│ ar " not in text  # plain decoding drafts nothing: no row


def test_shared_store_across_prompts_keeps_learning():
    """With share_across_prompts the second prompt drafts from what the first one stored."""
    model = tiny_model()
    prompts = [Prompt("a", "3 1 4 1 5 3 1 4 1 5"), Prompt("b", "3 1 4 1 5")]
    lookups = {}
    for share in (False, True):
        results = run_bench(model, DigitsTokenizer(), prompts, parse_methods("stand", ["heuristic-80"]),
                            sampling=SamplingParams(0.8, 0.95), max_new_tokens=12, seed=0, share_across_prompts=share)
        lookups[share] = [store["lookups"] for store in results[0].final_stores]
    assert len(lookups[False]) == 2 and len(lookups[True]) == 1  # one store: its cumulative counters once
    assert lookups[True][0] > lookups[False][0]


def test_bench_json_has_intervals_bounds_and_time_split():
    from stand_runtime import LatencyProfile

    model = tiny_model()
    prompts = [Prompt(str(i), "3 1 4 1 5 3 1 4 1 5") for i in range(3)]
    results = run_bench(model, DigitsTokenizer(), prompts, parse_methods("ar,stand", ["heuristic-80"]),
                        sampling=SamplingParams(0.8, 0.95), max_new_tokens=8, seed=0, ignore_eos=True)
    profile = LatencyProfile((1, 2, 128), (0.01, 0.011, 0.05))
    data = results_json(results, {"samples": 3}, profile)
    ar, stand = data["results"]
    assert ar["tokens"] == stand["tokens"] == 3 * 8  # --ignore-eos: equal token counts
    low, high = stand["speedup_interval_95"]
    assert low <= stand["speedup"] <= high
    assert ar["latency_bound"] == pytest.approx(1.0) and stand["latency_bound"] > 0
    assert 0.0 <= stand["host_fraction"] < 1.0 and stand["forward_s"] > 0 and stand["mean_drafted"] > 0
    assert data["latency_profile"]["sizes"] == [1, 2, 128]
    # the tables a terminal of 80 columns shows: nothing folded, every method and figure on its row
    from rich.console import Console

    from treeopt_cli.render import bench_tables, diagnostics_tables
    from treeopt.evaluate.bench import latency_bounds, speedup_intervals, speedups

    console = Console(record=True, width=80, markup=False)
    ratios = speedups(results)
    for table in bench_tables(results, ratios, "bench", speedup_intervals(results), latency_bounds(results, profile)):
        console.print(table)
    for table in diagnostics_tables(results):
        console.print(table)
    text = console.export_text()
    assert "95% interval" in text and "drafted" in text and "τ by trajectory" not in text
    rows = [line for line in text.splitlines() if line.startswith("│ stand[heuristic-80]")]
    assert len(rows) == 4 and f"{ratios['stand[heuristic-80]']:.2f}×" in rows[0]
    plain_only = [r for r in results if r.method == "ar"]
    assert plain_only and diagnostics_tables(plain_only) == []  # plain decoding alone: no table of empty rows


def test_a_speedup_far_above_its_latency_bound_is_flagged():
    """From a user test: 1.84x plain at a bound of 1.33x (a kernel choice measured under load made plain
    decoding slow) was shown without a word; within the margin nothing is said."""
    from treeopt.evaluate.bench import MethodResult
    from treeopt_cli.bench import ABOVE_BOUND, speedup_warnings

    results = [MethodResult("ar", "ar", None, 0, per_prompt=[{}] * 3), MethodResult("stand", "stand", None, 8)]
    flagged = speedup_warnings(results, {"ar": 1.0, "stand": 1.84}, {}, {"ar": 1.0, "stand": 1.33})
    assert len(flagged) == 1 and "1.84x plain is above the 1.33x" in flagged[0] and "latency/" in flagged[0]
    assert speedup_warnings(results, {"ar": 1.0, "stand": 1.33 * ABOVE_BOUND * 0.99}, {}, {"ar": 1.0, "stand": 1.33}) == []
    assert speedup_warnings(results, {"ar": 1.0, "stand": 1.84}, {}) == []  # no profile, no bound


def test_the_step_roots_table_is_left_out_where_no_root_was_recorded():
    """A user test: at temperature 0 (no p recorded at the roots) the table printed a row of 0.00s."""
    from types import SimpleNamespace

    from treeopt_cli.render import diagnostics_tables

    def result(root_steps):
        diagnostics = {"acceptance_by_depth": [{"depth": 1, "offered": 4, "rate": 0.5}],
                       "root": {"0": {"steps": root_steps, "share": 1.0 if root_steps else 0.0}, "all": {"steps": 0, "share": 0.0}}}
        return SimpleNamespace(label="stand", method="stand", diagnostics=lambda: diagnostics)

    assert len(diagnostics_tables([result(0)])) == 1  # the acceptance rates only
    assert len(diagnostics_tables([result(4)])) == 2  # every root a miss: still a table
