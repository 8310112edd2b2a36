"""The target distribution p as users set it and read it: what the identity tests against plain
decoding cannot see, since plain decoding shares it (a mutation run found each gap). The defaults,
every low temperature sampled (never greedy), rows of one batch that differ only in top-p, the
greedy tie-break, the CLI options reaching p, and the logprobs returned (the search verifier ranks
by them) equal to the model's own log-softmax."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from cli import app
from stand_runtime import Method, RowSpec, SamplingParams, decode_rows, generate
from stand_runtime.target.sampling import target_rows
from test_batch import PROMPTS, seeded_rows_equal_each_alone


def test_the_defaults_are_the_documented_ones():
    """T 0.6, top-p 0.95, no top-k (README, design §4.1); parameters differing in any field are not
    equal (a batch groups its rows' target computation by them)."""
    assert SamplingParams() == SamplingParams(0.6, 0.95, 0)
    assert SamplingParams(1.0, 1.0) != SamplingParams(1.0, 0.3) and SamplingParams(1.0) != SamplingParams(1.0, 0.95, 5)
    for temperature in (1e-3, 0.05, 1e-6):
        assert not SamplingParams(temperature).greedy
    assert SamplingParams(0.0).greedy


def test_a_low_temperature_is_sampled_not_greedy():
    """At T 0.05 two logits 0.05 apart keep odds e:1 (not one-hot on the larger)."""
    logits = torch.tensor([[2.0, 1.95, -1.0]])
    row = target_rows(logits, SamplingParams(0.05, 1.0))[0]
    p = torch.softmax(logits[0] / 0.05, dim=-1)
    assert row.at(torch.tensor([0, 1]).numpy()).tolist() == pytest.approx(p[:2].tolist(), rel=1e-5)
    assert 0.25 < float(p[1]) < 0.3


def test_rows_differing_only_in_top_p_each_sample_their_own(tiny_qwen2):
    """Two rows at T 1, top-p 1 and top-p 0.3, batched: with plain decoding each equals that row
    decoded alone with its seed, token for token; with STAND (either verifier) every token of the
    top-p 0.3 row lies inside its own nucleus, never only in the other row's."""
    sampling = [SamplingParams(1.0, 1.0), SamplingParams(1.0, 0.3)]
    outside = 0
    for seed in (1, 20, 300):
        rows = seeded_rows_equal_each_alone(tiny_qwen2, sampling, seed)
        outside += not all(_in_nucleus(tiny_qwen2, PROMPTS[1], rows[0].tokens, sampling[1]))
        for batch_verify in (False, True):
            method = Method.parse("stand", "heuristic-80", tiny_qwen2, batch=2).ablated(batch_verify=batch_verify)
            drafted = decode_rows(tiny_qwen2, None, [RowSpec(list(PROMPTS[1]), s, seed + r, 8, None, (), [])
                                                      for r, s in enumerate(sampling)], method=method)
            assert all(_in_nucleus(tiny_qwen2, PROMPTS[1], drafted[1].tokens, sampling[1])), (seed, batch_verify)
    assert outside > 0, "the top-p 1 row never left the 0.3 nucleus: the check proves nothing"


def _in_nucleus(model, prompt: list[int], tokens: list[int], params: SamplingParams) -> list[bool]:
    """Per generated token: whether p under ``params`` (after its prefix) gives it mass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float()
    rows = target_rows(logits, params)
    return [float(row.at(np.array([token]))[0]) > 0 for row, token in zip(rows, tokens)]


def test_greedy_ties_take_the_first_index_on_every_path():
    """The host argmax that plain decoding and STAND's walk read (``_maxima``) picks the first index of
    a tied maximum, as the batched verifier does (``tests/lossless/test_verify_batch.py``; design §4.2)."""
    from stand_runtime.engine.row import _maxima

    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, 5.0, 5.0, 5.0]])
    assert [index for index, _ in _maxima(logits)] == [1, 0]


def test_logprobs_are_the_models_log_softmax_at_the_position_before(tiny_qwen2):
    """``logprobs=True`` returns log p_model(token | prefix) under the raw logits (no temperature, no
    top-p) for every token, from plain decoding and from STAND's accepted runs alike."""
    params = SamplingParams(0.6, 0.9)
    for method, tree in (("ar", None), ("stand", "heuristic-80")):
        for seed in (0, 7):
            result = generate(tiny_qwen2, None, PROMPTS[0], method=Method.parse(method, tree, tiny_qwen2),
                              sampling=params, max_new_tokens=24, seed=seed, eos_token_ids=[], logprobs=True)
            ids = torch.tensor([PROMPTS[0] + result.tokens])
            with torch.no_grad():
                logits = tiny_qwen2(ids).logits[0].float()
            start = len(PROMPTS[0]) - 1
            want = torch.log_softmax(logits[start:start + len(result.tokens)], dim=-1)
            want = want[torch.arange(len(result.tokens)), torch.tensor(result.tokens)]
            assert torch.allclose(torch.tensor(result.logprobs), want, atol=1e-4), (method, seed)
            if method == "stand":
                assert result.stats.target_forwards < len(result.tokens)  # runs were accepted


def test_the_cli_options_reach_the_sampling_parameters(tmp_path, monkeypatch):
    """``--temperature``, ``--top-p`` (and ``--top-k`` where offered) reach the parameters each command
    samples with, whatever their defaults."""
    import treeopt_cli.bench
    import treeopt_cli.bench_vllm
    import treeopt_cli.generate
    import treeopt_cli.search

    seen = []

    def record(*args):
        seen.append(args)
        raise typer.Exit(0)

    for module in (treeopt_cli.generate, treeopt_cli.search, treeopt_cli.bench, treeopt_cli.bench_vllm):
        monkeypatch.setattr(module, "sampling_options", record)
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"problem": "3 1 4", "answer": "1"}) + "\n")
    options = ["--temperature", "1.3", "--top-p", "0.7"]
    for args, want in ((["generate", *options, "--top-k", "5", "hi"], (1.3, 0.7, 5)),
                       (["search", "--dataset", str(data), *options], (1.3, 0.7)),
                       (["bench", *options], (1.3, 0.7)), (["bench-vllm", *options], (1.3, 0.7))):
        seen.clear()
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and seen == [want], (args[0], result.output)
