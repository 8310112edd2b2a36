"""Trace replay (issue 13): recorded traces through the drafters on the engine's own steps."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from conftest import full_logits
from stand_runtime import Method, RecyclingMatrix, SamplingParams, StandError, generate, replay_trace, verify_greedy
from stand_runtime.drafters import store_params
from stand_runtime.engine.trace_replay import RecordedTop
from stand_runtime.randomness import RandomStream
from stand_runtime.target.sampling import top_target_probs
from stand_runtime.drafters.suffix_decoding import suffix_draft
from treeopt.evaluate.trace_bench import parse_trace_methods, run_trace_bench, trace_results_json
from treeopt.data.traces import load_traces, tokenize_groups
from conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"
PROMPT = [3, 1, 4, 1, 5] * 6
GREEDY = SamplingParams(temperature=0.0)
needs_arctic = pytest.mark.skipif(
    __import__("importlib").util.find_spec("arctic_inference") is None,
    reason="method 'suffix' needs arctic-inference (pip install --no-deps arctic-inference; README Quickstart line 2)")


def recorded_rows(model, sequence):
    """The rows the engine's greedy STAND store records along ``sequence`` (softmax top-10)."""
    ids, probs = top_target_probs(full_logits(model, sequence)[:-1], store_params(GREEDY), 10)
    return RecordedTop(ids.numpy(), probs.double().numpy())


@pytest.mark.parametrize("method", ["stand", "stand-det", "stand[dynamic-80]", "pld",
                                    pytest.param("suffix", marks=needs_arctic)])
def test_replay_of_own_greedy_output_takes_the_engines_steps(tiny_qwen2, method):
    """Replaying the tiny model's greedy output (with the rows the engine's store records) through
    the same drafter gives exactly the engine's steps: tokens, drafted nodes and accepted drafts per
    step. Token Recycling is left out: the engine also feeds it rows of rejected nodes, which no
    recording holds."""
    from stand_runtime.drafters import new_memory

    tree = "dynamic-80" if method.endswith("[dynamic-80]") else "heuristic-80" if method.startswith("stand") else None
    method = method.removesuffix("[dynamic-80]")
    # one shared memory each, as best-of-N: the second trajectory drafts from what the first left
    engine_memory, replay_memory = new_memory(method, 16, tree), new_memory(method, 16, tree)
    for trajectory in range(2):
        engine = generate(tiny_qwen2, None, PROMPT, method=Method.parse(method, tree, tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[], store=engine_memory)
        sequence = PROMPT + engine.tokens
        drafter = Method.parse(method, tree).drafter(replay_memory, RandomStream.seeded(0), GREEDY, 16)
        replay = replay_trace(drafter, PROMPT, engine.tokens, recorded_rows(tiny_qwen2, sequence)).stats
        assert replay.tokens_per_step == engine.stats.tokens_per_step, (method, trajectory)
        assert replay.drafted_per_step == engine.stats.drafted_per_step
        assert replay.accepted_per_step == engine.stats.accepted_per_step
        assert replay.acceptance_length == engine.stats.acceptance_length
    assert sum(engine.stats.accepted_per_step) >= 10, "drafts were rarely accepted: the comparison proves little"


@pytest.mark.parametrize("method", ["pld", pytest.param("suffix", marks=needs_arctic)])
def test_token_only_drafters_replay_exactly_without_recorded_rows(tiny_qwen2, method):
    """Prompt lookup and SuffixDecoding learn only tokens: a plain one-hot replay equals the engine."""
    engine = generate(tiny_qwen2, None, PROMPT, sampling=SamplingParams(temperature=0), method=method, max_new_tokens=50, eos_token_ids=[])
    drafter = Method.parse(method, None).drafter(None, RandomStream.seeded(0), GREEDY, 16)
    replay = replay_trace(drafter, PROMPT, engine.tokens).stats
    assert replay.tokens_per_step == engine.stats.tokens_per_step
    assert sum(replay.accepted_per_step) >= 5


def test_recycling_replay_feeding_puts_the_observed_successor_first():
    matrix = RecyclingMatrix(10, k=3)
    matrix.push([1, 1, 1, 1, 2], [4, 5, 4, 6, 7])
    assert matrix.successors[1, : matrix.sizes[1]].tolist() == [6, 4, 5]
    assert matrix.successors[2, : matrix.sizes[2]].tolist() == [7]
    assert not matrix.filled[3]
    drafter = Method.parse("recycle", "heuristic-80").drafter(matrix, RandomStream.seeded(0), GREEDY, 10)
    draft = drafter.draft([0, 1], 5)
    assert draft.tokens[1:4] == [6, 4, 5]  # the root's children: row 1, most recent first


def test_replay_refuses_empty_input_and_sampling():
    with pytest.raises(StandError, match="needs a prompt and tokens"):
        replay_trace(None, [1], [])
    drafter = Method.parse("pld", None).drafter(None, RandomStream.seeded(0), GREEDY, 10)
    result = replay_trace(drafter, [1, 2, 3, 1, 2], [3, 1, 2, 3])
    assert result.stats.new_tokens == 4 and result.stats.target_forwards < 4


@needs_arctic
def test_suffix_draft_is_a_dynamic_tree_with_its_own_parent_array():
    """A SuffixDecoding tree (parents + tokens) becomes a Draft whose parent array is its own (no
    static tree), depth-limited, and greedy verification walks it."""
    tokens, parents = [5, 6, 7, 8, 9], [-1, 0, 0, 2, 3]  # 5 → {6, 7 → 8 → 9}
    draft = suffix_draft(4, tokens, parents, max_depth=3)
    assert draft.nodes is None and draft.parents.tolist() == [-1, 0, 1, 1, 3]
    assert draft.tokens == [4, 5, 6, 7, 8] and draft.children[1] == [2, 3]  # 9 lies at depth 4: dropped
    truth = {0: 5, 1: 7, 3: 8, 4: 1}  # the target's argmax after each on-path node
    verification = verify_greedy(draft, lambda position: truth[position])
    assert verification.accepted == [1, 3, 4] and verification.token == 1
    with pytest.raises(StandError, match="not an earlier node"):
        suffix_draft(4, [5, 6], [1, -1], 8)


@needs_arctic
def test_suffix_drafts_from_earlier_trajectories():
    from stand_runtime import SuffixMemory

    memory = SuffixMemory()
    first = Method.parse("suffix", None).drafter(memory, RandomStream.seeded(0), GREEDY, 100)
    text = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19] * 2
    replay_trace(first, [1, 2], text)
    second = Method.parse("suffix", None).drafter(memory, RandomStream.seeded(0), GREEDY, 100)
    draft = second.draft([1, 2, 10, 11, 12], 20)
    assert draft.tokens[1:4] == [13, 14, 15]
    assert memory.stats()["requests"] == 2 and memory.stats()["approx_bytes"] > 0


def write_traces(path, groups=3, per_group=3, length=60):
    """A fixture of repetitive traces: group g's traces share a body with small edits."""
    rng = np.random.default_rng(0)
    lines = []
    for g in range(groups):
        words = [f"w{g}{i}" for i in range(12)]
        for t in range(per_group):
            body = " ".join(words[int(i)] for i in rng.integers(0, 12, length))
            lines.append(json.dumps({"sample_group": f"g{g}", "problem": f"problem {g}: " + " ".join(words[:5]),
                                     "trace": f"Let me think. {body} So the answer is {g}."}))
    path.write_text("\n".join(lines) + "\n")
    return path


class WordTokenizer:
    """One token per word (ids in order of first appearance)."""

    def __init__(self) -> None:
        self.vocab: dict = {}

    def __call__(self, text, add_special_tokens=False):
        encode = lambda s: [self.vocab.setdefault(w, len(self.vocab)) for w in s.split()]
        return {"input_ids": [encode(t) for t in text] if isinstance(text, list) else encode(text)}


def test_trace_bench_on_a_fixture(tmp_path):
    groups, skipped = load_traces(write_traces(tmp_path / "t.jsonl"))
    assert skipped == 0 and [len(g.traces) for g in groups] == [3, 3, 3]

    tokenize_groups(groups, WordTokenizer(), max_tokens=50)
    assert all(len(ids) == 50 for g in groups for ids in g.trace_ids)
    methods = parse_trace_methods("stand,pld,recycle")
    results = run_trace_bench(groups, methods)
    data = trace_results_json(results, {}, reference="pld")
    by_label = {r["label"]: r for r in data["results"]}
    assert set(by_label) == {"stand", "pld", "recycle"}
    for r in data["results"]:
        assert len(r["acceptance_by_trajectory"]) == 3
        low, high = r["interval_pooled_95"]
        assert low <= r["acceptance_pooled"] <= high and r["acceptance_pooled"] >= 1.0
        assert r["tokens"] == 9 * 50
    assert by_label["stand"]["acceptance_by_trajectory"][2] > by_label["stand"]["acceptance_by_trajectory"][0]
    assert "ratio_vs_pld" in by_label["stand"] and any("recycle" in note for note in data["notes"])
    with pytest.raises(StandError, match="unknown method 'magic'"):
        parse_trace_methods("stand,magic")


@pytest.mark.parametrize("content, message", [
    ("", "holds no traces"),
    ('{"sample_group": "a", "problem": "p"}\n', "no field 'trace'"),
    ('{"sample_group": "a", "problem": "p", "trace": "t"}\nnot json\n', ":2: not valid JSON"),
    ('[1, 2]\n', "must be a JSON object"),
    ('{"group": "a", "problem": "p", "trace": "t"}\n', "no field 'sample_group'"),
])
def test_bad_traces_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(StandError, match=message):
        load_traces(path, min_group_size=1)
    result = CliRunner().invoke(app, ["bench-traces", str(path), "--min-group-size", "1"])
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output


def test_bench_traces_cli_writes_table_json_and_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = write_traces(tmp_path / "t.jsonl", groups=2, per_group=2)
    result = CliRunner().invoke(app, ["bench-traces", str(path), "--methods", "stand,pld,recycle", "--max-tokens", "40",
                                      "--json", str(tmp_path / "r.json"), "--png", str(tmp_path / "r.png")])
    assert result.exit_code == 0, result.output
    assert "pooled" in result.output and "observed successor" in " ".join(result.output.split())
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["label"] for r in data["results"]] == ["stand", "pld", "recycle"]
    assert data["settings"]["groups"] == 2 and (tmp_path / "r.png").stat().st_size > 0
    result = CliRunner().invoke(app, ["bench-traces", str(path), "--group-field", "nope"])
    assert result.exit_code == 2 and "no field 'nope'" in result.output


def test_a_cross_prompt_memory_reaches_a_later_groups_first_trace(tmp_path):
    """Two groups of one body (different problems): with ``cross_prompt`` the second group's first trace
    drafts from the first group's (STAND over the memory, SuffixDecoding's memory shared) and takes fewer
    steps; prompt lookup has no memory. (STAND's first group drafts over a memory of its own
    observations, which weighs them twice in the blend: its steps may differ.)"""
    body = " ".join(f"w{i % 7}{i % 5}" for i in range(80))
    lines = [json.dumps({"sample_group": f"g{g}", "problem": f"problem {g} alone", "trace": body + f" answer {g} {t}"})
             for g in range(2) for t in range(2)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines))
    groups, _ = load_traces(tmp_path / "t.jsonl")
    tokenize_groups(groups, WordTokenizer(), max_tokens=90)
    methods = parse_trace_methods("stand,pld" + ("" if needs_arctic.args[0] else ",suffix-tuned"))
    alone, shared = (run_trace_bench(groups, methods, cross_prompt=on) for on in (False, True))
    for a, b in zip(alone, shared):
        steps = a.runs[:, 0, 1], b.runs[:, 0, 1]  # steps of each group's first trace
        if a.spec.label == "pld":
            assert np.array_equal(*steps)
        else:
            assert steps[1][1] < steps[0][1] and (a.spec.label == "stand" or steps[1][0] == steps[0][0]), a.spec.label
    with pytest.raises(StandError, match="cross_prompt must be True or False"):
        run_trace_bench(groups, methods, cross_prompt="yes")


@pytest.mark.skipif(not (SHARED / "traces_skythought.jsonl").is_file(), reason="shared trace data not present")
def test_real_traces_replay_a_few_groups():
    """Two AIME groups of the shared Sky-T1 traces, 400 tokens: every drafter accepts drafts."""
    from stand_runtime import load_tokenizer

    groups, skipped = load_traces(SHARED / "traces_skythought.jsonl", min_group_size=6)
    assert skipped == 100 and len(groups) == 30
    groups = groups[:2]
    tokenizer = load_tokenizer()
    tokenize_groups(groups, tokenizer, 400)
    methods = parse_trace_methods("stand,pld" + ("" if needs_arctic.args[0] else ",suffix-tuned"))
    results = run_trace_bench(groups, methods, len(tokenizer))
    for result in results:
        assert result.acceptance() > 1.3, result.spec.label
        assert result.runs.shape[:2] == (2, 6)


def test_trace_calibration_equals_direct_greedy_calibration(tiny_qwen2):
    """Greedy replay calibration of the tiny model's own greedy output (recorded with the rows the
    engine's store records) gives exactly the direct calibration's per-node acceptance counts and
    steps: two trajectories sharing one store, a 40-node candidate tree."""
    from treeopt.optimize.calibrate import CalibrationConfig, direct_prompt
    from treeopt.optimize.candidate import candidate_tree
    from treeopt.optimize.replay import replay_trajectory
    from stand_runtime import NGramStore
    from treeopt.optimize.trace_calibration import trace_recording

    candidate = candidate_tree(40)
    config = CalibrationConfig(temperature=0.0, trajectories=2, max_new_tokens=50, deterministic_drafts=True)
    direct, direct_steps, _ = direct_prompt(config, tiny_qwen2, None, PROMPT, 0, candidate)
    trace = generate(tiny_qwen2, None, PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=50, eos_token_ids=[]).tokens
    rows = recorded_rows(tiny_qwen2, PROMPT + trace)
    store, replayed, steps = NGramStore(), np.zeros(candidate.num_nodes + 1), 0
    for _ in range(2):
        steps += replay_trajectory(PROMPT, trace, trace_recording(PROMPT, trace, (rows.ids, rows.probs)), candidate,
                                   store, RandomStream.seeded(0), replayed, stochastic=False, budget=50,
                                   segmentations=1)
    assert direct.sum() > 20, "nothing was accepted: the comparison proves nothing"
    np.testing.assert_array_equal(replayed, direct)
    assert steps == direct_steps


def test_calibrate_traces_cli_writes_an_exportable_calibration(tmp_path):
    from treeopt.optimize.calibration import load_calibration

    path = write_traces(tmp_path / "t.jsonl", groups=2, per_group=2)
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(app, ["calibrate", "--traces", str(path), "--candidate-nodes", "60", "--max-tokens", "40",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    calibration = load_calibration(out)
    assert len(calibration.per_prompt) == 2 and calibration.metadata["source"] == "traces"
    assert 1.0 < calibration.expected_acceptance_length and np.all(calibration.alpha <= 1.0)
    result = CliRunner().invoke(app, ["export", str(out), "--nodes", "8", "--out", str(tmp_path / "tree.json")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["calibrate", "--traces", str(tmp_path / "missing.jsonl"), "--out", str(out)])
    assert result.exit_code == 2 and "no traces file" in result.output
    result = CliRunner().invoke(app, ["calibrate", "--traces", "/dev/null", "--out", str(out)])  # read, never written
    assert result.exit_code == 2 and "is not a regular file" in result.output


def test_trace_bench_tree_goes_to_the_methods_that_take_it():
    specs = {s.label: s.tree for s in parse_trace_methods("stand,stand-det,stand-static,pld,recycle", "dynamic-8")}
    assert specs == {"stand": "dynamic-8", "stand-det": "dynamic-8", "stand-static": "stand-smollm2-humaneval-80",
                     "pld": None, "recycle": "heuristic-80"}
    assert parse_trace_methods("recycle", "stand-smollm2-humaneval-80")[0].tree == "stand-smollm2-humaneval-80"


def test_a_value_sized_tree_replays_sized_by_a_given_profile(tmp_path):
    """The trace bench sizes dynamic-auto by the profile it is given (no forward to observe, so no
    step drafts nothing to explore): a flat profile drafts about what the fixed budget does, a steep
    one far fewer nodes for a lower but close acceptance length; without a profile it is refused."""
    from stand_runtime import LatencyProfile

    groups, _ = load_traces(write_traces(tmp_path / "t.jsonl"))

    tokenize_groups(groups, WordTokenizer(), max_tokens=50)
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    flat, steep = (LatencyProfile(sizes, tuple(1.0 + slope * s for s in sizes)) for slope in (1e-4, 0.05))
    with pytest.raises(StandError, match="give --latency FILE"):
        parse_trace_methods("stand", "dynamic-auto-16")
    fixed = run_trace_bench(groups, parse_trace_methods("stand", "dynamic-16"))[0]
    results = {}
    for name, profile in (("flat", flat), ("steep", steep)):
        method = parse_trace_methods("stand", "dynamic-auto-16", latency=profile)[0]
        assert method.sizing is not None and not method.sizing.rule(16).latency.explore()
        results[name] = run_trace_bench(groups, [method])[0]
    nodes = {name: r.nodes_per_step for name, r in (("fixed", fixed), *results.items())}
    tau = {name: r.acceptance() for name, r in (("fixed", fixed), *results.items())}
    assert nodes["steep"] < 0.7 * nodes["fixed"] and nodes["flat"] > nodes["steep"], nodes
    assert tau["flat"] >= 0.95 * tau["fixed"] and tau["steep"] > 1.0, tau
