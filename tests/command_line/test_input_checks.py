"""Bad input to the batch, search, traces and vLLM-proposer APIs: every parameter is checked by one
function shared by every entry point, before any model work, with a one-line StandError; what a
path accepts, it honours (no option silently ignored or coerced)."""

import json
import math
import re

import numpy as np
import pytest
import torch

from conftest import DigitsTokenizer, tiny_model
from stand_runtime import (DecodeRequest, HFBackend, Method, NGramStore, RowSpec, SamplingParams, SizingSession, StandError,
                           decode_rows, generate, generate_batch)
from treeopt.data.datasets import Prompt, load_prompts
from treeopt.evaluate.search import SearchSettings, dvts
from treeopt.data.traces import first_tokens, load_traces
from treeopt.evaluate.verifiers import CallableVerifier, check_scores

PROMPT = [3, 5, 7, 3, 5, 7, 3, 5]
GREEDY = SamplingParams(temperature=0)


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# 1. silent wrong behaviour ---------------------------------------------------------------------


def test_a_lone_stop_string_is_one_stop_string_on_every_path(tiny_qwen2):
    """generate_batch used to split "5 7" into the characters "5", " ", "7" (stopping after one token)."""
    tokenizer = DigitsTokenizer()
    free = generate(tiny_qwen2, tokenizer, PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=12, eos_token_ids=[])
    text = lambda tokens: " ".join(map(str, tokens))
    end = next(i for i in range(3, 12) if text(free.tokens[i - 2:i]) not in text(free.tokens[:i - 1]))
    stop = text(free.tokens[end - 2:end])  # two tokens' text that first appears ending at token `end`
    single = generate(tiny_qwen2, tokenizer, PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=12, eos_token_ids=[], stop=stop)
    assert single.finish_reason == "stop" and single.tokens == free.tokens[:end]
    for method in ("ar", "stand"):
        batched = generate_batch(tiny_qwen2, tokenizer, [PROMPT], method=Method.parse(method, "heuristic-80" if method == "stand" else None, tiny_qwen2, batch=len([PROMPT]) * 2), sampling=SamplingParams(temperature=0), n=2, max_new_tokens=12, eos_token_ids=[], stop=stop)
        assert [r.tokens for r in batched] == [single.tokens] * 2 and batched[0].finish_reason == "stop"
    assert RowSpec(PROMPT, stop=stop).stop == (stop,)
    assert DecodeRequest(PROMPT, stop=stop).stop == (stop,)


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "3.0", None])
def test_a_verifier_score_must_be_a_real_number(bad):
    judge = CallableVerifier(lambda problem, steps, text: 1.0, name="judge")
    with pytest.raises(StandError, match="verifier judge scored candidate 0") as error:
        check_scores(judge, [bad, 1.0, 2.0, 3.0], 4)
    one_line(error)
    assert check_scores(judge, [-math.inf, np.float32(1.5), np.int64(2), 3], 4) == [-math.inf, 1.5, 2.0, 3.0]
    with pytest.raises(StandError, match="returned 3 scores for 4 candidates"):
        check_scores(judge, [1, 2, 3], 4)


def test_dvts_refuses_a_nan_verifier_instead_of_choosing_it(tiny_qwen2):
    """max() never moves past a NaN: scores [nan, 1, 2, 3] picked candidate 0 every round."""
    tokenizer = DigitsTokenizer()
    backend = HFBackend(tiny_qwen2, tokenizer, "ar")

    class NaNFirst:
        name = "nan-first"

        def score(self, problem, steps, candidates):
            return [math.nan] + [float(i) for i in range(1, len(candidates))]

    settings = SearchSettings("dvts", n=4, subtrees=1, max_new_tokens=8, step_tokens=4, max_rounds=2, seed=1)
    with pytest.raises(StandError, match="verifier nan-first scored candidate 0 nan"):
        dvts(backend, tokenizer, Prompt("p", "3 5 7 3 5"), settings, NaNFirst(), vocab=16)
    strings = CallableVerifier(lambda problem, steps, text: "0.5", name="strings")
    with pytest.raises(StandError, match="verifier strings scored candidate 0 '0.5'"):
        dvts(backend, tokenizer, Prompt("p", "3 5 7 3 5"), settings, strings, vocab=16)


class EosTokenizer(DigitsTokenizer):
    def __init__(self, eos):
        self.eos_token_id = eos


def test_every_request_option_holds_on_the_recorded_path(tiny_qwen2):
    """record_probs + ignore_eos returned 4 tokens ending at EOS; record_probs + logprobs returned no
    logprobs: ignore_eos now holds there, and logprobs with record_probs is refused."""
    free = generate(tiny_qwen2, None, PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=30, eos_token_ids=[])
    eos = free.tokens[2]  # a token that comes early
    cut = free.tokens.index(eos) + 1
    backend = HFBackend(tiny_qwen2, EosTokenizer(eos), "ar")
    with pytest.raises(StandError, match="record_probs and logprobs cannot be combined") as error:
        DecodeRequest(PROMPT, record_probs=True, ignore_eos=True, logprobs=True, max_new_tokens=30)
    one_line(error)
    to_eos, ignoring = backend.generate([
        DecodeRequest(PROMPT, record_probs=True, max_new_tokens=30, sampling=GREEDY),
        DecodeRequest(PROMPT, record_probs=True, ignore_eos=True, max_new_tokens=30, sampling=GREEDY)])
    assert to_eos[0].tokens == free.tokens[:cut] and to_eos[0].finish_reason == "eos"
    assert ignoring[0].tokens == free.tokens and ignoring[0].finish_reason == "length"
    assert len(ignoring[0].recorded.target_probs) == 30
    assert ignoring[0].text == " ".join(map(str, free.tokens[:cut - 1]))  # the text stops at the first EOS
    decoded = backend.generate([DecodeRequest(PROMPT, ignore_eos=True, logprobs=True, max_new_tokens=30,
                                              sampling=GREEDY)])[0][0]
    assert decoded.tokens == free.tokens and len(decoded.logprobs) == 30


def test_trace_lines_may_hold_unicode_line_separators_and_a_bom(tmp_path):
    texts = ["a\u2028b", "c\u2029d", "e\u0085f\rg"]
    path = tmp_path / "traces.jsonl"
    lines = [json.dumps({"sample_group": 1, "trace": t, "problem": "p\u2028q"}, ensure_ascii=False) for t in texts]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8") + b"\r\n")
    groups, skipped = load_traces(path)
    assert skipped == 0 and groups[0].traces == texts and groups[0].prompt == "p\u2028q"
    dataset = tmp_path / "data.jsonl"
    dataset.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "x\u2028y"}, ensure_ascii=False).encode() + b"\n")
    assert [p.text for p in load_prompts(str(dataset))] == ["x\u2028y"]


class ChunkTokenizer:
    """Tokens of up to 64 equal characters (as BPE merges "====...")."""

    def __call__(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            j = i
            while j < len(text) and j - i < 64 and text[j] == text[i]:
                j += 1
            ids.append(ord(text[i]) * 100 + (j - i))
            i = j
        return {"input_ids": ids}


def test_traces_replay_exactly_max_tokens_whatever_the_characters_per_token():
    tokenizer = ChunkTokenizer()
    text = "=" * 100000
    assert len(first_tokens(tokenizer, text, 1000)) == 1000  # was 188 (text cut at 12 characters per token)
    assert first_tokens(tokenizer, text, 1000) == tokenizer(text)["input_ids"][:1000]
    mixed = "".join(chr(97 + i % 3) * (1 + i % 70) for i in range(3000))
    assert first_tokens(tokenizer, mixed, 500) == tokenizer(mixed)["input_ids"][:500]
    assert first_tokens(tokenizer, "ab", 1000) == tokenizer("ab")["input_ids"]


@pytest.mark.parametrize("call, message", [
    (dict(method="ar", tree=None, diagnose=True), "diagnose applies to stand and stand-det, not 'ar'"),
    (dict(method="pld", tree=None, diagnose=True), "diagnose applies to stand and stand-det, not 'pld'"),
    (dict(method="recycle", tree="heuristic-80", diagnose=True), "diagnose applies to stand and stand-det"),
    (dict(method="recycle", tree="heuristic-80", extend=False), "extend=False applies to stand and stand-det"),
    (dict(method="pld", copy_tokens=3), "copy_tokens=3 applies to stand and stand-det"),
    (dict(feed_rejected="no"), "feed_rejected must be True or False, got 'no'"),
    (dict(extend="no"), "extend must be True or False, got 'no'"),
    (dict(diagnose=1), "diagnose must be True or False, got 1"),
    (dict(copy_tokens=-1), "copy_tokens must be an integer in [0, 64], got -1"),
    (dict(copy_tokens=65), "copy_tokens must be an integer in [0, 64], got 65"),
    (dict(copy_tokens=2.0), "copy_tokens must be an integer in [0, 64], got 2.0"),
    (dict(method="pld", tree="heuristic-80"), "method 'pld' drafts no static tree"),
    (dict(method="recycle", tree="dynamic"), "a dynamic tree applies to stand, stand-det"),
])
def test_method_options_are_checked_once_when_the_method_is_made(tiny_qwen2, call, message):
    """Every engine, backend and bench takes a Method, so its options have one check: Method.parse (its
    expert switches: Method.ablated)."""
    call = dict(call)
    name, tree = call.pop("method", "stand"), call.pop("tree", "heuristic-80")
    switches = {key: call.pop(key) for key in ("extend", "diagnose") if key in call}
    with pytest.raises(StandError, match=re.escape(message)) as error:
        Method.parse(name, tree, tiny_qwen2, **call).ablated(**switches)
    one_line(error)


def test_method_parse_refuses_a_model_name_for_a_model():
    with pytest.raises(StandError, match=re.escape("model must be a transformers causal LM (from load_model), not str")) as error:
        Method.parse("stand", "auto", "smollm2-135m")
    one_line(error)


def test_a_memory_the_method_cannot_use_is_refused_on_every_entry_point(tiny_qwen2):
    method = Method.parse("stand", "dynamic-80", tiny_qwen2)
    message = "a dynamic tree drafts from contexts of up to 8 tokens but the store given keeps 3"
    with pytest.raises(StandError, match=re.escape(message)) as error:
        generate(tiny_qwen2, None, PROMPT, method=method, sampling=GREEDY, max_new_tokens=4, store=NGramStore())
    one_line(error)
    with pytest.raises(StandError, match=re.escape(message)):
        generate_batch(tiny_qwen2, None, [PROMPT], n=2, method=method, sampling=GREEDY, max_new_tokens=4,
                       store=NGramStore())
    with pytest.raises(StandError, match=re.escape(message)):
        decode_rows(tiny_qwen2, None, [RowSpec(PROMPT, GREEDY, max_new_tokens=4, memory=NGramStore())], method=method)
    with pytest.raises(StandError, match="method 'recycle' shares a RecyclingMatrix, not NGramStore"):
        generate(tiny_qwen2, None, PROMPT, method=Method.parse("recycle", None, tiny_qwen2), max_new_tokens=4,
                 store=NGramStore())
    for call in (lambda: generate(tiny_qwen2, None, PROMPT, method="ar", logprobs="yes"),
                 lambda: RowSpec(PROMPT, GREEDY, logprobs="yes")):
        with pytest.raises(StandError, match="logprobs must be True or False, got 'yes'"):
            call()


def test_backend_flags_are_bools_and_a_dynamic_tree_gets_a_long_context_store(tiny_qwen2):
    with pytest.raises(StandError, match="share_memory must be True or False, got 'x'"):
        HFBackend(tiny_qwen2, None, "stand", share_memory="x")
    with pytest.raises(StandError, match="diagnose applies to stand and stand-det, not 'ar'"):
        HFBackend(tiny_qwen2, None, method=Method.parse("ar", None, tiny_qwen2).ablated(diagnose=True))
    with pytest.raises(StandError, match="ignore_eos must be True or False"):
        DecodeRequest(PROMPT, ignore_eos="no")
    # without a store, a dynamic tree gets one with 8-token contexts (the README's case, done right)
    result = generate(tiny_qwen2, None, PROMPT, method=Method.parse("stand", "dynamic-16", tiny_qwen2), sampling=SamplingParams(temperature=0), max_new_tokens=6, eos_token_ids=[], store=NGramStore(max_n=8))
    assert len(result.tokens) == 6


# 2. tracebacks and hangs -----------------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (dict(seed=1.5), "seed must be an integer in [0, 2**64), got 1.5"),
    (dict(seed=[1, 2.5]), "seed[1]: seed must be an integer"),
    (dict(eos_token_ids=5), "eos_token_ids must be a list of token ids, got 5"),
    (dict(on_tokens=5), "on_tokens must be a function or None, got 5"),
    (dict(n=10**6), "at most 1024"),
    (dict(n=0), "n (samples per prompt) must be an integer >= 1, got 0"),
    (dict(sampling={"temperature": .5}), "sampling must be a SamplingParams or a list of them (one per row), got dict"),
    (dict(sampling=[GREEDY, {"temperature": 0}]), "sampling[1] must be a SamplingParams (e.g. SamplingParams(temperature=0)), got dict"),
    (dict(seed=2**64 - 1), "the last, 18446744073709551615 + 1, is past 2**64 - 1"),
])
def test_generate_batch_refuses_bad_arguments_before_any_work(tiny_qwen2, call, message):
    with pytest.raises(StandError, match=re.escape(message)) as error:
        generate_batch(tiny_qwen2, None, [PROMPT], n=call.pop("n", 2),
                       method=Method.parse("stand", "heuristic-80", tiny_qwen2), max_new_tokens=3, **call)
    one_line(error)


def test_decode_rows_and_row_specs_refuse_bad_arguments_before_the_first_step(tiny_qwen2):
    forwards = []
    counted = tiny_qwen2.register_forward_hook(lambda *args: forwards.append(1))
    try:
        with pytest.raises(StandError, match="on_finish must be a function or None, got 5"):
            decode_rows(tiny_qwen2, None, [RowSpec(PROMPT, GREEDY, max_new_tokens=3)], on_finish=5)
        with pytest.raises(StandError, match="decode_rows takes a non-empty list of RowSpec"):
            decode_rows(tiny_qwen2, None, RowSpec(PROMPT, GREEDY))
        assert not forwards, "nothing ran before the error"
    finally:
        counted.remove()
    for sampling in (None, {"temperature": 0}):
        with pytest.raises(StandError, match="a row's sampling must be a SamplingParams") as error:
            RowSpec(PROMPT, sampling)
        one_line(error)
    with pytest.raises(StandError, match="max_new_tokens must be an integer >= 1, got 2.0"):
        RowSpec(PROMPT, GREEDY, max_new_tokens=2.0)


def test_sampling_takes_numpy_scalars_and_refuses_a_float_top_k(tiny_qwen2):
    params = SamplingParams(np.float32(0.7), np.float64(0.9), np.int64(3))
    assert (params.temperature, params.top_p, params.top_k) == (pytest.approx(0.7), 0.9, 3)
    assert type(params.top_k) is int and type(params.temperature) is float
    with pytest.raises(StandError, match="top_k must be an integer, got 2.0") as error:
        generate(tiny_qwen2, None, PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.7, top_k=2.0), max_new_tokens=8, seed=3, eos_token_ids=[])  # was a traceback from torch.topk
    one_line(error)
    as_numpy = generate(tiny_qwen2, None, PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.7, top_k=np.int64(2)), max_new_tokens=np.int64(8), seed=np.int64(3), eos_token_ids=[])
    as_int = generate(tiny_qwen2, None, PROMPT, method=Method.parse("stand", "heuristic-80", tiny_qwen2), sampling=SamplingParams(temperature=0.7, top_k=2), max_new_tokens=8, seed=3, eos_token_ids=[])
    assert as_numpy.tokens == as_int.tokens
    for bad, message in (({"top_k": 2.5}, "top_k must be an integer, got 2.5"),
                         ({"temperature": "0.7"}, "temperature must be a number"),
                         ({"temperature": 10**400}, "temperature must be a finite number, got an integer too large"),
                         ({"temperature": 1e308}, "temperature must be <= 1e\\+06"),  # 1 / T is 0 in float32
                         ({"top_p": math.nan}, "top_p must be a finite number"), ({"top_k": True}, "top_k must be an integer")):
        with pytest.raises(StandError, match=message):
            SamplingParams(**bad)


def test_store_and_proposer_sizes_are_bounded_before_any_work():
    from stand_runtime.vllm.proposer import read_options

    with pytest.raises(StandError, match=r"NGramStore: max_n must be an integer in \[1, 64\], got 100000000"):
        NGramStore(max_n=10**8)  # used to hang building 10**8 tables
    with pytest.raises(StandError, match=r"max_n must be an integer in \[1, 64\], got 100000000"):
        read_options('{"max_n": 100000000}')
    with pytest.raises(StandError, match=r"max_prompts must be an integer in \[1, 1000000\]"):
        read_options('{"max_prompts": 10000000000}')
    with pytest.raises(StandError, match="stats_path: cannot write /no/such/folder/s.json: folder /no/such/folder does not exist"):
        read_options('{"stats_path": "/no/such/folder/s.json"}')
    assert NGramStore(max_n=np.int64(8)).max_n == 8
    with pytest.raises(StandError, match="n .samples per prompt. must be an integer in \\[1, 65536\\]"):
        DecodeRequest(PROMPT, n=10**6)


def test_dvts_checks_the_whole_budget_against_the_context_up_front():
    model = tiny_model(max_positions=128)
    tokenizer = DigitsTokenizer()
    calls = []

    class Counting(HFBackend):
        def generate(self, requests, **kwargs):
            calls.append(requests)
            return super().generate(requests, **kwargs)

    problem = Prompt("long", " ".join(["3"] * 110))
    settings = SearchSettings("dvts", n=2, subtrees=1, max_new_tokens=30, step_tokens=4, max_rounds=8, seed=1)
    with pytest.raises(StandError, match="problem long: .*context") as error:
        dvts(Counting(model, tokenizer, "ar"), tokenizer, problem, settings, CallableVerifier(lambda *a: 0.0), vocab=16)
    one_line(error)
    assert calls == [], "refused before the first round"


# 3. messages that mislead ----------------------------------------------------------------------


def test_messages_name_what_was_given():
    with pytest.raises(StandError, match="give a seed <= 18446744073709551614"):
        DecodeRequest(PROMPT, n=2, seed=2**64 - 1)
    from treeopt.evaluate.verifiers import make_verifier

    with pytest.raises(StandError, match="no process reward model folder /nope"):
        make_verifier("prm:/nope")


# 4. a missing optional dependency is found before the model loads ------------------------------


def test_a_missing_optional_package_is_found_before_the_model_loads(monkeypatch, tiny_qwen2):
    from stand_runtime.drafters import OPTIONAL_PACKAGES
    from test_cli import one_line_error, run
    from treeopt.evaluate.bench import parse_methods
    from treeopt.evaluate.trace_bench import parse_trace_methods

    monkeypatch.setitem(OPTIONAL_PACKAGES, "suffix", ("no_such_module_for_stand", "pip install no-such-module"))
    monkeypatch.setattr("treeopt_cli.loading.load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    code, output = run("bench", "--methods", "ar,pld,suffix,stand", "--samples", "1")
    assert code == 2
    one_line_error(output, "method 'suffix' needs no-such-module-for-stand: pip install no-such-module")
    for parse in (lambda: parse_methods("ar,suffix", None), lambda: parse_trace_methods("pld,suffix-tuned")):
        with pytest.raises(StandError, match="method 'suffix' needs"):
            parse()
    with pytest.raises(StandError, match="method 'suffix' needs"):
        generate(tiny_qwen2, None, PROMPT, method="suffix")


def test_empty_method_lists_are_refused_everywhere(tmp_path):
    from test_cli import one_line_error, run

    traces = tmp_path / "t.jsonl"
    traces.write_text("\n".join(json.dumps({"sample_group": 1, "trace": "a b", "problem": "p"}) for _ in range(2)))
    for args in (["bench-traces", str(traces), "--methods", ""], ["bench", "--methods", " , "],
                 ["search", "--dataset", str(traces), "--methods", ""]):
        code, output = run(*args)
        assert code == 2, args
        one_line_error(output, "--methods is empty")


# 5. found by a new user's probe (about 600 inputs; see the stop note) ------------------------------


def test_prompts_stops_and_recycling_matrices_are_checked_where_they_are_made(tiny_qwen2):
    from stand_runtime import RecyclingMatrix

    assert generate(tiny_qwen2, None, np.array([PROMPT]), sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=3, eos_token_ids=[]).tokens == generate(tiny_qwen2, None, PROMPT, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=3, eos_token_ids=[]).tokens  # [1, n] array
    for stop, message in (({"x": 1}, "stop must be a string or a list of strings"),
                          (["\udcff"], "is not valid UTF-8 text")):
        with pytest.raises(StandError, match=message):
            generate(tiny_qwen2, DigitsTokenizer(), PROMPT, method="ar", max_new_tokens=3, stop=stop)
    for args, message in ((("16",), "RecyclingMatrix vocab must be an integer"), ((16.5,), "RecyclingMatrix vocab"),
                          ((True,), "RecyclingMatrix vocab"), ((16, 17), r"k \(successors per token\) must be an integer in \[1, 16\]")):
        with pytest.raises(StandError, match=message):
            RecyclingMatrix(*args)


@pytest.mark.parametrize("vocab", [0, -5, 16.0, "16", True, None])
def test_every_method_refuses_a_vocabulary_size_that_is_not_a_positive_int(vocab):
    """A fresh memory takes the same vocabulary sizes for every method (stand and suffix took any, while
    recycle's matrix refused them): a positive int, numpy integers too; never a bool."""
    from stand_runtime.drafters import METHODS, new_memory

    message = "^" + re.escape(f"vocab must be an integer in [1, 4194304], got {vocab!r}")
    for name in METHODS:
        with pytest.raises(StandError, match=message) as error:
            new_memory(name, vocab)
        one_line(error)
    with pytest.raises(StandError, match=message):
        Method.parse("stand", "heuristic-80").new_memory(vocab)
    assert isinstance(Method.parse("stand", "heuristic-80").new_memory(np.int64(16)), NGramStore)


def test_options_that_would_be_ignored_are_refused(tiny_qwen2):
    with pytest.raises(StandError, match="method 'ar' drafts none"):
        generate_batch(tiny_qwen2, None, [PROMPT], method=Method.parse("ar", None, tiny_qwen2, batch=len([PROMPT]), max_nodes=5))
    assert generate_batch(tiny_qwen2, None, [PROMPT], method=Method.parse("stand", "heuristic-80", tiny_qwen2, batch=len([PROMPT]) * 2, max_nodes=np.int64(3)), sampling=SamplingParams(temperature=0), n=2, max_new_tokens=4, eos_token_ids=[])[0].tokens  # numpy cap accepted
    with pytest.raises(StandError, match="it applies with max_batch > 1"):
        HFBackend(tiny_qwen2, None, method=Method.parse("stand", "heuristic-80", tiny_qwen2, max_nodes=5))
    with pytest.raises(StandError, match="batch_size applies to record_probs requests"):
        HFBackend(tiny_qwen2, None, method=Method.parse("stand", "heuristic-80", tiny_qwen2), batch_size=4)
    row = RowSpec(PROMPT, GREEDY, max_new_tokens=3)
    with pytest.raises(AttributeError):  # frozen: checked once, never changed after (was: logprobs="no" taken as True)
        row.logprobs = "no"
    with pytest.raises(StandError, match="subtrees applies to dvts"):
        SearchSettings("best-of-n", n=4, subtrees=2)


def test_search_checks_its_settings_problems_and_seeds_before_the_first_problem(tiny_qwen2):
    from treeopt.evaluate.search import run_search

    backend = HFBackend(tiny_qwen2, DigitsTokenizer(), "ar")
    for kwargs, message in (({"seed": True}, "seed must be an integer"), ({"seed": -1}, "seed must be in"),
                            ({"sampling": {"temperature": 0}}, "sampling must be a SamplingParams"),
                            ({"n": 10**6}, r"n must be an integer in \[1, 65536\]")):
        with pytest.raises(StandError, match=message):
            SearchSettings(**kwargs)
    problems = [Prompt("a", "3 5 7"), Prompt("b", "5 7 3")]
    calls = []
    counting = type("Counting", (), {"generate": lambda self, requests, **k: calls.append(1) or backend.generate(requests, **k),
                                     "check_request": backend.check_request})()
    with pytest.raises(StandError, match="give a seed <= 18446744073709551612"):
        run_search(counting, DigitsTokenizer(), problems, SearchSettings(n=2, max_new_tokens=2, seed=2**64 - 3))
    assert calls == [], "the late problem's seed is checked before the first problem decodes"
    for bad, message in ((["3 5 7"], "problems: item 0 must be a Prompt"), (Prompt("a", "3 5"), "problems must be a list of Prompt")):
        with pytest.raises(StandError, match=message):
            run_search(backend, DigitsTokenizer(), bad, SearchSettings(n=2, max_new_tokens=2))
    with pytest.raises(StandError, match="on_problem must be a function"):
        run_search(backend, DigitsTokenizer(), problems, SearchSettings(n=2, max_new_tokens=2), on_problem=5)
    judge = CallableVerifier(lambda *a: 0.0, name="j")
    for scores, message in (({0: 1.0, 1: 2.0}, "returned dict"), ([10**400, 1.0], "an integer too large for a float")):
        with pytest.raises(StandError, match=message):
            check_scores(judge, scores, 2)
    from treeopt.evaluate.verifiers import make_verifier

    with pytest.raises(StandError, match="trust_remote_code must be True or False"):
        make_verifier("confidence", trust_remote_code="yes")


def test_traces_keys_trees_and_bench_arguments_are_checked(tmp_path):
    from treeopt.evaluate.trace_bench import parse_trace_methods, run_trace_bench
    from treeopt.data.traces import tokenize_groups

    def write(*records):
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in records))
        return path

    for records, message in (
            (({"sample_group": 1, "trace": "a", "problem": "p"}, {"sample_group": "1", "trace": "b", "problem": "p"}),
             "of another type would name one group"),
            (({"sample_group": None, "trace": "a", "problem": "p"},), "must be text or an integer, got null"),
            (({"sample_group": 1, "trace": "a", "problem": "p"}, {"sample_group": 1, "trace": "b", "problem": "q"}),
             "has another 'problem' than its first trace")):
        with pytest.raises(StandError, match=message):
            load_traces(write(*records))
    with pytest.raises(StandError, match="must be a path"):
        load_traces(None)
    groups, _ = load_traces(write({"sample_group": "g", "trace": "1 2 3", "problem": "1 2"}))
    with pytest.raises(StandError, match="needs a tokenizer"):
        tokenize_groups(groups, None, 5)
    for args, message in ((("pld", "heuristic-80"), "applies to none of pld"), (("stand", "bogus"), "tree not found"),
                          (("recycle", "dynamic-16"), "applies to none of recycle"),
                          (("pld", None, 5), "copy_tokens is STAND's copy path"),
                          (("stand", None, 100), r"copy_tokens must be an integer in \[0, 64\]")):
        with pytest.raises(StandError, match=message):
            parse_trace_methods(*args)
    with pytest.raises(StandError, match="non-empty list of trace groups"):
        run_trace_bench([], parse_trace_methods("pld"))
    with pytest.raises(StandError, match="is not tokenized"):
        run_trace_bench(groups, parse_trace_methods("pld"))


def test_vllm_options_and_datasets_take_what_python_code_passes(tmp_path):
    from pathlib import Path

    from stand_runtime.vllm import speculative_config
    from stand_runtime.vllm.proposer import read_options

    config = speculative_config(np.int64(4), stats_path=Path(tmp_path / "s.json"), max_prompts=np.int64(8),
                                stochastic=np.bool_(True))
    assert config["num_speculative_tokens"] == 4
    with pytest.raises(StandError, match="must be JSON values"):
        speculative_config(4, copy={"a"})
    with pytest.raises(StandError, match="must be JSON text, got int"):
        read_options(123)
    with pytest.raises(StandError, match="STAND_VLLM_OPTIONS: JSON nested too deeply"):
        read_options("[" * 100000 + "]" * 100000)
    for kwargs, message in (({"samples": "3"}, "samples must be an integer"), ({"offset": 1.5}, "offset must be an integer"),
                            ({"samples": True}, "samples must be an integer"), ({"shuffle_seed": -1}, "shuffle_seed")):
        with pytest.raises(StandError, match=message):
            load_prompts("humaneval", **kwargs)
    data = tmp_path / "ids.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ({"problem": "a", "id": "1"}, {"problem": "b"}, {"problem": "c"})))
    with pytest.raises(StandError, match="records 1 and 2 have the same id '1'"):
        load_prompts(str(data))
    data.write_text(json.dumps({"problem": "a", "answer": [1, 2]}))
    with pytest.raises(StandError, match="answer must be text or a number"):
        load_prompts(str(data))
    # a user test: these were graded as wrong answers ('', 'nan', 'inf') instead of being refused
    for answer, message in (('""', "line 1: answer is empty"), ('"  "', "answer is empty"), ("NaN", "answer nan is not a finite"),
                            ("1e400", "answer inf is not a finite"), ("-Infinity", "answer -inf is not a finite")):
        data.write_text('{"problem": "a", "answer": ' + answer + '}')
        with pytest.raises(StandError, match=message):
            load_prompts(str(data))


@pytest.mark.parametrize("args, message", [
    (["bench-traces", "T", "--trajectories", "4"], "No such option: --trajectories"),
    (["bench-traces", "T", "--temperature", "0.9"], "No such option: --temperature"),
    (["bench-vllm", "--traces", "T"], "No such option: --traces"),
    (["bench-vllm", "--png", "x.png"], "No such option: --png"),
    (["bench-vllm", "--temperature", "0", "--trajectories", "2"], "vLLM's greedy sampling takes one trajectory"),
    (["bench-vllm", "--k", "²"], "--k must be auto or an integer in [1, 128], got '²'"),
    (["bench-vllm", "--k", "129"], "--k must be auto or an integer in [1, 128], got '129'"),
    (["bench-vllm", "--k", "4", "--methods", "ar"], "--k sizes the drafts of stand, ngram and suffix"),
    (["bench", "--copy-tokens", "5"], "No such option: --copy-tokens"),
    (["bench", "--methods", "recycle", "--tree", "dynamic-16"], "tree 'dynamic-16' applies to none of 'recycle'"),
    (["bench", "--max-new-tokens", "1000000000"], "context too long"),
    (["calibrate", "--traces", "T", "--temperature", "0.9"], "--temperature does not apply to calibrate --traces"),
    (["calibrate", "--max-tokens", "5"], "--max-tokens does not apply to calibrate without --traces"),
    (["export", "stand-smollm2-humaneval", "--nodes", "８０"], "--nodes must be auto or an integer >= 1 in digits 0-9"),
    (["export", "stand-smollm2-humaneval", "--nodes", "80", "--batch", "4"], "--batch does not apply to a fixed --nodes"),
    (["export", "stand-smollm2-humaneval", "--format", "family", "--nodes", "5"], "--nodes does not apply to --format family"),
    (["candidate", "--profile", "4,2", "--nodes", "999", "--out", "c.json"], "--nodes does not apply to --profile"),
    (["candidate", "--profile", "８,2", "--out", "c.json"], "--profile entries must be an integer >= 1 in digits 0-9"),
    (["candidate", "--profile", "10,100,1000,4000", "--out", "c.json"], "per-depth counts hold 5110 nodes, more than a tree's 4096"),
    (["export", "stand-smollm2-humaneval", "--format", "family", "--show"], "--show does not apply to --format family"),
    (["candidate", "--decay", "1025", "--out", "c.json"], "Invalid value for '--decay'"),
    (["candidate", "--base", "1e-300", "--out", "c.json"], "Invalid value for '--base'"),
    (["candidate", "--profile", "3,0", "--out", "c.json"], "--profile entries must be an integer >= 1, got 0"),
    (["candidate", "--profile", "11", "--out", "c.json"], "depth 1 cannot hold 11 nodes (from 1 to 10: the previous depth has 1, at most 10 children each)"),
    (["search", "--dataset", "D", "--verifier", "bogus"], "--verifier does not apply to --strategy best-of-n"),
    (["search", "--dataset", "D", "--methods", "ar", "--tree", "bogus"], "--tree bogus applies to none of 'ar'"),
    (["search", "--dataset", "D", "--max-batch", "2000"], "Invalid value for '--max-batch'"),
    (["search", "--dataset", "D", "--samples", "3", "--seed", "18446744073709551615", "--n", "4"], "give a seed <="),
    (["generate", "--stop", "\udcff", "hi"], "is not valid UTF-8 text"),
])
def test_cli_refuses_ignored_and_late_checked_options_before_the_model_loads(args, message, tmp_path, monkeypatch):
    from test_cli import one_line_error, run

    traces = tmp_path / "t.jsonl"
    traces.write_text("\n".join(json.dumps({"sample_group": 1, "trace": "a b", "problem": "p"}) for _ in range(2)))
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"problem": f"q{i}", "answer": "1"}) for i in range(3)))
    args = [str(traces) if a == "T" else str(data) if a == "D" else str(tmp_path / a) if a.endswith(".json") else a
            for a in args]
    monkeypatch.setattr("treeopt_cli.loading.load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    monkeypatch.chdir(tmp_path)
    code, output = run(*args)
    assert code == 2, output
    one_line_error(output, message)


def test_the_python_api_refuses_wrong_types_where_they_are_given(tiny_qwen2, tmp_path):
    """A user test of the Python API: each of these reached torch, numpy or an attribute deep inside
    (TypeError, AttributeError, ZeroDivisionError, IndexError) or was taken silently; each is now one line."""
    from stand_runtime import LatencyProfile, load_model, measure_latency, replay_trace, save_tree, load_tree
    from stand_runtime.drafters import RecyclingMatrix, TokenRecyclingDrafter
    from stand_runtime.drafters.prior import SuccessorPrior

    row = RowSpec(PROMPT, GREEDY, max_new_tokens=2)
    calls = [
        (lambda: generate(tiny_qwen2, "tok", PROMPT, max_new_tokens=2), "tokenizer must be"),
        (lambda: generate_batch(tiny_qwen2, object(), [PROMPT], max_new_tokens=2), "tokenizer must be"),
        (lambda: HFBackend(tiny_qwen2, "tok"), "tokenizer must be"),
        (lambda: decode_rows(tiny_qwen2, None, [row], method="ar", prefixes="x"), "prefixes must be a PrefixCache"),
        (lambda: load_model(device="tpu"), "device 'tpu' cannot be used"),
        (lambda: load_model(fast="no"), "fast must be True or False"),
        (lambda: SizingSession.for_model(tiny_qwen2, latency="x"), "latency must be a LatencyProfile"),
        (lambda: generate(tiny_qwen2, None, PROMPT, max_new_tokens=2, sizing="x"), "sizing must be a SizingSession"),
        (lambda: Method.parse("ar").ablated(allocation="x"), "allocation must be one of batch, row"),
        (lambda: Method.parse("ar").ablated(extended=False), "unknown ablation switch 'extended'"),
        (lambda: LatencyProfile((1, 2, 4), (0.0, 0.0, 0.0)), r"seconds must be finite times \(> 0 s\)"),
        (lambda: LatencyProfile((), ()), "sizes must be token counts"),
        (lambda: LatencyProfile((1, 2), (0.1,)), "2 sizes but 1 seconds"),
        (lambda: LatencyProfile((2, 1), (0.1, 0.2)), "sizes must increase"),
        (lambda: LatencyProfile((1, 2), (0.1, math.nan)), "seconds must be finite"),
        (lambda: measure_latency(tiny_qwen2, sizes=()), "at least one"),
        (lambda: measure_latency(tiny_qwen2, sizes="abc"), "sequence of token counts"),
        (lambda: measure_latency(tiny_qwen2, sizes=(1,), rounds=0), "rounds must be"),
        (lambda: measure_latency(tiny_qwen2, sizes=(1,), prefix_len=-1), "prefix_len must be"),
        (lambda: measure_latency(None, sizes=(1,)), "model must be"),
        (lambda: replay_trace(None, None, [1]), "trace replay prompt"),
        (lambda: replay_trace("x", [1, 2], [3, 4]), "drafter must be a Drafter"),
        (lambda: replay_trace(None, [1, 2], [-1]), "trace replay tokens: prompt ids must be non-negative"),
        (lambda: Method.parse("stand", "heuristic-80", prior="x"), "prior must be a SuccessorPrior"),
        (lambda: SuccessorPrior(np.zeros((3,)), np.zeros((3, 2))), r"\[V, k\] numpy arrays of one shape"),
        (lambda: RowSpec([]), "empty prompt"),
        (lambda: RowSpec([-5]), "non-negative"),
        (lambda: DecodeRequest(None), "a prompt is text or token ids, not NoneType"),
        (lambda: DecodeRequest(""), "empty prompt"),
        (lambda: save_tree(load_tree("heuristic-80"), 5), "a file path must be"),
        (lambda: replay_trace(TokenRecyclingDrafter(load_tree("heuristic-80").tree, RecyclingMatrix(100)), [1, 2], [3, 150]),
         "token id 150 is outside the drafter's vocabulary of 100 tokens"),
        (lambda: RecyclingMatrix(10**12), r"RecyclingMatrix vocab must be an integer in \[1, 4194304\]"),
        (lambda: Method.parse("recycle").new_memory(10**12), r"vocab must be an integer in \[1, 4194304\]"),
        (lambda: DecodeRequest(PROMPT, group=""), "group must be a non-empty string or None"),
        (lambda: Method.parse("stand").drafter(None, None, GREEDY, 16), "a value rule goes with"),
    ]
    for call, message in calls:
        with pytest.raises(StandError, match=message) as error:
            call()
        one_line(error)


def test_the_treeopt_library_refuses_what_it_would_misuse(tiny_qwen2, tmp_path):
    """A user test of treeopt as a library: each of these returned a wrong result silently (a tree of
    the wrong size, a calibration file its own loader refuses, best-of-N run as DVTS, a tree name split
    into characters) or reached a raw error; each is now one line before any decoding."""
    from pathlib import Path

    from treeopt import CalibrationConfig, calibrate, per_depth_tree, prune, run_bench
    from treeopt.evaluate.bench import parse_methods
    from treeopt.evaluate.search import compare_methods, run_search, search_problem
    from treeopt.evaluate.search import best_of_n, dvts
    from treeopt.evaluate.verifiers import ConfidenceVerifier, make_verifier
    from treeopt.optimize.candidate import candidate_tree

    tokenizer, backend = DigitsTokenizer(), HFBackend(tiny_qwen2, DigitsTokenizer(), "ar")
    twice = [Prompt("a", "3 5 7"), Prompt("a", "5 7 3")]
    best, tree_search = SearchSettings(n=2, max_new_tokens=2), SearchSettings(strategy="dvts", n=2, max_new_tokens=2)
    calls = [
        (lambda: prune(candidate_tree(5), np.full(5, np.nan), 3), "alpha must be finite"),
        (lambda: prune(candidate_tree(5), np.full(5, 0.5), 3.5), "nodes must be an integer"),
        (lambda: per_depth_tree([]), "at least one depth"),
        (lambda: per_depth_tree([2.5]), "nodes at depth 1 must be an integer"),
        (lambda: calibrate(CalibrationConfig(max_new_tokens=2, candidate_nodes=5), tiny_qwen2, tokenizer,
                           tmp_path / "c.json", prompts=twice), "the same id 'a'"),
        (lambda: calibrate(CalibrationConfig(max_new_tokens=2, candidate_nodes=5), tiny_qwen2, tokenizer,
                           tmp_path / "c.json", prompts=[]), "the list is empty"),
        (lambda: run_search(backend, tokenizer, twice, best), "the same id 'a'"),
        (lambda: run_bench(tiny_qwen2, tokenizer, twice, parse_methods("ar", None), sampling=GREEDY,
                           max_new_tokens=2, seed=0), "the same id 'a'"),
        (lambda: run_bench(tiny_qwen2, tokenizer, [Prompt("c", "4 4"), Prompt("long", " ".join(["1"] * 250))],
                           parse_methods("ar", None), sampling=GREEDY, max_new_tokens=10, seed=0), "prompt long:"),
        (lambda: run_bench(tiny_qwen2, tokenizer, twice[:1], parse_methods("ar", None), sampling=GREEDY,
                           max_new_tokens=2, seed=0, on_run=5), "on_run must be"),
        (lambda: best_of_n(backend, tokenizer, twice[0], tree_search), "for 'dvts', not 'best-of-n'"),
        (lambda: dvts(backend, tokenizer, twice[0], best, ConfidenceVerifier(), 16), "for 'best-of-n', not 'dvts'"),
        (lambda: search_problem(backend, tokenizer, twice[0], best, None, None, index=-1), "index"),
        (lambda: search_problem(backend, tokenizer, "1 2 3", best, None, None), "problem must be a Prompt"),
        (lambda: run_search(None, tokenizer, twice[:1], best), "backend must be a DecodingBackend"),
        (lambda: compare_methods({"ar": backend}, tokenizer, [], best, None, None), "at least one problem"),
        (lambda: compare_methods({}, tokenizer, twice[:1], best, None, None), "backends must be a non-empty dict"),
        (lambda: make_verifier(ConfidenceVerifier), "not the class ConfidenceVerifier"),
        (lambda: search_problem(backend, tokenizer, twice[0], SearchSettings(strategy="dvts", n=4, seed=2**63),
                                "confidence", 16, index=2**62), "need more than 2\\*\\*64 seeds"),
    ]
    for call, message in calls:
        with pytest.raises(StandError, match=message) as error:
            call()
        one_line(error)
    assert [m.tree_name for m in parse_methods("stand", "heuristic-80")] == ["heuristic-80"]  # not its characters
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "x", "prompt": "1 2"}) + "\n")
    assert [p.id for p in load_prompts(Path(data))] == ["x"]


def test_replay_and_trace_tokenizing_refuse_what_does_not_fit():
    """The last of the treeopt user test's raw errors: a replay past its recording (IndexError), an
    empty prompt, a short accumulator, and groups that are not TraceGroups."""
    from stand_runtime.engine.batch_sampling import RecordedDistributions
    from stand_runtime.randomness import RandomStream
    from treeopt.data.traces import tokenize_groups
    from treeopt.optimize.candidate import candidate_tree
    from treeopt.optimize.replay import replay_trajectory

    tree = candidate_tree(5)
    recorded = RecordedDistributions(np.zeros((3, 10), np.int64), np.zeros((3, 10)), [np.zeros(1, np.int64)] * 2,
                                     [np.ones(1)] * 2)
    store, stream, sums = NGramStore(), RandomStream.seeded(0), np.zeros(6)
    for args, message in ((([1, 2], [3, 4, 5], recorded, tree, store, stream, sums), "fewer than 4 and 3"),
                          (([], [3], recorded, tree, store, stream, sums), "needs a prompt and tokens"),
                          (([1, 2], [3], recorded, tree, store, stream, np.zeros(3)), r"alpha_sum must be \[6\]")):
        with pytest.raises(StandError, match=message):
            replay_trajectory(*args)
    with pytest.raises(StandError, match="segmentations must be"):
        replay_trajectory([1, 2], [3], recorded, tree, store, stream, sums, segmentations=0)
    for groups, message in ((None, "groups must be a list of TraceGroup"), (["x"], "TraceGroup objects")):
        with pytest.raises(StandError, match=message):
            tokenize_groups(groups, DigitsTokenizer(), 8)


def test_a_session_sized_for_one_target_refuses_to_decode_another(tiny_qwen2):
    """A value-sized tree's draft sizes come from its session's latency profile of its target here: decoding a
    target of another architecture, dtype or device with that session is one line; the same architecture with
    other weights is fine."""
    sized, sizing = Method.parse("stand", "dynamic-auto-16", tiny_qwen2), SizingSession.for_model(tiny_qwen2)
    assert sized.sized_for is None and "float32 on cpu" in sizing.target[1]  # the method itself sizes nothing
    other_weights = tiny_model("qwen2", seed=5)
    generate(other_weights, None, PROMPT, method=sized, sampling=GREEDY, max_new_tokens=4, sizing=sizing)
    other_arch = tiny_model("llama")
    message = "this sizing session was sized for another target (qwen2, float32 on cpu, architecture "
    for call in (lambda: generate(other_arch, None, PROMPT, method=sized, sampling=GREEDY, max_new_tokens=4,
                                  sizing=sizing),
                 lambda: decode_rows(other_arch, None, [RowSpec(PROMPT, GREEDY, max_new_tokens=4)], method=sized,
                                     sizing=sizing)):
        with pytest.raises(StandError, match=re.escape(message)) as error:
            call()
        one_line(error)
    generate(other_arch, None, PROMPT, method=sized, sampling=GREEDY, max_new_tokens=4)  # its own default session
    unsized = Method.parse("stand", "dynamic-80", tiny_qwen2)  # nothing in it depends on the target
    generate(other_arch, None, PROMPT, method=unsized, sampling=GREEDY, max_new_tokens=4, sizing=sizing)
    for junk in ("qwen2", ("", ""), ("key", "name", "extra")):
        with pytest.raises(StandError, match="sized_for must be None or"):
            Method("stand", unsized.tree, sized_for=junk)
    with pytest.raises(StandError, match="sized_for must be None or"):
        Method("ar", sized_for=("key", "name"))  # plain decoding sizes nothing
    wider = tiny_model("qwen2", vocab=32)  # one name, another shape: the message tells them apart
    with pytest.raises(StandError, match=r"\(qwen2, float32 on cpu, architecture [0-9a-f]{8}\), not qwen2, float32 on "
                                         r"cpu, architecture [0-9a-f]{8}: make one for the model it decodes"):
        generate(wider, None, PROMPT, method=sized, sampling=GREEDY, max_new_tokens=4, sizing=sizing)
    part_cast = tiny_model("qwen2", seed=5)  # every parameter counts, not the first alone (the embedding)
    part_cast.model.layers[0].mlp.to(torch.bfloat16)
    with pytest.raises(StandError, match=r"not qwen2, bfloat16 on cpu \+ float32 on cpu, architecture"):
        generate(part_cast, None, PROMPT, method=sized, sampling=GREEDY, max_new_tokens=4, sizing=sizing)


def test_a_used_sizing_session_copies_and_pickles(tiny_qwen2):
    """A value rule's latency model marked its fit stale with a sentinel object, which a copy or pickle
    replaced: the next decode failed deep inside (TypeError in np.interp)."""
    import copy
    import pickle

    method, sizing = Method.parse("stand", "dynamic-auto-16", tiny_qwen2), SizingSession.for_model(tiny_qwen2)
    first = generate(tiny_qwen2, None, PROMPT, method=method, sampling=GREEDY, max_new_tokens=8, sizing=sizing)
    for clone in (copy.deepcopy(sizing), pickle.loads(pickle.dumps(sizing))):
        again = generate(tiny_qwen2, None, PROMPT, method=method, sampling=GREEDY, max_new_tokens=8, sizing=clone)
        assert again.tokens == first.tokens  # greedy: the same tokens whatever the draft sizes
