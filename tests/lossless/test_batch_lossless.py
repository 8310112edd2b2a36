"""Lossless, batches of rows (decode_rows, generate_batch): each row against that row decoded alone by plain decoding."""

from __future__ import annotations

import pytest

from conftest import DigitsTokenizer
from stand_runtime import Method, RowSpec, SamplingParams, decode_rows, generate, generate_batch
from test_engine import REPEAT_PROMPT, chi_square_against, exact_continuations, needs_arctic
from test_batch import PROMPTS, TREES, seeded_rows_equal_each_alone


@pytest.mark.parametrize("method", ["stand", "stand-det", "stand[dynamic-16]", "pld", "recycle", "ar",
                                    pytest.param("suffix", marks=needs_arctic)])
def test_batched_greedy_rows_equal_plain_decoding_tiny(tiny_qwen2, method):
    results = generate_batch(tiny_qwen2, None, PROMPTS, method=Method.parse(method.removesuffix("[dynamic-16]"), TREES[method], tiny_qwen2, batch=len(PROMPTS) * 2), sampling=SamplingParams(temperature=0), n=2, max_new_tokens=40, eos_token_ids=[])
    assert len(results) == 2 * len(PROMPTS)
    accepted = 0
    for row, result in enumerate(results):
        plain = generate(tiny_qwen2, None, PROMPTS[row // 2], sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=40, eos_token_ids=[])
        assert result.tokens == plain.tokens, (method, row)
        accepted += result.stats.new_tokens - result.stats.target_forwards
    if method != "ar":
        assert accepted >= 40, f"{method}: drafts were rarely accepted ({accepted})"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["stand"])
def test_batched_sampling_rows_match_exact_distribution(tiny_qwen2, method):
    """Rows of one batch with different prompt lengths, temperatures and top-p, seeded and unseeded
    rows, rows sharing a store online (2 per prompt) and rows with nothing to draft beside rows with
    drafts: every row's 3-token continuation must follow that row's exact p (chi-square per prompt,
    2 rows x 1200 batches each; threshold 1e-4 because unseeded rows make the run nondeterministic)."""
    model = tiny_qwen2
    prompts = PROMPTS[:3]
    params = [SamplingParams(temperature=0.8, top_p=0.95), SamplingParams(temperature=1.0, top_p=1.0),
              SamplingParams(temperature=0.6, top_p=0.9)]
    batches = 1200
    counts = [dict() for _ in prompts]
    accepted = 0
    for call in range(batches):
        seeds = [10_000 * call + r if r % 2 == 0 else None for r in range(2 * len(prompts))]
        results = generate_batch(model, None, prompts, method=Method.parse(method, TREES[method], model, batch=len(prompts) * 2, verification="rejection"), n=2, sampling=[params[r // 2] for r in range(2 * len(prompts))], max_new_tokens=3, seed=seeds, eos_token_ids=[])
        for row, result in enumerate(results):
            assert len(result.tokens) == 3
            key = tuple(result.tokens)
            counts[row // 2][key] = counts[row // 2].get(key, 0) + 1
            accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= batches // 2, f"drafts were rarely accepted ({accepted} in {batches} batches)"
    for prompt, param, count in zip(prompts, params, counts):
        exact = exact_continuations(model, prompt, param, 3)
        outcome = chi_square_against(count, exact, 2 * batches)
        assert outcome.pvalue > 1e-4, (prompt, param, outcome)


@pytest.mark.parametrize("method", ["recycle", pytest.param("suffix", marks=needs_arctic)])
def test_batched_rows_with_deterministic_drafts_sample_the_exact_law(tiny_qwen2, method):
    """Deterministic drafts in a batch of 6 rows (3 prompts of different lengths, 2 rows each sharing
    a store online): one row samples (temperature, top-p, top-k differ per prompt), the others decode
    greedily, so the sampled row's verification draws are the batch's only randomness; enumerating
    them (conftest.draw_law) gives that row's exact 3-token law, which must be the target's."""
    from conftest import draw_law

    params = [SamplingParams(temperature=0.8, top_p=0.95), SamplingParams(temperature=1.0, top_p=1.0, top_k=3),
              SamplingParams(temperature=0.6, top_p=0.9)]
    for prompt, param in enumerate(params):
        sampling = [SamplingParams(temperature=0)] * 6
        sampling[2 * prompt] = param

        def run():
            results = generate_batch(tiny_qwen2, None, PROMPTS[:3], method=Method.parse(method, TREES[method], tiny_qwen2, batch=len(PROMPTS[:3]) * 2, verification="rejection"), n=2, sampling=sampling, max_new_tokens=3, seed=[7] * 6, eos_token_ids=[])
            return tuple(results[2 * prompt].tokens), sum(r.stats.new_tokens - r.stats.target_forwards for r in results)

        law = draw_law(run)
        tokens: dict = {}
        for (key, _), prob in law.items():
            tokens[key] = tokens.get(key, 0.0) + prob
        exact = exact_continuations(tiny_qwen2, PROMPTS[prompt], param, 3)
        assert set(tokens) == set(exact), (prompt, param)
        worst = max(abs(tokens[key] - exact[key]) for key in exact)
        assert worst < 1e-5, (prompt, param, worst)
        assert sum(prob * accepted for (_, accepted), prob in law.items()) >= 1.0, "drafts were rarely accepted"


def test_stop_string_inside_an_accepted_run_truncates_as_plain_decoding(tiny_qwen2):
    """A stop string completed in the middle of an accepted run ends the row there, in the batched
    and the single-sequence engine alike, exactly where plain decoding stops."""
    tokenizer = DigitsTokenizer()
    plain = generate(tiny_qwen2, tokenizer, REPEAT_PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=60, eos_token_ids=[])
    fast = generate(tiny_qwen2, tokenizer, REPEAT_PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[])
    assert fast.tokens == plain.tokens
    start, stop = 0, None
    for size in fast.stats.tokens_per_step:  # a two-token string ending inside a multi-token step
        for end in range(start + 1, start + size - 1):
            candidate = f"{plain.tokens[end - 1]} {plain.tokens[end]}"
            first = next(i for i in range(1, len(plain.tokens)) if
                         f"{plain.tokens[i - 1]} {plain.tokens[i]}" == candidate)
            if first == end:
                stop = (candidate, end)
                break
        if stop:
            break
        start += size
    assert stop is not None, "no step accepted three tokens: the test proves nothing"
    text, end = stop
    expected = plain.tokens[: end + 1]
    single = generate(tiny_qwen2, tokenizer, REPEAT_PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[], stop=[text])
    batched = generate_batch(tiny_qwen2, tokenizer, [REPEAT_PROMPT, PROMPTS[1]], method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=len([REPEAT_PROMPT, PROMPTS[1]])), sampling=SamplingParams(temperature=0), max_new_tokens=60, eos_token_ids=[], stop=[text])
    assert single.tokens == expected and single.finish_reason == "stop"
    assert batched[0].tokens == expected and batched[0].finish_reason == "stop"


@pytest.mark.slow
@pytest.mark.model
def test_batched_greedy_equals_plain_decoding_on_humaneval(default_model, plain_humaneval):
    """Five HumanEval prompts of different lengths in one batch (with two samples of the first)."""
    model, tokenizer = default_model
    problems, plain_runs = plain_humaneval
    prompts = [p["prompt"] for p in problems]
    results = generate_batch(model, tokenizer, prompts, sampling=SamplingParams(temperature=0), method="stand", max_new_tokens=64)
    accepted = 0
    for problem, plain, result in zip(problems, plain_runs, results):
        assert result.tokens == plain.tokens, problem["task_id"]
        accepted += result.stats.new_tokens - result.stats.target_forwards
    assert accepted >= 20, "no drafts were accepted: the comparison proves nothing"


def test_each_row_keeps_its_own_sampling_seed_stop_strings_and_eos(tiny_qwen2):
    """Rows that differ inside one prompt: greedy beside T 1 (seeded `ar` rows equal plain decoding of
    each alone token for token: same seed, same draws), and stop strings and EOS ids of their own
    (each STAND row stops where that row alone stops, with its finish reason)."""
    for seed in (3, 40, 500):
        seeded_rows_equal_each_alone(tiny_qwen2, [SamplingParams(temperature=0), SamplingParams(1.0, 1.0)], seed)
    tokenizer, greedy = DigitsTokenizer(), SamplingParams(temperature=0)
    plain = generate(tiny_qwen2, tokenizer, REPEAT_PROMPT, sampling=greedy, method="ar", max_new_tokens=30,
                     eos_token_ids=[]).tokens
    ends = [((), []), ((f"{plain[3]} {plain[4]}",), []), (("zzz",), [plain[6]]), ((), [])]
    specs = [RowSpec(list(REPEAT_PROMPT), greedy, None, 30, None, stop, eos) for stop, eos in ends]
    results = decode_rows(tiny_qwen2, tokenizer, specs, method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=4))
    reasons = []
    for spec, result in zip(specs, results):
        alone = generate(tiny_qwen2, tokenizer, REPEAT_PROMPT, sampling=greedy, method="ar", max_new_tokens=30,
                         eos_token_ids=spec.eos_token_ids, stop=list(spec.stop))
        assert (result.tokens, result.finish_reason) == (alone.tokens, alone.finish_reason)
        reasons.append(result.finish_reason)
    assert reasons == ["length", "stop", "eos", "length"], "no row stopped early: the test proves nothing"


def test_rows_finish_independently_and_leave_the_batch(tiny_qwen2):
    rows = [RowSpec(list(p), SamplingParams(temperature=0), None, budget, None, (), [])
            for p, budget in zip(PROMPTS, (5, 40, 17, 1))]
    order = []
    results = decode_rows(tiny_qwen2, None, rows, method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=len(rows)), on_finish=lambda index, result: order.append(index))
    assert [len(r.tokens) for r in results] == [5, 40, 17, 1]
    assert order[0] == 3 and sorted(order) == [0, 1, 2, 3]  # the 1-token row leaves after one step
    for spec, result in zip(rows, results):
        plain = generate(tiny_qwen2, None, spec.prompt, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=spec.max_new_tokens, eos_token_ids=[])
        assert result.tokens == plain.tokens and result.finish_reason == "length"
