"""The decoding loop: draft → tree forward → verify → commit (STAND paper §3; DESIGN §3.4).

One target forward per step over the root (the last committed token, not yet in the KV cache) and
the drafted nodes, with a 4D tree attention mask and explicit positions ``prefix_len + depth``.
Verification (:mod:`stand_runtime.verify`) picks the accepted path and one more token; commit appends
them, compacts the KV cache to the accepted entries (:mod:`stand_runtime.kv_cache`), feeds the
n-gram store with p at the root and every accepted node, and records statistics.

Plain decoding (``method="ar"``) runs through the same loop with nothing drafted (1-token steps), so
speed comparisons are fair. EOS or ``max_new_tokens`` inside an accepted run truncates it there: the
output has exactly the length plain decoding would give.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch

from .drafters import STORE_TOP_K, Drafter, PromptLookupDrafter, RecyclingMatrix, StandDrafter, TokenRecyclingDrafter
from .drafting import Draft
from .errors import StandError
from .kv_cache import keep_tree_entries
from .metrics import DecodeStats, DraftQuality, GenerationResult
from .ngram_store import NGramStore
from .randomness import RandomStream
from .sampling import SamplingParams, target_probs
from .tree import DraftTree, tree_attention_mask, tree_position_ids
from .tree_io import DEFAULT_TREE, TreeFile, load_tree
from .verify import Verification, verify_greedy, verify_sampling

METHODS = ("stand", "stand-det", "pld", "recycle", "ar")
"""Decoding methods: STAND with stochastic (Gumbel-Top-K) drafts, STAND with deterministic top-m
drafts (the paper's ablation), prompt lookup decoding, Token Recycling, and plain decoding."""

STORE_METHODS = ("stand", "stand-det")
"""The methods that draft from an n-gram store (and so take ``feed_rejected`` and ``diagnose``)."""


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    prompt_or_ids: str | Sequence[int] | torch.Tensor,
    *,
    method: str = "stand",
    tree: DraftTree | TreeFile | str | None = None,
    temperature: float = 0.6,
    top_p: float = 0.95,
    top_k: int = 0,
    max_new_tokens: int = 256,
    seed: int | None = None,
    store: NGramStore | RecyclingMatrix | None = None,
    feed_rejected: bool = False,
    diagnose: bool = False,
    eos_token_ids: Sequence[int] | None = None,
    on_tokens=None,
    on_step=None,
) -> GenerationResult:
    """Decode one sequence with STAND or plain decoding; the output distribution is the target's.

    Args:
        model: a transformers causal LM (llama, qwen2, ...), eval mode.
        tokenizer: its tokenizer; may be None when ``prompt_or_ids`` are token ids.
        prompt_or_ids: a text prompt (wrapped in the tokenizer's chat template when it has one) or
            token ids (used as they are).
        method: one of :data:`METHODS` (see :mod:`stand_runtime.drafters`).
        tree: the static draft tree (stand, stand-det, recycle): a :class:`DraftTree`, a
            :class:`TreeFile`, a file path or a bundled tree name; None = the bundled default.
        temperature, top_p, top_k: the target sampling distribution (temperature 0 = greedy).
        max_new_tokens: generation budget (tokens).
        seed: seeds every draw (drafting noise, acceptance tests, samples); None = nondeterministic.
        store: the drafter's memory: an :class:`NGramStore` (stand, stand-det) or a
            :class:`RecyclingMatrix` (recycle); pass one to several calls to share it (best-of-N
            trajectories). None = a fresh one for this call.
        feed_rejected: STAND only: also feed the store with p at rejected tree nodes (their contexts
            are real token sequences and their logits exact), not only at accepted ones.
        diagnose: STAND only: measure q against p at every step's root (``stats.store["root"]``,
            see :class:`stand_runtime.metrics.DraftQuality`; costs ~0.7 ms per step on a CPU).
        eos_token_ids: token ids that end generation; None = the tokenizer's and the model's EOS ids.
        on_tokens: optional callback receiving each step's committed token ids (for streaming).
        on_step: optional callback ``(draft, verification)`` after each step's verification (used to
            count accepted static nodes for direct calibration).

    Returns:
        A :class:`GenerationResult` with the generated ``tokens`` (EOS included if it ended the run),
        ``text`` and ``stats`` (target forwards, tokens and drafted nodes per step, time split).

    Raises:
        StandError: unknown method, empty prompt, bad sampling parameters, bad tree, or a prompt plus
            ``max_new_tokens`` beyond the model's context.
    """
    if method not in METHODS:
        raise StandError(f"unknown method {method!r} (valid: {', '.join(METHODS)})")
    if max_new_tokens < 1:
        raise StandError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k)
    prompt = encode_prompt(tokenizer, prompt_or_ids)
    _check_context(model, len(prompt), max_new_tokens)
    eos = set(eos_token_ids if eos_token_ids is not None else default_eos_ids(model, tokenizer))
    randomness = RandomStream.seeded(seed)
    drafter = make_drafter(method, tree, store, randomness, params, model.config.vocab_size, feed_rejected,
                           diagnose, seed)
    device = next(model.parameters()).device
    stats = DecodeStats(prompt_tokens=len(prompt))
    clock = _Clock(device)

    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    committed = list(prompt)
    generated: list[int] = []
    if len(prompt) > 1:
        logits = _prefill(model, cache, prompt[:-1], device, need_logits=drafter is not None)
        if drafter is not None:
            drafter.observe_prompt(prompt, logits)
    stats.prefill_s = clock.lap()

    while len(generated) < max_new_tokens:
        remaining = max_new_tokens - len(generated)
        if drafter is not None and remaining > 1:
            draft = drafter.draft(committed, remaining - 1)
        else:
            draft = Draft.root_only(committed[-1])
        stats.drafting_s += clock.lap()

        prefix_len = cache.get_seq_length()
        static_tree = drafter.tree if drafter is not None else _ROOT_ONLY
        logits = _tree_forward(model, cache, draft, static_tree, prefix_len, device)
        stats.forward_s += clock.lap()

        rows: dict[int, np.ndarray] = {}

        def probs_at(position: int) -> np.ndarray:
            row = rows.get(position)
            if row is None:
                row = target_probs(logits[position], params).to("cpu", torch.float64).numpy()
                rows[position] = row
            return row

        result: Verification = (
            verify_greedy(draft, probs_at) if params.greedy else verify_sampling(draft, probs_at, randomness)
        )
        stats.verification_s += clock.lap()
        if on_step is not None:
            on_step(draft, result)

        new_tokens = [draft.tokens[p] for p in result.accepted] + [result.token]
        new_tokens = _truncate(new_tokens, remaining, eos)
        stats.target_forwards += 1
        stats.tokens_per_step.append(len(new_tokens))
        stats.drafted_per_step.append(draft.num_nodes)
        stats.accepted_per_step.append(len(result.accepted))
        stats.bonus_per_step.append(result.bonus)
        finished = len(new_tokens) < len(result.accepted) + 1 or new_tokens[-1] in eos
        if drafter is not None:
            drafter.observe_step(committed, draft, result, logits, rows)
        committed += new_tokens
        generated += new_tokens
        if on_tokens is not None:
            on_tokens(new_tokens)
        if finished or len(generated) >= max_new_tokens:
            stats.bookkeeping_s += clock.lap()
            break
        keep_tree_entries(cache, prefix_len, [0, *result.accepted], len(draft.tokens))
        stats.bookkeeping_s += clock.lap()

    if drafter is not None:
        stats.store = drafter.stats()
        stats.diagnostics_s = getattr(drafter, "diagnostics_s", 0.0)
        stats.bookkeeping_s -= stats.diagnostics_s
    text = tokenizer.decode(generated, skip_special_tokens=True) if tokenizer is not None else ""
    return GenerationResult(tokens=generated, text=text, stats=stats)


_ROOT_ONLY = DraftTree.chain(0)


def make_drafter(method: str, tree, store, randomness: RandomStream, params: SamplingParams, vocab: int,
                 feed_rejected: bool = False, diagnose: bool = False, seed: int | None = None) -> Drafter | None:
    """The drafter of ``method`` (None for plain decoding); ``feed_rejected`` and ``diagnose`` apply
    to STAND only (see :func:`generate`); ``seed`` seeds the diagnostics' private generator.

    Raises:
        StandError: unknown method, bad tree, a ``store`` of the wrong kind for the method, or
            ``feed_rejected`` for a method without an n-gram store.
    """
    if method not in METHODS:
        raise StandError(f"unknown method {method!r} (valid: {', '.join(METHODS)})")
    if feed_rejected and method not in STORE_METHODS:
        raise StandError(f"feed_rejected applies to stand and stand-det, not {method!r}")
    if method == "ar":
        return None
    if method == "pld":
        return PromptLookupDrafter()
    if method == "recycle":
        if store is not None and not isinstance(store, RecyclingMatrix):
            raise StandError("method 'recycle' shares a RecyclingMatrix, not an n-gram store")
        return TokenRecyclingDrafter(resolve_tree(tree), store if store is not None else RecyclingMatrix(vocab))
    if store is not None and not isinstance(store, NGramStore):
        raise StandError(f"method {method!r} shares an NGramStore, not {type(store).__name__}")
    stochastic = method == "stand" and not params.greedy
    return StandDrafter(
        resolve_tree(tree), store if store is not None else NGramStore(top_k=STORE_TOP_K),
        randomness if stochastic else None, params, feed_rejected, DraftQuality(seed=seed) if diagnose else None,
    )


def encode_prompt(tokenizer, prompt_or_ids) -> list[int]:
    """Token ids of a prompt: text through the chat template (if any), ids as they are.

    Raises:
        StandError: empty prompt, text without a tokenizer, or ids that are not a flat int sequence.
    """
    if isinstance(prompt_or_ids, str):
        if not prompt_or_ids.strip():
            raise StandError("empty prompt")
        if tokenizer is None:
            raise StandError("a text prompt needs a tokenizer (or pass token ids)")
        if getattr(tokenizer, "chat_template", None):
            encoded = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt_or_ids}], add_generation_prompt=True, tokenize=True
            )
            ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        else:
            ids = tokenizer(prompt_or_ids)["input_ids"]
    else:
        ids = prompt_or_ids.tolist() if isinstance(prompt_or_ids, torch.Tensor) else list(prompt_or_ids)
    if ids and isinstance(ids[0], list):
        if len(ids) != 1:
            raise StandError(f"expected one sequence of token ids, got {len(ids)}")
        ids = ids[0]
    if not ids:
        raise StandError("empty prompt")
    if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise StandError("prompt ids must be non-negative integers")
    return [int(t) for t in ids]


def resolve_tree(tree: DraftTree | TreeFile | str | None) -> DraftTree:
    """The static tree from a tree, a tree file, a path or bundled name, or None (the default)."""
    if tree is None:
        tree = DEFAULT_TREE
    if isinstance(tree, DraftTree):
        return tree
    if isinstance(tree, TreeFile):
        return tree.tree
    return load_tree(tree).tree


def default_eos_ids(model, tokenizer) -> list[int]:
    """EOS ids of the tokenizer and of the model's generation config."""
    ids: set[int] = set()
    for value in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return sorted(ids)


def model_context_limit(model) -> int | None:
    """The longest sequence (tokens) the model's positions cover, if the config says."""
    return getattr(model.config, "max_position_embeddings", None)


def _check_context(model, prompt_len: int, max_new_tokens: int) -> None:
    limit = model_context_limit(model)
    if limit is not None and prompt_len + max_new_tokens > limit:
        raise StandError(
            f"context too long: prompt {prompt_len} + max_new_tokens {max_new_tokens} tokens > model context {limit}"
        )
    window = getattr(model.config, "sliding_window", None)
    if getattr(model.config, "use_sliding_window", False) and window and prompt_len + max_new_tokens > window:
        raise StandError(f"context too long for sliding-window attention: {prompt_len + max_new_tokens} > {window}")


def _prefill(model, cache, tokens: list[int], device, need_logits: bool) -> torch.Tensor | None:
    """Run the prompt (minus its last token) through the model; ``[len, vocab]`` logits if asked."""
    ids = torch.tensor([tokens], device=device)
    positions = torch.arange(len(tokens), device=device)[None]
    with torch.inference_mode():
        out = model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=0 if need_logits else 1)
    return out.logits[0] if need_logits else None


def _tree_forward(model, cache, draft: Draft, tree: DraftTree, prefix_len: int, device) -> torch.Tensor:
    nodes = torch.as_tensor(draft.nodes)
    ancestors = tree.ancestor_mask.index_select(0, nodes).index_select(1, nodes)
    return tree_forward(model, cache, draft.tokens, draft.depths, ancestors, prefix_len)


def tree_forward(model, cache, tokens: Sequence[int], depths, ancestors: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """One target forward over a token tree on top of the cached prefix (tree attention).

    Args:
        model: the target model.
        cache: its KV cache holding ``prefix_len`` tokens; the ``n`` tree entries are appended.
        tokens: ``[n]`` token ids, root first, parents before children.
        depths: ``[n]`` depth of each token (root 0); positions are ``prefix_len + depth``.
        ancestors: ``[n, n]`` bool, ``[i, j]`` True iff j is i or an ancestor of i.
        prefix_len: tokens already in the cache.

    Returns:
        ``[n, vocab]`` logits (model dtype): row i predicts the token after the path to node i.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    if len(tokens) == 1:
        mask = None  # a lone root attends to the whole prefix: no mask, and SDPA's fast path
    else:
        mask = tree_attention_mask(ancestors.to(device), prefix_len, dtype)
        if "sliding_attention" in (getattr(model.config, "layer_types", None) or ()):
            mask = {"full_attention": mask, "sliding_attention": mask}
    ids = torch.tensor([list(tokens)], device=device)
    positions = tree_position_ids(depths, prefix_len).to(device)
    with torch.inference_mode():
        out = model(input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True)
    return out.logits[0]


def _truncate(tokens: list[int], budget: int, eos: set[int]) -> list[int]:
    """Cut an accepted run at the first EOS (kept) and at the token budget."""
    tokens = tokens[:budget]
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
    return tokens


class _Clock:
    """Wall-clock laps; synchronises CUDA so time lands in the right bucket."""

    def __init__(self, device) -> None:
        self._cuda = torch.device(device).type == "cuda"
        self._last = time.perf_counter()

    def lap(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed
