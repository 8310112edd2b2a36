"""``treeopt bench-vllm``: vLLM plain decoding, its built-in proposers and STAND, interleaved.

Every method is one vLLM engine on this machine's CPU, all started before the first prompt; each
prompt is one request with ``n`` samples (``SamplingParams(n=...)``: vLLM batches them, and STAND's
samples share the prompt's store), decoded by every method back to back (the order rotated per
prompt). Throughput is the request's tokens over its wall time; the acceptance length τ (tokens per
target forward) comes from vLLM's spec-decode counters: every request step emits one token plus its
accepted drafts, so τ = T / (T - accepted) for T generated tokens. ``hf`` adds this toolkit's Hugging
Face engine with plain decoding (batched over the n samples) on the same prompts.
"""

from __future__ import annotations

import time
from typing import Callable

from stand_runtime import SamplingParams, StandError

from .bench import NOPRIOR_SUFFIX, MethodResult
from .method_lists import split_methods

VLLM_BENCH_METHODS = ("ar", "ngram", "suffix", "stand", "stand-auto", "stand+noprior", "stand-auto+noprior", "hf")
"""Methods ``bench-vllm`` compares: vLLM plain decoding, ngram, suffix, STAND with one chain length or
per-request chain lengths (each also ``+noprior``: without the successor prior), the HF engine's plain
decoding."""


def base_method(name: str) -> str:
    """A bench-vllm method without its ``+noprior`` suffix (:data:`.bench.NOPRIOR_SUFFIX`)."""
    return name.removesuffix(NOPRIOR_SUFFIX)


def parse_vllm_methods(text: str) -> list[str]:
    """Method names from ``"ar,ngram,suffix,stand"``; raises StandError as :func:`split_methods` does."""
    return split_methods(text, VLLM_BENCH_METHODS, context="for bench-vllm")


DRAFTING_METHODS = ("stand", "ngram", "suffix")
"""The methods whose drafts ``--k`` sizes."""


def parse_k(k_spec: str, names: list[str]) -> int | None:
    """``--k``: draft tokens per step for the drafting methods, or None for ``auto`` (STAND's from
    vLLM's latency, ngram/suffix their defaults).

    Raises:
        StandError: what :func:`parse_chain` raises; an integer with no drafting method listed; ``auto``
            for stand without ar (whose engine measures the latency).
    """
    bases = {base_method(name) for name in names}
    if "stand-auto" in bases and "ar" not in names:
        raise StandError("stand-auto starts from vLLM's latency, measured with the ar engine: add ar to --methods")
    if k_spec == "auto":
        if "stand" in bases and "ar" not in names:
            raise StandError("--k auto sizes STAND's chain from vLLM's latency, measured with the ar engine: "
                             "add ar to --methods")
        return None
    k = parse_chain(k_spec)
    if not bases & set(DRAFTING_METHODS):
        raise StandError(f"--k sizes the drafts of stand, ngram and suffix; none of {', '.join(names)} drafts")
    return k


def parse_chain(text: str, auto: bool = True) -> int | str:
    """``--k`` of bench-vllm and serve: ``"auto"`` (where ``auto`` is taken) or draft tokens per step, an
    integer in [1, :data:`stand_runtime.limits.MAX_CHAIN_TOKENS`] (StandError otherwise)."""
    from stand_runtime.checks import parse_count
    from stand_runtime.limits import MAX_CHAIN_TOKENS

    if auto and text == "auto":
        return text
    try:
        return parse_count("--k", text, 1, MAX_CHAIN_TOKENS)
    except StandError:
        allowed = f"{'auto or ' if auto else ''}an integer in [1, {MAX_CHAIN_TOKENS}]"
        raise StandError(f"--k must be {allowed}, got {text!r}") from None


def check_greedy_samples(temperature: float, trajectories: int) -> None:
    """Raises StandError for greedy decoding (temperature 0) of more than one trajectory a prompt, which
    vLLM's sampling parameters refuse (n must be 1), before any engine starts."""
    if temperature == 0 and trajectories > 1:
        raise StandError(f"--temperature 0 with --trajectories {trajectories}: vLLM's greedy sampling takes one "
                         "trajectory (the others would repeat it); give --trajectories 1 or a temperature above 0")


def start_engines(names: list[str], k: int | None, folder, dtype: str, probe_ids: list[int], batch: int, *,
                  max_model_len: int = 2048, on_measure: Callable[[], None] | None = None,
                  on_curve: Callable[[list, int], None] | None = None,
                  stand_options: dict | None = None) -> tuple[dict, dict]:
    """One vLLM engine per method of ``names`` (``hf`` excepted), ar first; (label → (method, vLLM ``LLM``) in
    table order, method → its k, None for its default).

    ``k``: draft tokens per step; None (auto): STAND's chosen from the ar engine's step latency (measured
    once on ``probe_ids``, cached) for ``batch`` samples per request, ``on_curve(curve, k)`` shown, and
    ``stand-auto``'s per-request chain lengths start from that latency (``on_measure()`` before it is
    measured). ``stand_options``: the STAND engines' proposer options (``prior`` not for ``+noprior``)."""
    from stand_runtime.vllm import AUTO_K, cached_vllm_latency, choose_k, latency_option, load_llm

    engines, ks = {}, {}

    def profile():
        return cached_vllm_latency(engines["ar"][1], folder, dtype, probe_ids, on_measure=on_measure)

    for name in [n for n in ("ar", *names) if n in names and n != "hf"]:
        if name in engines:
            continue
        base = base_method(name)
        options = dict(stand_options or {}) if base.startswith("stand") else {}
        if name.endswith(NOPRIOR_SUFFIX):
            options.pop("prior", None)
        chosen = None if name == "ar" else k
        if base == "stand" and k is None:
            chosen, curve = choose_k(profile(), batch=batch)
            if on_curve is not None:
                on_curve(curve, chosen)
        if base == "stand-auto":
            chosen, options = AUTO_K, {**options, "latency": latency_option(profile())}
        ks[name] = chosen
        method = "stand" if base.startswith("stand") else name
        engines[name] = (name, load_llm(folder, method, k=chosen, dtype=dtype, max_model_len=max_model_len, **options))
    labels = {name: name if ks[name] in (None, AUTO_K) else f"{name} (k {ks[name]})" for name in engines}
    return {labels[name]: pair for name, pair in engines.items()}, ks


def hf_reference(target, tokenizer, batch: int):
    """The Hugging Face engine's plain decoding (batched over ``batch`` samples), timed beside vLLM as ``hf``."""
    from stand_runtime import HFBackend

    return HFBackend(target, tokenizer, "ar", max_batch=batch)


def spec_counts(sample) -> tuple[int, int]:
    """(draft tokens, accepted draft tokens) of one vLLM sample (``CompletionOutput``), from its
    per-sequence spec-decode metrics (engines built by :func:`stand_runtime.vllm.load_llm` record
    them); (0, 0) without speculative decoding."""
    metrics = getattr(sample, "spec_decode_metrics", None)
    if metrics is None:
        return 0, 0
    accepted = sum(j * count for j, count in enumerate(metrics.histogram))
    return int(metrics.num_draft_tokens), int(accepted)


def run_vllm_bench(engines: dict, prompts: list[list[int]], prompt_ids: list[str], *, n: int, sampling: SamplingParams,
                   max_new_tokens: int, seed: int, ignore_eos: bool, hf_backend=None,
                   on_prompt: Callable[[int, list[MethodResult]], None] | None = None,
                   priors: set[str] = frozenset()) -> list[MethodResult]:
    """Decode every prompt (token ids; ``prompt_ids`` name them) with every engine (label → (method, vLLM
    ``LLM``), in table order), n samples in one request seeded ``seed + 1000 i``, interleaved.

    Args:
        hf_backend: a :class:`stand_runtime.HFBackend` (plain decoding) timed on the same prompts as ``hf``.
        on_prompt: called with (prompts done, results) after every prompt.
        priors: labels of the engines that draft with the successor prior (recorded per result).

    Returns:
        One :class:`treeopt.evaluate.bench.MethodResult` per engine (and ``hf``); each prompt adds one
        ``per_prompt`` entry whose single "trajectory" pools the n samples (one request).
    """
    from vllm import SamplingParams as VLLMSampling
    from vllm import TokensPrompt

    labels = list(engines) + (["hf"] if hf_backend is not None else [])
    results = {label: MethodResult(label, engines[label][0] if label in engines else "hf", None, 0,
                                   prior=label in priors) for label in labels}
    for index, (ids, name) in enumerate(zip(prompts, prompt_ids)):
        params = VLLMSampling(n=n, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=max_new_tokens,
                              ignore_eos=ignore_eos, seed=seed + 1000 * index)
        order = labels[index % len(labels):] + labels[: index % len(labels)]
        for label in order:
            if label == "hf":
                tokens, steps, seconds = _hf_request(hf_backend, ids, n, sampling, max_new_tokens, seed + 1000 * index,
                                                     ignore_eos)
                drafted = 0
            else:
                started = time.perf_counter()
                output = engines[label][1].generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0]
                seconds = time.perf_counter() - started
                tokens = sum(len(sample.token_ids) for sample in output.outputs)
                counts = [spec_counts(sample) for sample in output.outputs]
                drafted, accepted = sum(c[0] for c in counts), sum(c[1] for c in counts)
                steps = max(tokens - accepted, 1)
            result = results[label]
            result.tokens += tokens
            result.steps += steps
            result.decode_s += seconds
            result.drafted += drafted
            result.per_prompt.append({"prompt": name, "trajectories": [
                {"tokens": tokens, "steps": steps, "decode_s": seconds, "acceptance_length": tokens / steps,
                 "tokens_per_s": tokens / seconds if seconds else 0.0, "drafted": drafted}]})
        if on_prompt is not None:
            on_prompt(index + 1, list(results.values()))
    return list(results.values())


def _hf_request(backend, ids: list[int], n: int, sampling: SamplingParams, max_new_tokens: int, seed: int,
                ignore_eos: bool) -> tuple[int, int, float]:
    """(tokens, target forwards, seconds) of one request on the Hugging Face engine."""
    from stand_runtime import DecodeRequest

    request = DecodeRequest(ids, n=n, max_new_tokens=max_new_tokens, sampling=sampling, seed=seed,
                            ignore_eos=ignore_eos)
    started = time.perf_counter()
    completions = backend.generate([request])[0]
    seconds = time.perf_counter() - started
    tokens = sum(len(c.tokens) for c in completions)
    return tokens, sum(c.stats.target_forwards for c in completions), seconds
