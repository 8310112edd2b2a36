"""Decoding one sequence: draft → tree forward → verify → commit (STAND paper §3; docs/design.md §1.4).

One target forward per step over the root (the last committed token, not yet in the KV cache) and
the drafted nodes, with a 4D tree attention mask and explicit positions ``prefix_len + depth``
(:mod:`stand_runtime.target.forward`). Verification (:mod:`stand_runtime.verify`) picks the accepted path
and one more token; commit cuts them where plain decoding would stop (:mod:`stand_runtime.engine.stopping`),
appends them, compacts the KV cache to the accepted entries (:mod:`stand_runtime.target.kv_cache`), lets the
drafter learn from the step, and records statistics. The loop is the batch's
(:class:`stand_runtime.engine.loop.Loop` over one row with a :class:`SequenceCache`, which takes any
attention layout the model has).

Plain decoding (``method="ar"``) runs through the same loop with nothing drafted (1-token steps), so
speed comparisons are fair.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..checks import check_callable
from ..drafters import Memory
from ..method import Method, as_method
from ..sizing.session import SizingSession
from ..target.model_facts import attention_layout, check_model, check_tokenizer, vocab_size
from ..target.prompts import encode_prompt
from ..target.sampling import SamplingParams
from .decode_row import Settled
from .loop import Loop, SequenceCache
from .metrics import GenerationResult
from .rows import RowSpec, check_budget, check_sampling, make_rows, sizing_rule


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    prompt_or_ids: str | Sequence[int] | torch.Tensor,
    *,
    method: Method | str = "stand",
    sampling: SamplingParams | None = None,
    max_new_tokens: int = 256,
    seed: int | None = None,
    store: Memory | None = None,
    eos_token_ids: Sequence[int] | None = None,
    stop: Sequence[str] = (),
    logprobs: bool = False,
    on_step: Callable[[Settled], None] | None = None,
    sizing: SizingSession | None = None,
) -> GenerationResult:
    """Decode one sequence with STAND (or a baseline); the output distribution is the target's.

    Args:
        model, tokenizer: a transformers causal LM (eval mode) and its tokenizer (None allowed for token
            ids without ``stop``).
        prompt_or_ids: a text prompt (through the tokenizer's chat template, if any) or token ids.
        method: a :class:`stand_runtime.Method` (its tree and options), or a method name with its
            defaults (``"stand"``: the value-sized dynamic tree ``dynamic-auto``).
        sampling: the target sampling distribution; None = ``SamplingParams()`` (temperature 0.6,
            top-p 0.95; ``SamplingParams(temperature=0)`` is greedy).
        max_new_tokens: generation budget (tokens, an int >= 1).
        seed: seeds every draw (drafting noise, acceptance tests, samples): an int in [0, 2**64), or None.
        store: the drafter's memory: an :class:`NGramStore` (stand, stand-det), a
            :class:`RecyclingMatrix` (recycle) or a :class:`SuffixMemory` (suffix); pass one to several
            calls to share it (best-of-N trajectories). None = a fresh one for this call.
        eos_token_ids, stop: token ids (None = the tokenizer's and model's EOS ids) and strings that end it.
        logprobs: also return each generated token's log-probability under the target's raw logits
            (``GenerationResult.logprobs``; used by search verifiers).
        on_step: optional callback receiving each step's :class:`Settled` once committed: its
            ``tokens`` (streaming), ``draft`` and ``verification`` (direct calibration).
        sizing: the :class:`stand_runtime.SizingSession` a value-sized tree sizes drafts by and learns into
            (None = the model's default one); with a frozen session a seeded call repeats exactly.

    Returns:
        A :class:`GenerationResult`: the generated ``tokens`` (EOS included if it ended the run),
        ``text``, ``finish_reason`` (``"eos"``, ``"stop"`` or ``"length"``) and ``stats``.

    Raises:
        StandError: unknown method, empty prompt or ids outside the vocabulary, bad sampling
            parameters, seed or budget, a bad tree, a memory the method cannot use, a prompt plus
            ``max_new_tokens`` beyond the model's context, or a model whose attention or positions a
            tree step cannot reproduce exactly (one line each, before any forward).
    """
    check_model(model)
    check_tokenizer(tokenizer)
    params = SamplingParams() if sampling is None else check_sampling(sampling)
    check_callable("on_step", on_step)
    method = as_method(method, model)
    prompt = encode_prompt(tokenizer, prompt_or_ids, vocab_size(model))
    spec = RowSpec(prompt, params, seed, max_new_tokens, store, stop, eos_token_ids, logprobs)
    attention_layout(model)
    value = sizing_rule(model, method, sizing, 1)
    rows = make_rows(model, tokenizer, [spec], method, on_step, value)
    return Loop(model, rows, SequenceCache(model), batch_verify=method.batch_verify, value=value).run()[0]


__all__ = ["check_budget", "generate"]
