"""The acceptance seed of value-sized trees: measured by calibration, saved, found per model, and what
the first step's estimate starts from (docs/algorithms.md §3.7)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import DigitsTokenizer, tiny_model
from stand_runtime import Method, NGramStore, SamplingParams, SizingSession, StandError, generate
from stand_runtime.sizing.acceptance_seed import (AcceptanceSeed, find_acceptance_seed, load_acceptance_seed, model_identity,
                                           seed_path)
from stand_runtime.drafters import DYNAMIC_MAX_N, STORE_TOP_K
from stand_runtime.sizing.value import DEFAULT_PRIOR, EDGES, PRIOR_WEIGHT, AcceptanceMap
from stand_runtime.target import latency

FLAT = latency.LatencyProfile((1, 2, 4, 8, 16, 32, 64, 128), (1.0,) * 8)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """An empty cache folder, a flat latency profile, and no bundled seed for the tiny models."""
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency", lambda model, name: FLAT)
    return tmp_path / "cache"


def counts():
    """Hand-made counts: drawn nodes in bin 12 (scores 0.1 .. 0.18) accepted 80 of 100, copied nodes
    in bin 15 accepted 9 of 10."""
    drafted, accepted = np.zeros((2, 16)), np.zeros((2, 16))
    drafted[0, 12], accepted[0, 12] = 100, 80
    drafted[1, 15], accepted[1, 15] = 10, 9
    return drafted, accepted


def test_a_seed_sets_the_first_estimate_to_the_calibrated_rate():
    drafted, accepted = counts()
    seed = AcceptanceSeed("m", drafted, accepted)
    seeded, fresh = seed.new_map(), AcceptanceMap()
    score = np.array([0.15])
    # bin 12 measured 80/100, shrunk by 8 pseudo-observations at its default seed: 0.77; bins 13 and 14
    # (no measurement: their seeds 0.49, 0.65) lie below it, so the isotonic fit pools the three
    calibrated = (80 + PRIOR_WEIGHT * DEFAULT_PRIOR[12:15].sum()) / (100 + 3 * PRIOR_WEIGHT)
    assert fresh.estimate(score, np.array([False]))[0] == pytest.approx(DEFAULT_PRIOR[12])
    assert seeded.estimate(score, np.array([False]))[0] == pytest.approx(calibrated, rel=1e-12)
    table = seeded.table()
    assert np.allclose(table[0, 12:15], calibrated) and np.allclose(table[0, :12], DEFAULT_PRIOR[:12])
    assert np.all(np.diff(table, axis=1) >= 0)
    # copied nodes keep the default seed: the calibration's copies exist only where its drawn nodes missed
    assert seeded.estimate(np.array([0.9]), np.array([True]))[0] == pytest.approx(DEFAULT_PRIOR[15])
    # the seed weighs 8 pseudo-observations: 8 verified nodes at 0 pull the estimate half-way down
    seeded.observe(np.full(8, 0.15), np.zeros(8, dtype=bool), np.zeros(8, dtype=bool))
    assert seeded.estimate(score, np.array([False]))[0] == pytest.approx(calibrated / 2, rel=1e-9)


def test_round_trip_and_bad_files(tmp_path):
    drafted, accepted = counts()
    seed = AcceptanceSeed("SmolLM2-x", drafted, accepted, {"dataset": "humaneval"})
    path = seed.save(tmp_path / "s.acceptance.json")
    again = load_acceptance_seed(path)
    assert again.model == "SmolLM2-x" and again.metadata == {"dataset": "humaneval"}
    assert np.array_equal(again.drafted, drafted) and np.array_equal(again.accepted, accepted)
    assert np.array_equal(again.prior(), seed.prior())
    good = json.loads(path.read_text())
    for change, message in [
        ({"format": "stand-tree"}, "is not a stand-acceptance file of version 2"),
        ({"version": 3}, "is not a stand-acceptance file of version 2"),
        ({"edges": [0.0, 1.0]}, "other score bins"),
        ({"drafted": [[1.0] * 16]}, "acceptance counts are [2, 16]"),
        ({"accepted": (accepted + 200).tolist()}, "0 <= accepted <= drafted"),
        ({"model": ""}, "names the model"),
        ({"drafted": "many"}, "bad acceptance seed"),
    ]:
        (tmp_path / "bad.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(StandError, match="bad acceptance seed|is not a") as error:
            load_acceptance_seed(tmp_path / "bad.json")
        assert message in str(error.value) and "\n" not in str(error.value)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(StandError, match="not valid JSON"):
        load_acceptance_seed(tmp_path / "bad.json")
    drop = {k: v for k, v in good.items() if k != "accepted"}
    (tmp_path / "bad.json").write_text(json.dumps(drop))
    with pytest.raises(StandError, match="KeyError"):
        load_acceptance_seed(tmp_path / "bad.json")


def test_the_value_rule_is_seeded_for_its_model_only(cache, tmp_path, monkeypatch):
    model = tiny_model()
    identity = model_identity(model)
    assert identity == "qwen2"  # built in memory: its model type
    assert find_acceptance_seed(model) is None
    unseeded = SizingSession.for_model(model).acceptance.table()
    assert np.allclose(unseeded, np.stack([DEFAULT_PRIOR, DEFAULT_PRIOR]))
    drafted, accepted = counts()
    # a bundled seed of another model is ignored, one of this model is used
    other = AcceptanceSeed("llama", drafted, accepted).save(tmp_path / "other.acceptance.json")
    monkeypatch.setattr("stand_runtime.sizing.acceptance_seed.bundled_files", lambda suffix: {"other": other})
    assert find_acceptance_seed(model) is None
    mine = AcceptanceSeed(identity, drafted, accepted).save(tmp_path / "mine.acceptance.json")
    monkeypatch.setattr("stand_runtime.sizing.acceptance_seed.bundled_files", lambda suffix: {"other": other, "mine": mine})
    assert np.allclose(SizingSession.for_model(model).acceptance.table(), AcceptanceSeed(identity, drafted, accepted).prior())
    # the cached seed (what calibrate writes) comes first; one measured on another model is refused
    seed_path(identity).parent.mkdir(parents=True)
    AcceptanceSeed("llama", drafted, accepted).save(seed_path(identity))
    with pytest.raises(StandError, match="was measured on 'llama', not 'qwen2'"):
        SizingSession.for_model(model)
    seed_path(identity).write_text("[]")
    with pytest.raises(StandError, match="must be a JSON object.*remove it to use the bundled seed, or calibrate again"):
        SizingSession.for_model(model)
    seed_path(identity).write_text(json.dumps(AcceptanceSeed(identity, drafted, accepted).as_json())[:40])  # truncated
    with pytest.raises(StandError, match=r"seed treeopt calibrate wrote for this model: remove it") as error:
        SizingSession.for_model(model)
    assert "\n" not in str(error.value)
    # a cached file of version 1 (copied nodes binned by their parent's score) is skipped: the bundled one
    old = {**AcceptanceSeed(identity, drafted, accepted).as_json(), "version": 1}
    seed_path(identity).write_text(json.dumps(old))
    assert find_acceptance_seed(model).model == identity and find_acceptance_seed(model).metadata == {}
    assert not Method.parse("stand", "dynamic-80", model).value_sized  # a fixed budget is sized by no session


def test_the_first_step_predicts_the_calibrated_rate(cache, monkeypatch):
    """The prediction a value-sized decode records for its first step's nodes is the seeded table's."""
    model = tiny_model()
    drafted, accepted = counts()
    seed_path("qwen2").parent.mkdir(parents=True)
    AcceptanceSeed("qwen2", drafted, accepted).save(seed_path("qwen2"))
    method, sizing = Method.parse("stand", "dynamic-auto-16", model), SizingSession.for_model(model)
    prior = sizing.acceptance.table()
    sizing.latency(1).ratio = lambda tokens: 1.0  # sizes from the flat profile, not this run's timings
    steps = []
    sizing.on_outcome = lambda scores, copied, predicted, outcome: steps.append((scores, copied, predicted))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    generate(model, None, prompt, method=method, sampling=SamplingParams(temperature=0), max_new_tokens=20,
             eos_token_ids=[], store=NGramStore(max_n=8), sizing=sizing)
    scores, copied, predicted = next(step for step in steps if len(step[0]))
    bins = np.clip(np.searchsorted(EDGES, scores, side="right") - 1, 0, 15)
    assert np.array_equal(predicted, prior[copied.astype(int), bins])


def test_calibration_measures_the_seed_per_score_bin(cache):
    """measure_acceptance counts every drafted node once, and the accepted ones, as decoding drafted
    them (greedy: the same steps as a plain generate with the same store settings)."""
    from treeopt.optimize.acceptance import acceptance_path, measure_acceptance

    model, tokenizer = tiny_model(), DigitsTokenizer()
    prompts, greedy = ["3 1 4 1 5 3 1 4 1 5 3 1", "2 7 1 8 2 8 2 7"], SamplingParams(temperature=0)
    acceptance = measure_acceptance(model, tokenizer, prompts, [0, 1000], sampling=greedy, max_new_tokens=24,
                                    nodes=12)
    drafted, accepted = acceptance.counts()
    method = Method.parse("stand", "dynamic-12", model)
    runs = [generate(model, tokenizer, p, method=method, sampling=greedy, max_new_tokens=24, seed=s,
                     store=NGramStore(top_k=STORE_TOP_K, max_n=DYNAMIC_MAX_N)) for p, s in zip(prompts, [0, 1000])]
    assert drafted.sum() == sum(sum(r.stats.drafted_per_step) for r in runs) > 0
    assert accepted.sum() == sum(sum(r.stats.accepted_per_step) for r in runs) > 0
    assert acceptance_path("out/stand-x.calibration.json").name == "stand-x.acceptance.json"
    assert acceptance_path("c.json").name == "c.acceptance.json"


def test_calibrate_cli_writes_the_seed_the_runtime_then_reads(cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli import app
    from treeopt_cli import loading

    model = tiny_model()
    monkeypatch.setattr(loading, "load_model", lambda *args: (model, DigitsTokenizer()))
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "3 1 4 1 5 3 1 4 1 5"}\n{"question": "2 7 1 8 2 8 2 7"}\n')
    out = tmp_path / "tiny.calibration.json"
    result = CliRunner().invoke(app, ["calibrate", "--dataset", str(data), "--field", "question", "--samples", "2",
                                      "--candidate-nodes", "8", "--max-new-tokens", "12", "--batch-size", "2",
                                      "--acceptance-nodes", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "acceptance seed for qwen2" in result.output
    written = load_acceptance_seed(tmp_path / "tiny.acceptance.json")
    assert written.metadata["tree"] == "dynamic-8" and written.drafted.sum() > 0
    assert np.array_equal(load_acceptance_seed(seed_path("qwen2")).drafted, written.drafted)
    assert np.allclose(SizingSession.for_model(model).acceptance.table(), written.prior())
    bad = CliRunner().invoke(app, ["calibrate", "--dataset", str(data), "--field", "question", "--samples", "1",
                                   "--acceptance-nodes", "5000", "--out", str(out)])
    assert bad.exit_code == 2 and "--acceptance-nodes 5000: bad dynamic tree 'dynamic-5000'" in bad.output
    # a smaller measurement (one prompt) is written next to its calibration but keeps the larger cached seed
    small = CliRunner().invoke(app, ["calibrate", "--dataset", str(data), "--field", "question", "--samples", "1",
                                     "--candidate-nodes", "8", "--max-new-tokens", "12", "--acceptance-nodes", "8",
                                     "--out", str(tmp_path / "small.json")])
    assert small.exit_code == 0, small.output
    assert load_acceptance_seed(tmp_path / "small.acceptance.json").drafted.sum() < written.drafted.sum()
    assert np.array_equal(load_acceptance_seed(seed_path("qwen2")).drafted, written.drafted)
    said = "".join(small.output.split())  # the console wraps lines, even inside the path
    assert "".join((f"(cached at {seed_path('qwen2')}, {int(written.drafted.sum())} nodes drafted) counted more than "
                    f"this one and stays in use; to use this one instead: cp {tmp_path / 'small.acceptance.json'} "
                    f"{seed_path('qwen2')}").split()) in said
