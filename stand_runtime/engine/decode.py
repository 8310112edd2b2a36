"""The decoding loop: draft → tree forward → verify → commit (STAND paper §3; docs/design.md §1.4).

One target forward per step over the root (the last committed token, not yet in the KV cache) and
the drafted nodes, with a 4D tree attention mask and explicit positions ``prefix_len + depth``
(:mod:`stand_runtime.target.forward`). Verification (:mod:`stand_runtime.engine.verify`) picks the accepted path
and one more token; commit cuts them where plain decoding would stop (:mod:`stand_runtime.engine.stopping`),
appends them, compacts the KV cache to the accepted entries (:mod:`stand_runtime.target.kv_cache`), lets the
drafter learn from the step, and records statistics.

Plain decoding (``method="ar"``) runs through the same loop with nothing drafted (1-token steps), so
speed comparisons are fair.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..checks import check_bool, check_callable, check_int
from .decode_row import DecodeRow, StepTarget
from ..trees.draft import Draft
from ..drafters import COPY_TOKENS, Drafter, Memory, check_method, make_drafter
from ..errors import StandError
from ..drafters.feeds import LogitsFeed
from ..target.forward import draft_forward, model_device, prefill
from ..target.kv_cache import keep_tree_entries, new_cache
from .metrics import DecodeStats, GenerationResult
from ..target.model_facts import attention_layout, check_model, check_positions, default_eos_ids, vocab_size
from ..target.prompts import encode_prompt
from ..randomness import RandomStream, check_seed
from ..target.sampling import SamplingParams, resolve_sampling
from .stopping import StopRule, check_eos_ids
from ..trees.tree import DraftTree
from ..trees.tree_io import TreeFile
from .verify import Verification


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    prompt_or_ids: str | Sequence[int] | torch.Tensor,
    *,
    method: str = "stand",
    tree: DraftTree | TreeFile | str | None = None,
    sampling: SamplingParams | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    max_new_tokens: int = 256,
    seed: int | None = None,
    store: Memory | None = None,
    feed_rejected: bool = False,
    diagnose: bool = False,
    extend: bool = True,
    copy_tokens: int = COPY_TOKENS,
    eos_token_ids: Sequence[int] | None = None,
    stop: Sequence[str] = (),
    logprobs: bool = False,
    on_tokens: Callable[[list[int]], None] | None = None,
    on_step: Callable[[Draft, Verification], None] | None = None,
) -> GenerationResult:
    """Decode one sequence with STAND (or a baseline); the output distribution is the target's.

    Args:
        model: a transformers causal LM (llama, qwen2, mistral, ...), eval mode.
        tokenizer: its tokenizer; may be None when ``prompt_or_ids`` are token ids and no ``stop``.
        prompt_or_ids: a text prompt (wrapped in the tokenizer's chat template when it has one) or
            token ids (used as they are).
        method: one of :data:`stand_runtime.drafters.METHODS`.
        tree: the static draft tree (stand, stand-det, recycle): a :class:`DraftTree`, a
            :class:`TreeFile`, a file path or a bundled tree name; None = the method's default.
        sampling: the target sampling distribution, or None to build it from ``temperature``
            (default 0.6; 0 = greedy), ``top_p`` (default 0.95) and ``top_k`` (default 0 = off).
        max_new_tokens: generation budget (tokens, an int >= 1).
        seed: seeds every draw (drafting noise, acceptance tests, samples), an int in [0, 2**64);
            None = nondeterministic.
        store: the drafter's memory: an :class:`NGramStore` (stand, stand-det) or a
            :class:`RecyclingMatrix` (recycle); pass one to several calls to share it (best-of-N
            trajectories). None = a fresh one for this call.
        feed_rejected: STAND only: also feed the store with p at rejected tree nodes (their contexts
            are real token sequences and their logits exact), not only at committed ones.
        diagnose: STAND only: measure q against p at every step's root (``stats.store["root"]``,
            see :class:`stand_runtime.engine.diagnostics.DraftQuality`; its time is kept out of decoding time).
        extend: STAND only: spend the node budget that store misses leave unused on best-first
            chains beyond the static tree (:class:`stand_runtime.drafters.Extension`); False = the
            static tree only (direct calibration measures the static tree).
        copy_tokens: STAND only: graft up to this many tokens that followed the latest earlier
            occurrence of the context's suffix (prompt lookup's copy) onto the draft, along the
            drafted children that agree with them (0 = off; verified by the deterministic-draft rule).
        eos_token_ids: token ids that end generation; None = the tokenizer's and the model's EOS ids.
        stop: strings that end generation once the generated text contains one.
        logprobs: also return each generated token's log-probability under the target's raw logits
            (``GenerationResult.logprobs``; used by search verifiers).
        on_tokens: optional callback receiving each step's committed token ids (for streaming).
        on_step: optional callback ``(draft, verification)`` after each step's verification (used to
            count accepted static nodes for direct calibration).

    Returns:
        A :class:`GenerationResult`: the generated ``tokens`` (EOS included if it ended the run),
        ``text``, ``finish_reason`` (``"eos"``, ``"stop"`` or ``"length"``) and ``stats``.

    Raises:
        StandError: unknown method, empty prompt or ids outside the vocabulary, bad sampling
            parameters, seed or budget, a bad tree, an option the method does not take, a prompt plus
            ``max_new_tokens`` beyond the model's context, or a model whose attention or positions a
            tree step cannot reproduce exactly (one line each, before any forward).
    """
    check_model(model)
    params = resolve_sampling(sampling, temperature, top_p, top_k)
    check_budget(max_new_tokens)
    check_seed(seed)
    check_callable("on_tokens", on_tokens)
    check_callable("on_step", on_step)
    logprobs = check_bool("logprobs", logprobs)
    check_method(method, tree=tree, memory=store, feed_rejected=feed_rejected, diagnose=diagnose, extend=extend,
                 copy_tokens=copy_tokens)
    vocab = vocab_size(model)
    prompt = encode_prompt(tokenizer, prompt_or_ids, vocab)
    check_positions(model, len(prompt), max_new_tokens)
    attention_layout(model)
    eos = check_eos_ids(eos_token_ids, vocab) if eos_token_ids is not None else default_eos_ids(model, tokenizer)
    stop_rule = StopRule(eos, max_new_tokens, stop, tokenizer)
    randomness = RandomStream.seeded(seed)
    drafter = make_drafter(method, tree, store, randomness, params, model, feed_rejected, diagnose, seed, extend,
                           copy_tokens)
    run = _Run(model, drafter, params, randomness, stop_rule, on_step, logprobs)
    run.prefill(prompt)
    while run.finish_reason is None:
        new_tokens = run.step()
        if on_tokens is not None:
            on_tokens(new_tokens)
    return run.result(tokenizer)


def check_budget(max_new_tokens) -> int:
    """``max_new_tokens`` as an int >= 1 (numpy integers accepted; bools and floats refused).

    Raises:
        StandError: anything else.
    """
    return check_int("max_new_tokens", max_new_tokens, 1)


class _Run:
    """One sequence on the Hugging Face engine: its KV cache and forwards around a :class:`DecodeRow`."""

    def __init__(self, model, drafter: Drafter | None, params: SamplingParams, randomness: RandomStream,
                 stop_rule: StopRule, on_step, logprobs: bool = False) -> None:
        self.model = model
        self.logprobs = logprobs
        self.drafter = drafter
        self.params = params
        self.cache = new_cache(model)
        self.stats = DecodeStats()
        self.clock = _Clock(model_device(model), self.stats)
        self.row: DecodeRow | None = None
        self._row_args = (drafter, params, randomness, stop_rule, on_step)

    @property
    def finish_reason(self) -> str | None:
        return self.row.finish_reason

    def prefill(self, prompt: list[int]) -> None:
        """Cache the prompt minus its last token (the first root); the drafter sees its logits."""
        self.row = DecodeRow(prompt, *self._row_args, lap=self.clock.lap, stats=self.stats,
                             logprobs=self.logprobs)
        if len(prompt) > 1:
            prefill(self.model, self.cache, prompt[:-1], on_logits=None if self.drafter is None else
                    prompt_observer(self.drafter, prompt, self.params))
        self.clock.lap("prefill_s")

    def step(self) -> list[int]:
        """One decoding step: draft → tree forward → verify → commit; returns the committed tokens."""
        draft = self.row.propose()
        prefix_len = self.cache.get_seq_length()
        logits = draft_forward(self.model, self.cache, draft, prefix_len)
        self.clock.lap("forward_s")
        settled = self.row.settle(draft, StepTarget(logits, self.params))
        if settled.keep:
            keep_tree_entries(self.cache, prefix_len, settled.keep, len(draft.tokens))
        self.clock.lap("bookkeeping_s")
        return settled.tokens

    def result(self, tokenizer) -> GenerationResult:
        """The run's tokens, text, finish reason and statistics."""
        self.clock.settle()
        stats = self.row.finish_stats()
        generated = self.row.generated
        text = self.row.stop_rule.text(generated, self.row.finish_reason)
        return GenerationResult(tokens=generated, text=text, stats=stats, finish_reason=self.row.finish_reason,
                                logprobs=self.row.logprobs)


def prompt_observer(drafter: Drafter, prompt: list[int], params: SamplingParams):
    """The prefill callback that hands a prompt chunk's logits to ``drafter`` as a
    :class:`stand_runtime.drafters.feeds.LogitsFeed` of p under ``params`` (refusing non-finite logits)."""
    def observe(logits: torch.Tensor, positions: range) -> None:
        if not bool(torch.isfinite(logits).all()):
            raise StandError(f"the target's logits are not finite (NaN or inf) in the prompt's positions "
                             f"{positions.start}-{positions.stop - 1}")
        drafter.observe_prompt(prompt, LogitsFeed(logits, params), positions)

    return observe


class _Clock:
    """Wall-clock laps into :class:`DecodeStats` buckets (seconds).

    On a CPU each lap adds ``perf_counter`` time at once. On CUDA a lap records an event instead of
    synchronising (a sync per lap would stall the pipeline); :meth:`settle` synchronises once at the
    end and adds the times between consecutive events.
    """

    def __init__(self, device, stats: DecodeStats) -> None:
        self._stats = stats
        self._cuda = torch.device(device).type == "cuda"
        self._last = time.perf_counter()
        self._events: list[tuple[object, str | None]] = []
        if self._cuda:
            self.lap(None)

    def lap(self, bucket: str | None) -> None:
        """Close the current lap into ``stats.<bucket>`` (None: discard it)."""
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append((event, bucket))
            return
        now = time.perf_counter()
        if bucket is not None:
            setattr(self._stats, bucket, getattr(self._stats, bucket) + now - self._last)
        self._last = now

    def settle(self) -> None:
        """Add the recorded CUDA laps to the statistics (one synchronisation)."""
        if not self._events:
            return
        torch.cuda.synchronize()
        for (start, _), (end, bucket) in zip(self._events, self._events[1:]):
            if bucket is not None:
                setattr(self._stats, bucket, getattr(self._stats, bucket) + start.elapsed_time(end) / 1e3)
        self._events = self._events[-1:]
