"""The machine's latency profile: robust to a noisy machine, and the tree size it makes best."""

import json

import numpy as np
import pytest

from conftest import tiny_model
from stand_runtime import LatencyProfile, StandError
from stand_runtime.errors import StandWarning
from stand_runtime.target import latency
from stand_runtime.target.latency import cached_latency
from stand_runtime.sizing.tree_choice import machine_tree
from stand_runtime.trees.tree_io import family_to_json
from stand_runtime.target.latency import choose_size, monotone_fit, profile_from_rounds
from treeopt import candidate_tree, export_family
from test_treeopt import fake_calibration
from conftest import ROOT


def test_monotone_fit_pools_adjacent_violators():
    np.testing.assert_allclose(monotone_fit([1.0, 3.0, 2.0, 4.0]), [1.0, 2.5, 2.5, 4.0])
    np.testing.assert_allclose(monotone_fit([5.0, 1.0, 1.0]), [7 / 3] * 3)
    assert list(monotone_fit([1.0, 2.0, 3.0])) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("seed", range(5))
def test_noisy_rounds_give_a_monotone_profile_near_the_truth(seed):
    """A machine shared with other work: multiplicative noise, and in each round one timing in eight
    hit by a 3-8x stall (another process took the cores). Medians over 7 interleaved rounds plus the
    monotone fit recover the true curve within 15%, never decreasing."""
    rng = np.random.default_rng(seed)
    sizes = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    truth = 0.040 + 0.0015 * sizes + 0.030 * (sizes > 1)  # a jump from 1 to 2 tokens, then linear
    rounds = truth * rng.lognormal(0.0, 0.08, size=(7, len(sizes)))
    for row in rounds:
        row[rng.integers(len(sizes))] *= rng.uniform(3, 8)
    profile = profile_from_rounds(sizes, rounds)
    fitted = np.array(profile.seconds)
    assert np.all(np.diff(fitted) >= 0)
    assert np.all(np.abs(fitted / truth - 1) < 0.15), fitted / truth
    naive = rounds.mean(axis=0)  # what a mean over rounds would have said
    assert np.abs(naive / truth - 1).max() > np.abs(fitted / truth - 1).max()


def test_profile_round_trip_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(latency, "timing_disturbed", lambda: None)  # cached even under `pytest --cov`
    model = tiny_model()
    measured = []
    first = cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
    second = cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
    assert measured == [1] and first == second  # measured once, then read from the cache
    assert np.all(np.diff(first.seconds) >= 0) and first.at(1) > 0
    assert LatencyProfile.from_dict(json.loads(json.dumps(first.as_dict()))) == first
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("STAND_CACHE_DIR", str(blocked))
    with pytest.warns(StandWarning, match="latency profile is kept for this run only .cannot write"):
        cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
    cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
    assert measured == [1, 1], "measured once per process where the cache takes no file"


def test_a_profile_measured_under_a_profiler_is_not_cached(tmp_path, monkeypatch):
    """cProfile adds a fixed cost to every Python call, so its timings flatten the profile's shape: such
    a profile serves the run that measured it (once per process) and is never written to the cache."""
    import cProfile

    from stand_runtime.target.timing import timing_disturbed

    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    model = tiny_model()
    measured = []
    assert timing_disturbed() is None or "tracer" in timing_disturbed()  # pytest may run under coverage
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        assert timing_disturbed() == "a Python profiler is active"
        with pytest.warns(StandWarning, match="kept for this run only .a Python profiler is active"):
            first = cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
        second = cached_latency(model, "tiny", on_measure=lambda: measured.append(1))
    finally:
        profiler.disable()
    assert first == second and measured == [1]
    assert not list(tmp_path.rglob("*.json")), "nothing written to the cache"
    monkeypatch.setattr(latency, "timing_disturbed", lambda: None)  # quiet (also under `pytest --cov`, a tracer)
    cached_latency(model, "tiny", refresh=True, on_measure=lambda: measured.append(1))
    assert measured == [1, 1] and len(list((tmp_path / "latency").glob("*.json"))) == 1  # measured quietly: cached


def test_a_cache_folder_that_takes_no_model_is_one_line(tmp_path, monkeypatch):
    from stand_runtime.target.models import _dequantized_cache, default_gguf_path

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("STAND_CACHE_DIR", str(blocked))
    with pytest.raises(StandError, match="cannot write the model cache .*set STAND_CACHE_DIR to a writable folder"):
        _dequantized_cache(default_gguf_path())


def test_machine_tree_picks_the_best_member_for_the_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_CACHE_DIR", str(tmp_path))
    family = export_family(fake_calibration(candidate_tree(60)), sizes=(1, 2, 4, 8, 16, 32, 48))
    path = tmp_path / "fam.family.json"
    path.write_text(json.dumps(family_to_json(family)))
    model = tiny_model()
    choice = machine_tree(model, str(path))
    profile = cached_latency(model, str(model.config._name_or_path or model.config.model_type))
    best_sum = np.array(family.best_sum())
    best_sum[0] = -np.inf
    assert choice.nodes == choose_size(best_sum, profile)[0] and choice.tree.num_nodes == choice.nodes
    assert choice.bound > 0
    with pytest.raises(StandError, match="tree family not found"):
        machine_tree(model, str(tmp_path / "missing.json"))
    # a family file given as the tree is sized for the machine, like "auto"
    from stand_runtime.method import check_tree_spec, method_tree

    assert method_tree("stand", str(path), model).num_nodes == choice.nodes
    assert check_tree_spec("stand", str(path)) is None  # no model yet: only checked


def test_trees_shrink_as_batches_grow():
    """A batched step over B rows of K + 1 tokens costs t(B (K + 1)): on a CPU-like profile (cost
    linear in tokens past a fixed part) the best tree size falls with the batch, on a flat GPU-like
    profile it does not."""
    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    cpu = LatencyProfile(sizes, tuple(0.05 + 0.002 * s for s in sizes))
    flat = LatencyProfile(sizes, (0.016,) * len(sizes))
    best_sum = np.concatenate([[-np.inf], np.cumsum(0.6 ** np.arange(1, 41))])  # diminishing returns
    chosen = [choose_size(best_sum, cpu, batch)[0] for batch in (1, 4, 16)]
    assert chosen[0] > chosen[1] > chosen[2] >= 1
    assert choose_size(best_sum, flat, 16)[0] == choose_size(best_sum, flat, 1)[0]
    _, curve = choose_size(best_sum, cpu, 4)
    row = curve[0]
    assert row["latency_s"] == pytest.approx(cpu.at(4 * (row["nodes"] + 1)))
    assert row["tokens_per_s"] == pytest.approx(4 * row["expected_acceptance_length"] / row["latency_s"])


def test_an_untrustworthy_or_contradicted_profile_is_named():
    """A profile measured on a busy machine (rounds far apart) and one that a run's own forward times
    contradict (1135 ms cached for one token where the run took 76 ms) each give a one-line warning."""
    from stand_runtime.target.latency import latency_warnings

    quiet = LatencyProfile((1, 8), (0.076, 0.14), (0.076, 0.14), (0.004, 0.006))
    assert latency_warnings(quiet) == []
    assert latency_warnings(quiet, forward_s=0.08 * 50, forwards=50) == []
    busy = LatencyProfile((1, 8), (1.135, 1.2), (1.135, 1.2), (0.9, 0.4))
    first, second = latency_warnings(busy, forward_s=0.076 * 40, forwards=40)
    assert "spread of 56% between rounds" in first and "delete" in first  # the median over its sizes
    assert "took 76 ms for 1.0 tokens where the cached latency profile says 1135 ms (0.1x)" in second
    assert all("\n" not in line for line in (first, second))
    assert latency_warnings(busy, forward_s=0.076 * 40, forwards=40, spread=False) == [second]
    slow = dict(forward_s=0.2 * 40, forwards=40)  # 2.6x the profile's 76 ms
    assert len(latency_warnings(quiet, **slow)) == 1
    assert latency_warnings(quiet, **slow, context_tokens=8000) == []  # a long context's attention, not the profile
    noisy = LatencyProfile((1, 4, 8), (0.076, 0.1, 0.14), (0.076, 0.1, 0.14), (0.004, 0.037, 0.006))
    assert latency_warnings(noisy) == []  # one size's rounds spread 37%: its median over the rounds stands


def test_every_benchmark_script_imports():
    """The scripts under benchmarks/ import what they name (a moved module is found here, not by a user)."""
    import runpy

    scripts = sorted((ROOT / "benchmarks").rglob("*.py"))
    assert len(scripts) >= 5
    for script in scripts:
        runpy.run_path(str(script), run_name="benchmark_import_check")  # defines, does not run main()


def test_profile_key_follows_the_architecture_not_the_folder(monkeypatch):
    """A forward's cost depends on the architecture: a model loaded from another folder (a moved or
    copied cache) keeps its profile; another shape does not."""
    from stand_runtime.target.latency import profile_key

    model = tiny_model()
    key = profile_key(model, "tiny")
    monkeypatch.setattr(model.config, "_name_or_path", "/somewhere/else", raising=False)
    assert profile_key(model, "other name") == key
    assert profile_key(tiny_model(seed=5), "tiny") == key  # other weights, same shapes
    assert profile_key(tiny_model(vocab=40), "tiny") != key
