"""Benchmark plumbing: method parsing, answer extraction and majority vote, a tiny interleaved run."""

import pytest

from conftest import DigitsTokenizer, tiny_model
from stand_runtime import StandError
from treeopt.answers import extract_answer, last_boxed, majority_vote
from treeopt.bench import parse_methods, results_json, run_bench, speedups
from treeopt.datasets import Prompt


def test_parse_methods_and_unknown_method():
    specs = parse_methods("ar,pld,recycle,stand-det,stand", ["a.json", "heuristic-80"])
    assert [s.label for s in specs] == ["ar", "pld", "recycle", "stand-det[a.json]", "stand-det[heuristic-80]",
                                        "stand[a.json]", "stand[heuristic-80]"]
    with pytest.raises(StandError, match="unknown method 'beam' .valid: stand, stand-det, pld, recycle, ar"):
        parse_methods("ar,beam", None)


@pytest.mark.parametrize(
    "text, answer",
    [
        ("so the answer is \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{ 1,234 }", "1234"),
        ("She makes 9 * 2 = $18 every day.", "18"),
        ("x = -4.0", "-4"),
        ("no answer here", None),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_majority_vote_and_unbalanced_boxed():
    assert majority_vote(["3", None, "4", "3"]) == "3"
    assert majority_vote(["4", "3"]) == "4"
    assert majority_vote([None, None]) is None
    assert last_boxed("\\boxed{1") is None


def test_interleaved_bench_with_trajectories_and_accuracy():
    model = tiny_model()
    prompts = [Prompt("a", "3 1 4 1 5 3 1 4 1 5", answer="7"), Prompt("b", "2 7 2 7 2 7")]
    specs = parse_methods("ar,pld,recycle,stand", ["heuristic-80"])
    results = run_bench(model, DigitsTokenizer(), prompts, specs, temperature=0.8, top_p=0.95,
                        max_new_tokens=12, seed=0, trajectories=3)
    assert [r.label for r in results] == ["ar", "pld", "recycle", "stand[heuristic-80]"]
    for result in results:
        assert result.tokens == 2 * 3 * 12 and len(result.by_trajectory) == 3
        assert result.graded == 1 and result.accuracy in (0.0, 1.0)
    assert results[0].acceptance_length == 1.0
    assert speedups(results)["ar"] == pytest.approx(1.0)
    data = results_json(results, {"samples": 2})
    assert {"method", "tree", "acceptance_length", "tokens_per_s", "speedup", "accuracy"} <= set(data["results"][0])
