"""The sizing session: what value-sized drafting learns lives there, not in the Method value; a frozen
session makes seeded runs repeat; a session outlives a call, saves and loads."""

from __future__ import annotations

import pytest

from stand_runtime.method import Ablation
from stand_runtime import (DecodeRequest, DynamicTree, HFBackend, Method, NGramStore, SamplingParams, SizingSession,
                           StandError, generate)
from stand_runtime.target.latency import LatencyProfile

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
PROFILE = LatencyProfile(SIZES, tuple(0.01 * (1 + 0.02 * s) for s in SIZES))
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6] * 3
SAMPLING = SamplingParams(temperature=0.6, top_p=0.95)


@pytest.fixture
def profiled(monkeypatch):
    """This machine's latency profile of every model: :data:`PROFILE` (nothing measured)."""
    monkeypatch.setattr("stand_runtime.target.latency.cached_latency", lambda model, name: PROFILE)


def test_methods_are_values():
    """Equal by their fields, hashable, and built from their words without a model or a cache."""
    a, b = Method.parse("stand", "dynamic-auto-16"), Method.parse("stand", "dynamic-auto-16")
    assert a == b and hash(a) == hash(b) and len({a, b, Method.parse("stand", "dynamic-16")}) == 2
    assert a.value_sized and a.tree == DynamicTree(16, sized=True)
    assert Method.parse("stand") == Method("stand", DynamicTree(80, sized=True))  # the default: dynamic-auto
    static = Method.parse("stand-det", "heuristic-80")
    assert static == Method.parse("stand-det", "heuristic-80") and hash(static) == hash(Method.parse("stand-det", "heuristic-80"))
    assert not static.value_sized and {static: 1}[Method.parse("stand-det", "heuristic-80")] == 1
    ablated = static.ablated(extend=False, diagnose=True)  # the expert switches are part of the value
    assert ablated == Method.parse("stand-det", "heuristic-80").ablated(diagnose=True, extend=False) != static
    assert hash(ablated) == hash(static.ablated(extend=False, diagnose=True)) and static.ablation == Ablation()
    assert (ablated.ablation.extend, ablated.ablation.diagnose, static.ablation.allocation) == (False, True, "batch")


def test_a_seeded_generate_repeats_with_a_frozen_session(tiny_qwen2, profiled):
    """A session that learned from one call, then frozen: two seeded calls sample the same tokens and the
    session is unchanged by them (it learns nothing, whatever the step times)."""
    sizing, store_of = SizingSession.for_model(tiny_qwen2), (lambda: NGramStore(max_n=8))
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2)
    generate(tiny_qwen2, None, PROMPT, method=method, sampling=SAMPLING, max_new_tokens=30, seed=1, sizing=sizing,
             eos_token_ids=[], store=store_of())
    learned = sizing.freeze().as_dict()
    runs = [generate(tiny_qwen2, None, PROMPT, method=method, sampling=SAMPLING, max_new_tokens=40, seed=7,
                     sizing=sizing, eos_token_ids=[], store=store_of()) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and runs[0].stats.drafted_per_step == runs[1].stats.drafted_per_step
    assert sum(runs[0].stats.accepted_per_step) > 0  # drafts were accepted
    assert sizing.as_dict() == learned


def test_a_seeded_batched_search_repeats_with_a_frozen_session(tiny_qwen2, profiled):
    """Best-of-4 through a batched backend (rows of a problem sharing a store, 2 rows a forward, slots
    refilled), twice with one frozen session: the same samples."""
    sizing = SizingSession.for_model(tiny_qwen2).freeze()
    method = Method.parse("stand", "dynamic-auto-12", tiny_qwen2, batch=2)
    request = DecodeRequest(PROMPT, n=4, max_new_tokens=24, sampling=SAMPLING, seed=3, ignore_eos=True)
    runs = [HFBackend(tiny_qwen2, None, method, max_batch=2, share_memory=True, sizing=sizing).generate([request])
            for _ in range(2)]
    assert [c.tokens for c in runs[0][0]] == [c.tokens for c in runs[1][0]]
    assert sum(sum(c.stats.drafted_per_step) for c in runs[0][0]) > 0


def test_a_session_outlives_a_call(tiny_qwen2, profiled):
    """The root-only forward is explored once per session: a second call with the session drafts from
    its first step on, and learned acceptance carries over."""
    sizing, store = SizingSession.for_model(tiny_qwen2), NGramStore(max_n=8)
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2)
    first = generate(tiny_qwen2, None, PROMPT, method=method, sampling=SamplingParams(temperature=0),
                     max_new_tokens=30, sizing=sizing, eos_token_ids=[], store=store)
    assert first.stats.drafted_per_step[:2] == [0, 0]  # the first call explored
    drafted = sizing.acceptance.counts()[0].sum()
    second = generate(tiny_qwen2, None, PROMPT + first.tokens, method=method, sampling=SamplingParams(temperature=0),
                      max_new_tokens=10, sizing=sizing, eos_token_ids=[], store=store)
    assert not sizing.last_rule.exploring(0) and second.stats.drafted_per_step[0] > 0
    assert sizing.acceptance.counts()[0].sum() > drafted > 0


def test_a_saved_session_sizes_as_the_one_saved(tiny_qwen2, profiled, tmp_path):
    sizing = SizingSession.for_model(tiny_qwen2)
    method = Method.parse("stand", "dynamic-auto-16", tiny_qwen2)
    generate(tiny_qwen2, None, PROMPT, method=method, sampling=SAMPLING, max_new_tokens=30, seed=1, sizing=sizing,
             eos_token_ids=[], store=NGramStore(max_n=8))
    sizing.freeze().save(tmp_path / "sizing.json")
    loaded = SizingSession.load(tmp_path / "sizing.json")
    assert loaded.as_dict() == sizing.as_dict() and loaded.frozen
    runs = [generate(tiny_qwen2, None, PROMPT, method=method, sampling=SAMPLING, max_new_tokens=30, seed=5,
                     sizing=session, eos_token_ids=[], store=NGramStore(max_n=8)) for session in (sizing, loaded)]
    assert runs[0].tokens == runs[1].tokens and runs[0].stats.drafted_per_step == runs[1].stats.drafted_per_step
    (tmp_path / "bad.json").write_text('{"format": "stand-tree"}')
    with pytest.raises(StandError, match="is not a sizing session"):
        SizingSession.load(tmp_path / "bad.json")
    with pytest.raises(StandError, match="cannot read the sizing session"):
        SizingSession.load(tmp_path / "missing.json")


def test_a_session_of_another_target_is_refused(tiny_qwen2, profiled):
    from conftest import tiny_model

    other = tiny_model("llama")
    with pytest.raises(StandError, match="this sizing session was sized for another target"):
        generate(other, None, PROMPT, method="stand", max_new_tokens=4, sizing=SizingSession.for_model(tiny_qwen2))
