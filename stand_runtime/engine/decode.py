"""The decoding entry points: :func:`generate` (one sequence), :func:`decode_rows` and
:func:`generate_batch` (a batch of rows), each draft → tree forward → verify → commit (STAND paper §3;
docs/architecture.md §1.4, §1.5).

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

A batch's rows advance together, one target forward per step over every row's draft (drafts padded to a
common width, per-row compaction with holes masked: :class:`stand_runtime.engine.loop.BatchCache`). Rows
finish independently and leave the batch at once; rows given the same drafter memory share it online
(best-of-N trajectories of one problem, STAND paper §3.1). Every row's output is distributed exactly as
plain decoding of that row alone.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..checks import check_callable, check_int
from ..drafters import Memory
from ..errors import StandError
from ..limits import MAX_ROWS
from ..method import Method, as_method
from ..randomness import check_seed, check_seed_span
from ..sizing.session import SizingSession
from ..target.model_facts import attention_layout, check_model, check_tokenizer, vocab_size
from ..target.kv_cache import PrefixCache
from ..target.prompts import encode_prompt
from ..target.sampling import SamplingParams
from .loop import BatchCache, Loop, SequenceCache
from .metrics import GenerationResult
from .row import RowSpec, Settled, check_budget, check_rows, check_sampling, make_rows, sizing_rule
from .stopping import check_eos_ids, check_stop_strings


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
    return Loop(model, rows, SequenceCache(model), batch_verify=method.ablation.batch_verify, value=value).run()[0]


__all__ = ["check_budget", "decode_rows", "generate", "generate_batch"]


@torch.inference_mode()
def decode_rows(
    model,
    tokenizer,
    rows: Sequence[RowSpec],
    *,
    method: Method | str = "stand",
    on_tokens: Callable[[int], None] | None = None,
    on_finish: Callable[[int, GenerationResult], None] | None = None,
    slots: int | None = None,
    prefixes: PrefixCache | None = None,
    sizing: SizingSession | None = None,
) -> list[GenerationResult]:
    """Decode ``rows`` together (see the module docstring); returns one result per row, in order.

    Args:
        model, tokenizer: the target and its tokenizer (None allowed without stop strings).
        rows: the rows (:class:`RowSpec`).
        method: a :class:`stand_runtime.Method` (its tree sized for the batch it was parsed for, its
            ``max_nodes`` cap per row and step), or a method name parsed for ``len(rows)`` rows.
        on_tokens: called with the number of tokens committed by each step over all rows (progress).
        on_finish: called as ``on_finish(row_index, result)`` when a row finishes.
        slots: rows in one forward at most (None = all): the others wait in order and each takes the
            place of a finished row (continuous batching, :class:`stand_runtime.engine.loop.Loop`); a
            method given by name is parsed for this many rows.
        prefixes: prompt prefixes kept from earlier calls (:class:`stand_runtime.target.kv_cache.PrefixCache`):
            a prompt that extends one is prefilled from it, and every prompt prefilled is kept there.
        sizing: the sizing session of a value-sized tree (as in :func:`stand_runtime.generate`); its
            rule prices forwards of ``slots`` rows.

    Returns:
        Per row a :class:`GenerationResult`; its ``stats`` hold the row's own steps, and as times the
        wall time of the batch steps the row took part in (so ``tokens_per_s`` is the row's rate
        inside the batch).

    Raises:
        StandError: no rows, a bad row (prompt, budget, seed, stop strings), a prompt plus budget
            beyond the model's context, a model with sliding-window attention (not batched here),
            a method with ``diagnose`` (one sequence at a time), a memory the method cannot use,
            ``slots`` < 1, a tokenizer or ``prefixes`` of the wrong type.
    """
    check_model(model)
    check_tokenizer(tokenizer)
    check_rows(rows)
    slots = len(rows) if slots is None else min(check_int("slots", slots, 1), len(rows))
    check_callable("on_tokens", on_tokens)
    check_callable("on_finish", on_finish)
    if prefixes is not None and not isinstance(prefixes, PrefixCache):
        raise StandError(f"prefixes must be a PrefixCache or None, not {type(prefixes).__name__}")
    layout = attention_layout(model)
    if layout.window is not None:
        raise StandError("batched decoding does not support sliding-window attention; decode rows one at a time")
    method = as_method(method, model, slots)
    if method.ablation.diagnose:
        raise StandError("diagnose measures one sequence at a time: decode with generate")
    value = sizing_rule(model, method, sizing, slots)
    states = make_rows(model, tokenizer, rows, method, value=value)
    caches = BatchCache(model, prefixes)
    return Loop(model, states, caches, method.max_nodes, on_tokens, on_finish, method.ablation.batch_verify, slots,
                value).run()


def generate_batch(
    model,
    tokenizer,
    prompts: Sequence[str | Sequence[int]],
    *,
    n: int = 1,
    method: Method | str = "stand",
    sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    max_new_tokens: int = 256,
    seed: int | Sequence[int | None] | None = None,
    store: Memory | Sequence[Memory] | None = None,
    eos_token_ids: Sequence[int] | None = None,
    stop: Sequence[str] = (),
    on_tokens: Callable[[int], None] | None = None,
    sizing: SizingSession | None = None,
) -> list[GenerationResult]:
    """Decode ``n`` samples of every prompt in one batch (:func:`decode_rows`).

    Rows are prompt-major: row ``i * n + j`` is sample j of prompt i (transformers'
    ``num_return_sequences`` order).

    Args:
        prompts: texts (through the chat template) or token ids.
        n: samples per prompt (>= 1).
        method: a :class:`stand_runtime.Method`, or a method name parsed for the batch's rows.
        sampling: one :class:`SamplingParams` for every row, or one per row; None = ``SamplingParams()``.
        seed: an int (row r is seeded with ``seed + r``), one seed (or None) per row, or None.
        store: drafter memory: None = one fresh memory per prompt, shared online by its n rows; one
            memory shared by every row; or one per prompt.
        Other arguments: as in :func:`stand_runtime.generate` and :func:`decode_rows` (per-token
            logprobs: :func:`decode_rows` with ``RowSpec(logprobs=True)``).

    Returns:
        One :class:`GenerationResult` per row.

    Raises:
        StandError: no prompts, n < 1, per-row lists of the wrong length, and everything
            :func:`decode_rows` raises.
    """
    if isinstance(prompts, (str, torch.Tensor)) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise StandError("generate_batch takes a non-empty list of prompts")
    n = check_int("n (samples per prompt)", n, 1)
    total = len(prompts) * n
    if total > MAX_ROWS:
        raise StandError(f"{len(prompts)} prompts x n {n} = {total} rows in one batch; at most {MAX_ROWS}")
    check_callable("on_tokens", on_tokens)
    method = as_method(method, model, total)
    stop = check_stop_strings(stop)
    if eos_token_ids is not None:
        eos_token_ids = check_eos_ids(eos_token_ids, vocab_size(model))
    params, seeds = _row_sampling(sampling, total), _row_seeds(seed, total)
    memories = _prompt_memories(store, method, vocab_size(model), len(prompts))
    rows = []
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(tokenizer, prompt, vocab_size(model))
        rows += [RowSpec(ids, params[r], seeds[r], max_new_tokens, memories[i], stop, eos_token_ids)
                 for r in range(i * n, (i + 1) * n)]
    return decode_rows(model, tokenizer, rows, method=method, on_tokens=on_tokens, sizing=sizing)


def _prompt_memories(store, method: Method, vocab: int, prompts: int) -> list:
    """Per prompt its drafter memory: a fresh one each (None), one shared by all, or one per prompt.

    Raises:
        StandError: a list of the wrong length.
    """
    if store is None:
        return [method.new_memory(vocab) for _ in range(prompts)]
    memories = list(store) if isinstance(store, (list, tuple)) else [store] * prompts
    if len(memories) != prompts:
        raise StandError(f"store has {len(memories)} entries for {prompts} prompts")
    return memories


def _row_sampling(sampling, total: int) -> list[SamplingParams]:
    """Per row its :class:`SamplingParams`: one for every row (None = the default) or a list with
    one per row.

    Raises:
        StandError: anything else (a dict, a list of the wrong length or holding other things).
    """
    if sampling is None:
        return [SamplingParams()] * total
    if isinstance(sampling, SamplingParams):
        return [sampling] * total
    if not isinstance(sampling, (list, tuple)):
        raise StandError(f"sampling must be a SamplingParams or a list of them (one per row), "
                         f"got {type(sampling).__name__} {sampling!r}")
    if len(sampling) != total:
        raise StandError(f"sampling has {len(sampling)} entries for {total} rows")
    return [check_sampling(params, f"sampling[{r}]") for r, params in enumerate(sampling)]


def _row_seeds(seed, total: int) -> list[int | None]:
    """Per row its seed: ``seed + r`` for one int (every row's seed must stay below 2**64), the
    entries of a list with one per row, or None for all.

    Raises:
        StandError: a seed that is not an int in [0, 2**64), a base seed whose last row runs past
            2**64, or a list of the wrong length.
    """
    if seed is None:
        return [None] * total
    if isinstance(seed, (list, tuple)):
        if len(seed) != total:
            raise StandError(f"seed has {len(seed)} entries for {total} rows")
        for r, value in enumerate(seed):
            try:
                check_seed(value)
            except StandError as error:
                raise StandError(f"seed[{r}]: {error}") from None
        return [None if value is None else int(value) for value in seed]
    check_seed(seed)
    seed = int(seed)
    check_seed_span(seed, total, "rows")
    return [seed + r for r in range(total)]
