"""Search drivers (best-of-N, DVTS) over the decoding-backend seam, on the tiny model."""

import json
import re

import pytest

from conftest import DigitsTokenizer
from stand_runtime import HFBackend, Method, SamplingParams, StandError, generate
from treeopt.data.datasets import Prompt
from treeopt.evaluate.search import SearchSettings, dvts, run_search, summarize
from treeopt.evaluate.verifiers import ConfidenceVerifier, make_verifier
from test_cli import one_line_error, run


class RecordingBackend:
    """Passes requests to a backend and keeps every (request, completions) pair."""

    def __init__(self, backend):
        self.backend = backend
        self.calls = []
        self.batches = []  # requests per generate call

    def check_request(self, request):
        return self.backend.check_request(request)

    def generate(self, requests, **kwargs):
        out = self.backend.generate(requests, **kwargs)
        self.calls.extend(zip(requests, out))
        self.batches.append(len(requests))
        return out


PROBLEM = Prompt("p0", "3 1 4 1 5 3 1 4 1 5", answer="5")


@pytest.mark.parametrize("method, max_batch", [("ar", 4), ("stand", 1), ("stand", 4)])
def test_dvts_candidates_are_exactly_the_backends_samples(tiny_qwen2, method, max_batch):
    """Every candidate the verifier scored is a completion of a request the search made; the chosen
    step is the verifier's best; and with plain decoding each request, decoded again alone with its
    seed, gives the same samples (so batching changed nothing)."""
    tokenizer = DigitsTokenizer()
    backend = RecordingBackend(HFBackend(tiny_qwen2, tokenizer, method=Method.parse(method, "heuristic-80" if method == "stand" else None, tiny_qwen2, batch=max_batch), max_batch=max_batch))
    seen = []

    class Judge:
        name = "recorder"

        def score(self, problem, steps, candidates):
            seen.append((list(steps), [c.tokens for c in candidates]))
            return ConfidenceVerifier().score(problem, steps, candidates)

    settings = SearchSettings("dvts", n=4, subtrees=2, max_new_tokens=12, step_tokens=4, max_rounds=5,
                              sampling=SamplingParams(temperature=1.0, top_p=1.0), seed=11)
    result = dvts(backend, tokenizer, PROBLEM, settings, Judge(), vocab=16)
    assert result.rounds == 3 and len(backend.calls) == 6 and len(seen) == 6
    for (request, completions), (steps, scored) in zip(backend.calls, seen):
        assert scored == [c.tokens for c in completions] and len(scored) == 2
        assert request.group == "p0" and request.logprobs and len(request.prompt) == 10 + 4 * len(steps)
        for sample, completion in enumerate(completions):
            assert len(completion.logprobs) == len(completion.tokens) == 4
            if method == "ar":
                alone = generate(tiny_qwen2, None, list(request.prompt), method="ar", sampling=request.sampling,
                                 max_new_tokens=request.max_new_tokens, seed=request.seed_of(sample), eos_token_ids=[])
                assert alone.tokens == completion.tokens
    for subtree in range(2):  # each subtree's path is its chosen candidates, round by round
        rounds = [c for i, c in enumerate(backend.calls) if i % 2 == subtree]
        path = []
        for request, completions in rounds:
            assert list(request.prompt) == [int(t) for t in PROBLEM.text.split()] + path
            scores = [sum(c.logprobs) / len(c.logprobs) for c in completions]
            path += completions[scores.index(max(scores))].tokens
        assert result.texts[subtree] == " ".join(map(str, path))
    assert result.tokens == 6 * 2 * 4 and result.forwards <= result.tokens


def test_best_of_n_votes_and_grades(tiny_qwen2):
    tokenizer = DigitsTokenizer()
    backend = HFBackend(tiny_qwen2, tokenizer, method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=3), max_batch=3)
    settings = SearchSettings("best-of-n", n=3, max_new_tokens=6, sampling=SamplingParams(temperature=1.0), seed=3)
    results = run_search(backend, tokenizer, [PROBLEM, Prompt("p1", "2 7 2 7")], settings)
    first = results[0]
    assert len(first.answers) == 3 and first.answers == [t.split()[-1] for t in first.texts]
    assert first.answer == max(first.answers, key=first.answers.count)
    assert first.correct == (first.answer == "5") and results[1].correct is None
    summary = summarize(results)
    assert summary["tokens"] == 2 * 3 * 6 and summary["graded"] == 1 and summary["acceptance_length"] >= 1.0
    json.dumps([r.as_dict() for r in results])


@pytest.mark.parametrize("strategy", ["best-of-n", "dvts"])
def test_problems_in_flight_share_the_batch_and_draw_the_samples_they_draw_alone(tiny_qwen2, strategy):
    """Problems searched together go to the backend in one call (DVTS: each round's requests), rows
    refilled across them; each problem keeps its own seeds, so plain decoding gives every problem the
    same samples, answers and rounds as one problem at a time; the wall time is shared among them.
    Every sample of the search (each problem, DVTS round, subtree and candidate) draws its own seed."""
    tokenizer = DigitsTokenizer()
    problems = [PROBLEM, Prompt("p1", "2 7 2 7", answer="7"), Prompt("p2", "1 2 3 1 2 3 1")]
    dvts_run = strategy == "dvts"
    shape = dict(n=4, subtrees=2, step_tokens=3, max_rounds=3) if dvts_run else dict(n=3)
    runs, calls = [], []
    for in_flight in (1, 2, 3):
        backend = RecordingBackend(HFBackend(tiny_qwen2, tokenizer, "ar", max_batch=2))
        settings = SearchSettings(strategy, max_new_tokens=8, sampling=SamplingParams(temperature=1.0), seed=5,
                                  in_flight=in_flight, **shape)
        runs.append(run_search(backend, tokenizer, problems, settings, ConfidenceVerifier() if dvts_run else None, 16))
        calls.append(backend.batches)
    for results in runs:
        assert [(r.id, r.texts, r.answers, r.tokens, r.rounds) for r in results] == \
            [(r.id, r.texts, r.answers, r.tokens, r.rounds) for r in runs[0]]
        assert all(r.seconds > 0 for r in results)
    seeds = [request.seed_of(sample) for request, _ in backend.calls for sample in range(request.n)]
    assert len(set(seeds)) == len(seeds), "two samples drew one seed (rounds, subtrees and problems each draw afresh)"
    if dvts_run:  # two subtrees a problem and round: 2, 4 and 6 requests a call while every problem runs
        assert max(r.rounds for r in runs[0]) >= 2, "one round only: the seeds of later rounds went unchecked"
        assert max(calls[0]) == 2 and max(calls[1]) == 4 and max(calls[2]) == 6
    else:
        assert calls == [[1, 1, 1], [2, 1], [3]]


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be an integer in [1, 65536], got 0"),
    ({"strategy": "dvts", "n": 6, "subtrees": 4}, "subtrees (4) must divide n (6)"),
    ({"strategy": "beam"}, "unknown strategy 'beam'"),
    ({"step_tokens": 0}, "step_tokens must be an integer >= 1"),
])
def test_bad_search_settings_are_one_line(kwargs, message):
    with pytest.raises(StandError, match=re.escape(message)) as error:
        SearchSettings(**kwargs)
    assert "\n" not in str(error.value)


def test_empty_problem_list_and_unknown_verifier(tiny_qwen2):
    with pytest.raises(StandError, match="at least one problem"):
        run_search(HFBackend(tiny_qwen2, DigitsTokenizer(), "ar"), DigitsTokenizer(), [], SearchSettings())
    with pytest.raises(StandError, match=r"unknown verifier 'oracle' \(valid: confidence, prm:PATH"):
        make_verifier("oracle")
    with pytest.raises(StandError, match="no process reward model folder /no/such/folder"):
        make_verifier("prm:/no/such/folder")  # a path: said so, not a hub-id error
    with pytest.raises(StandError, match="cannot load the process reward model 'nobody/no-such-prm'"):
        make_verifier("prm:nobody/no-such-prm")  # a hub id that is not in the local cache
    assert make_verifier(lambda problem, steps, text: 1.0).name == "<lambda>"


def test_search_cli_runs_both_strategies_and_rejects_bad_input(tmp_path, monkeypatch):
    from conftest import tiny_model

    monkeypatch.setattr("treeopt_cli.loading.load_model", lambda *args: (tiny_model(), DigitsTokenizer()))
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"problem": "3 1 4 1 5 3 1 4", "answer": str(a)}) for a in (1, 5)) + "\n")
    out = tmp_path / "search.json"
    code, output = run("search", "--dataset", str(data), "--samples", "2", "--strategy", "dvts", "--n", "4",
                       "--subtrees", "2", "--max-new-tokens", "6", "--step-tokens", "3", "--tree", "heuristic-80",
                       "--methods", "ar,stand", "--json", str(out))
    assert code == 0, output
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"ar", "stand"} and report["summary"]["ar"]["problems"] == 2
    assert report["settings"]["problems_done"] == 2  # an interrupted run's file says how far it got
    assert report["settings"]["tree"] == "heuristic-80"
    from treeopt_cli.search import _default_trees  # without --tree: the defaults decoded on, not null

    assert _default_trees(["ar", "stand", "stand-det"]) == {"stand": "dynamic-auto", "stand-det": "auto"}
    assert _default_trees(["ar", "pld"]) is None
    assert "x plain" in output and "ceiling" in output
    stand = report["summary"]["stand"]  # the ceiling of its measured acceptance, at the run's batch
    assert stand["acceptance_by_depth"] and stand["drafted_per_row_step"] > 0
    assert stand["ceiling"]["batch"] == 4 and stand["ceiling"]["speedup"] >= 1.0
    assert report["latency_profile"]["sizes"] and "ceiling" not in report["summary"]["ar"]
    code, output = run("search", "--dataset", str(data), "--samples", "2", "--n", "2", "--max-new-tokens", "4",
                       "--methods", "ar", "--max-batch", "2", "--in-flight", "2", "--json", str(out))
    assert code == 0, output
    report = json.loads(out.read_text())
    assert report["settings"]["in_flight"] == 2 and report["settings"]["problems_done"] == 2
    code, output = run("search", "--dataset", str(data), "--samples", "2", "--n", "2", "--max-new-tokens", "6",
                       "--methods", "ar,stand", "--tree", "dynamic-6", "--cross-prompt", "--json", str(out))
    assert code == 0, output  # each problem's store over one cross-prompt memory (tests/lossless: the identity)
    report = json.loads(out.read_text())
    assert report["settings"]["cross_prompt"] and report["summary"]["stand"]["problems"] == 2
    code, output = run("search", "--dataset", str(data), "--samples", "2", "--n", "4", "--max-new-tokens", "24",
                       "--methods", "ar,stand", "--tree", "dynamic-auto-8", "--max-batch", "4", "--json", str(out))
    assert code == 0, output
    report = json.loads(out.read_text())
    assert report["settings"]["tree"] == "dynamic-auto-8"
    sizing = report["summary"]["stand"]["batched_sizing"]  # the value rule's forecasts against what came
    assert sizing["forwards"] == sum(cell["forwards"] for cell in sizing["bins"]) > 0
    plain_steps = [cell for cell in sizing["bins"] if cell["high"] == 1]  # no drafts: each row emits one token, as predicted
    assert all(cell["predicted_tokens"] == cell["observed_tokens"] <= 4 for cell in plain_steps)
    assert "batched sizing: predicted vs observed" in output and "batched_sizing" not in report["summary"]["ar"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for args, message in (
        (["--dataset", str(empty)], "is empty"),
        (["--dataset", str(data), "--strategy", "dvts", "--n", "6", "--subtrees", "4"], "must divide n"),
        (["--dataset", str(data), "--n", "0"], "Invalid value for '--n'"),
        (["--dataset", str(data), "--in-flight", "0"], "Invalid value for '--in-flight'"),
        (["--dataset", str(data), "--strategy", "dvts", "--verifier", "oracle"], "unknown verifier"),
        (["--dataset", str(data), "--methods", "nope"], "unknown method"),
    ):
        code, output = run("search", "--samples", "2", *args)
        assert code == 2
        one_line_error(output, message)


@pytest.mark.parametrize("in_flight", [1, 2])
@pytest.mark.parametrize("strategy", ["best-of-n", "dvts"])
def test_a_problem_beyond_the_context_is_named_before_any_problem_decodes(tiny_qwen2, strategy, in_flight):
    """The late problem is refused before the first one decodes, whichever window it falls in."""
    tokenizer = DigitsTokenizer()
    backend = RecordingBackend(HFBackend(tiny_qwen2, tokenizer, "ar", max_batch=2))
    context = tiny_qwen2.config.max_position_embeddings
    problems = [PROBLEM, Prompt("too-long", " ".join(["3"] * context))]
    settings = SearchSettings(strategy, n=2, subtrees=2 if strategy == "dvts" else 1, max_new_tokens=4,
                              in_flight=in_flight)
    with pytest.raises(StandError, match="^problem too-long: context too long") as error:
        run_search(backend, tokenizer, problems, settings, ConfidenceVerifier(), 16)
    assert "\n" not in str(error.value) and backend.calls == []


@pytest.mark.parametrize("strategy", ["best-of-n", "dvts"])
def test_a_prompt_that_cannot_be_encoded_is_named_before_any_decoding(tiny_qwen2, strategy):
    """A problem whose prompt cannot be encoded (empty text) is refused with its id before the first
    problem decodes."""
    tokenizer = DigitsTokenizer()
    backend = RecordingBackend(HFBackend(tiny_qwen2, tokenizer, "ar", max_batch=2))
    settings = SearchSettings(strategy, n=2, subtrees=2 if strategy == "dvts" else 1, max_new_tokens=4)
    with pytest.raises(StandError, match="^problem blank: ") as error:
        run_search(backend, tokenizer, [PROBLEM, Prompt("blank", "")], settings, ConfidenceVerifier(), 16)
    assert "\n" not in str(error.value) and backend.calls == []


@pytest.mark.parametrize("target", ["/dev/stdout", "-"])
def test_search_json_to_dev_stdout_is_one_document_alone_on_stdout(tmp_path, target):
    """``--json /dev/stdout`` (redirected with ``>``, or a pipe): one JSON document, written once at the
    end, with the tables and progress on stderr; before, the file was rewritten after every problem,
    giving one document per problem, and the table printed after it overwrote the first. ``--json -``
    is the same (it wrote a file named ``-``)."""
    import os
    import subprocess
    import sys

    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"problem": "3 1 4 1 5 3 1 4", "answer": str(a)}) for a in (1, 5)) + "\n")
    from conftest import ROOT

    code = ("import sys, treeopt_cli.loading\nfrom conftest import DigitsTokenizer, tiny_model\n"
            "treeopt_cli.loading.load_model = lambda *args: (tiny_model(), DigitsTokenizer())\n"
            "from treeopt_cli.app import app\n"
            "sys.exit(app(sys.argv[1:], standalone_mode=False))\n")
    args = ["search", "--dataset", str(data), "--samples", "2", "--n", "2", "--max-new-tokens", "4", "--methods", "ar",
            "--json", target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        done = subprocess.run([sys.executable, "-c", code, *args], stdout=stdout, stderr=stderr, env=env, cwd=tmp_path)
    assert done.returncode == 0, err.read_text()
    report = json.loads(out.read_text())  # the whole of stdout is one document
    assert report["settings"]["problems_done"] == 2 and "x plain" in err.read_text()
    assert not (tmp_path / "-").exists()
