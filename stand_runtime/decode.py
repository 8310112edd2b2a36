"""The decoding loop: draft → tree forward → verify → commit (STAND paper §3; DESIGN §3.4).

One target forward per step over the root (the last committed token, not yet in the KV cache) and
the drafted nodes, with a 4D tree attention mask and explicit positions ``prefix_len + depth``
(:mod:`stand_runtime.forward`). Verification (:mod:`stand_runtime.verify`) picks the accepted path
and one more token; commit cuts them where plain decoding would stop (:mod:`stand_runtime.stopping`),
appends them, compacts the KV cache to the accepted entries (:mod:`stand_runtime.kv_cache`), lets the
drafter learn from the step, and records statistics.

Plain decoding (``method="ar"``) runs through the same loop with nothing drafted (1-token steps), so
speed comparisons are fair.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from .draft import Draft
from .drafters import Drafter, Memory, check_method, make_drafter
from .errors import StandError
from .forward import draft_forward, model_device, prefill
from .kv_cache import keep_tree_entries, new_cache
from .metrics import DecodeStats, GenerationResult
from .model_facts import attention_layout, check_positions, default_eos_ids, vocab_size
from .prompts import encode_prompt
from .randomness import RandomStream
from .sampling import SamplingParams, resolve_sampling, target_probs
from .stopping import StopRule
from .tree import DraftTree
from .tree_io import TreeFile
from .verify import Verification, verify_greedy, verify_sampling


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
    eos_token_ids: Sequence[int] | None = None,
    stop: Sequence[str] = (),
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
            see :class:`stand_runtime.diagnostics.DraftQuality`; its time is kept out of decoding time).
        eos_token_ids: token ids that end generation; None = the tokenizer's and the model's EOS ids.
        stop: strings that end generation once the generated text contains one.
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
    params = resolve_sampling(sampling, temperature, top_p, top_k)
    check_budget(max_new_tokens)
    check_method(method, tree=tree, memory=store, feed_rejected=feed_rejected)
    vocab = vocab_size(model)
    prompt = encode_prompt(tokenizer, prompt_or_ids, vocab)
    check_positions(model, len(prompt), max_new_tokens)
    attention_layout(model)
    eos = eos_token_ids if eos_token_ids is not None else default_eos_ids(model, tokenizer)
    stop_rule = StopRule(eos, max_new_tokens, stop, tokenizer)
    randomness = RandomStream.seeded(seed)
    drafter = make_drafter(method, tree, store, randomness, params, vocab, feed_rejected, diagnose, seed)
    run = _Run(model, drafter, params, randomness, stop_rule, on_step)
    run.prefill(prompt)
    while run.finish_reason is None:
        new_tokens = run.step()
        if on_tokens is not None:
            on_tokens(new_tokens)
    return run.result(tokenizer)


def check_budget(max_new_tokens) -> None:
    """Raises StandError unless ``max_new_tokens`` is an int >= 1 (bools and floats are refused)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise StandError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise StandError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


class _Run:
    """The state of one decoding run: KV cache, committed tokens, statistics."""

    def __init__(self, model, drafter: Drafter | None, params: SamplingParams, randomness: RandomStream,
                 stop_rule: StopRule, on_step) -> None:
        self.model = model
        self.drafter = drafter
        self.params = params
        self.randomness = randomness
        self.stop_rule = stop_rule
        self.on_step = on_step
        self.cache = new_cache(model)
        self.committed: list[int] = []
        self.generated: list[int] = []
        self.finish_reason: str | None = None
        self.stats = DecodeStats()
        self.clock = _Clock(model_device(model))

    def prefill(self, prompt: list[int]) -> None:
        """Cache the prompt minus its last token (the first root); the drafter sees its logits."""
        self.committed = list(prompt)
        self.stats.prompt_tokens = len(prompt)
        if len(prompt) > 1:
            observe = None if self.drafter is None else (
                lambda logits, positions: self.drafter.observe_prompt(prompt, logits, positions))
            prefill(self.model, self.cache, prompt[:-1], on_logits=observe)
        self.stats.prefill_s = self.clock.lap()

    def step(self) -> list[int]:
        """One decoding step: draft → tree forward → verify → commit; returns the committed tokens."""
        stats, clock = self.stats, self.clock
        remaining = self.stop_rule.max_new_tokens - len(self.generated)
        if self.drafter is not None and remaining > 1:
            draft = self.drafter.draft(self.committed, remaining - 1)
        else:
            draft = Draft.root_only(self.committed[-1])
        stats.drafting_s += clock.lap()

        prefix_len = self.cache.get_seq_length()
        logits = draft_forward(self.model, self.cache, draft, prefix_len)
        stats.forward_s += clock.lap()

        rows: dict[int, np.ndarray] = {}
        verification = self._verify(draft, logits, rows)
        stats.verification_s += clock.lap()
        if self.on_step is not None:
            self.on_step(draft, verification)

        proposed = [draft.tokens[p] for p in verification.accepted] + [verification.token]
        new_tokens, self.finish_reason = self.stop_rule.cut(self.generated, proposed)
        accepted = verification.accepted[: len(new_tokens)]
        stats.record_step(len(new_tokens), draft.num_nodes, len(verification.accepted), verification.bonus)
        if self.drafter is not None:
            self.drafter.observe_step(self.committed, draft, accepted, logits, rows)
        self.committed += new_tokens
        self.generated += new_tokens
        if self.finish_reason is None:
            keep_tree_entries(self.cache, prefix_len, [0, *accepted], len(draft.tokens))
        stats.bookkeeping_s += clock.lap()
        return new_tokens

    def _verify(self, draft: Draft, logits: torch.Tensor, rows: dict[int, np.ndarray]) -> Verification:
        """Verify ``draft`` against p, computing p only at the nodes the walk visits (kept in ``rows``)."""
        params = self.params

        def probs_at(position: int) -> np.ndarray:
            row = rows.get(position)
            if row is None:
                row = target_probs(logits[position], params).to("cpu", torch.float64).numpy()
                rows[position] = row
            return row

        if params.greedy:
            return verify_greedy(draft, probs_at)
        return verify_sampling(draft, probs_at, self.randomness)

    def result(self, tokenizer) -> GenerationResult:
        """The run's tokens, text, finish reason and statistics."""
        stats = self.stats
        if self.drafter is not None:
            stats.store = self.drafter.stats()
            stats.diagnostics_s = getattr(self.drafter, "diagnostics_s", 0.0)
            stats.bookkeeping_s -= stats.diagnostics_s
        text = tokenizer.decode(self.generated, skip_special_tokens=True) if tokenizer is not None else ""
        return GenerationResult(tokens=self.generated, text=text, stats=stats, finish_reason=self.finish_reason)


class _Clock:
    """Wall-clock laps (seconds); synchronises CUDA so time lands in the right bucket."""

    def __init__(self, device) -> None:
        self._cuda = torch.device(device).type == "cuda"
        self._last = time.perf_counter()

    def lap(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed
