"""Batched decoding: B rows advance together, one target forward per step over every row's draft.

Each row is a :class:`stand_runtime.engine.decode_row.DecodeRow` (its own drafter, sampling parameters,
random stream and stop rule), so verification, stopping and drafter feeding are the single-sequence
engine's, row by row. Per step:

1. every active row proposes a draft; the drafts are padded to a common node count N (padding nodes
   attend only to themselves, are never visited by verification, and are dropped from the cache);
2. one forward over ``[B, N]`` tokens with explicit positions ``len(row) - 1 + depth`` and one additive
   ``[B, 1, N, S + N]`` mask combining each row's valid cache slots and its tree
   (:class:`stand_runtime.target.batch_kv.BatchedCache`);
3. each row settles its draft against its own logits rows; the cache keeps each row's root and
   accepted entries (per-row compaction, holes masked).

Rows finish independently (EOS, stop string, budget) and leave the batch at once, so a finished row
stops costing compute. Rows given the same drafter memory share it *online*: what one row verified
this step, another drafts from next step (best-of-N trajectories of one problem, STAND paper §3.1).
Every row's output is distributed exactly as plain decoding of that row alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..checks import check_bool, check_callable, check_int
from .decode import check_budget, prompt_observer
from .decode_row import DecodeRow, StepTarget
from ..drafters import (AUTO, COPY_TOKENS, DEFAULT_TREES, TREE_METHODS, Memory, check_method, make_drafter, method_tree,
                       new_memory, sized_family)
from ..errors import StandError
from ..limits import MAX_ROWS
from ..target.forward import model_device, prefill
from ..target.batch_kv import BatchedCache
from ..target.kv_cache import new_cache
from .metrics import GenerationResult
from ..target.model_facts import attention_layout, check_model, check_positions, default_eos_ids, vocab_size
from ..target.prompts import encode_prompt
from ..randomness import RandomStream, check_seed, check_seed_span
from ..target.sampling import SamplingParams, resolve_sampling
from .stopping import StopRule, check_eos_ids, check_stop_strings


@dataclass(frozen=True)
class RowSpec:
    """One row of a batch (frozen: checked once, when made, and never changed after).

    Attributes:
        prompt: token ids (non-empty, inside the vocabulary).
        sampling: the row's target sampling distribution.
        seed: the row's seed (None = nondeterministic).
        max_new_tokens: the row's token budget.
        memory: the drafter memory the row drafts from and feeds (rows given the same object share
            it online); None = a fresh one for this row.
        stop: strings that end the row once its text contains one.
        eos_token_ids: token ids that end the row; None = the tokenizer's and the model's EOS ids.
        logprobs: record each generated token's log-probability (``GenerationResult.logprobs``).
    """

    prompt: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    max_new_tokens: int = 256
    memory: Memory | None = None
    stop: tuple[str, ...] = ()
    eos_token_ids: tuple[int, ...] | None = None
    logprobs: bool = False

    def __post_init__(self) -> None:
        """Checks every field that needs no model (the vocabulary and context are checked by
        :func:`decode_rows`); normalises ``stop`` (a lone string is one stop string) and numpy scalars.

        Raises:
            StandError: a sampling that is not a :class:`SamplingParams`, a bad seed, budget, stop
                strings, EOS ids or a non-bool ``logprobs``.
        """
        if not isinstance(self.sampling, SamplingParams):
            raise StandError(f"a row's sampling must be a SamplingParams (e.g. SamplingParams(temperature=0)), "
                             f"got {type(self.sampling).__name__} {self.sampling!r}")
        check_seed(self.seed)
        fields = {"seed": None if self.seed is None else int(self.seed),
                  "max_new_tokens": check_budget(self.max_new_tokens), "stop": check_stop_strings(self.stop),
                  "eos_token_ids": None if self.eos_token_ids is None else tuple(check_eos_ids(self.eos_token_ids)),
                  "logprobs": check_bool("logprobs", self.logprobs)}
        for name, value in fields.items():
            object.__setattr__(self, name, value)


@torch.inference_mode()
def decode_rows(
    model,
    tokenizer,
    rows: Sequence[RowSpec],
    *,
    method: str = "stand",
    tree=None,
    feed_rejected: bool = False,
    extend: bool = True,
    copy_tokens: int = COPY_TOKENS,
    max_nodes: int | str | None = AUTO,
    on_tokens: Callable[[int], None] | None = None,
    on_finish: Callable[[int, GenerationResult], None] | None = None,
) -> list[GenerationResult]:
    """Decode ``rows`` together (see the module docstring); returns one result per row, in order.

    Args:
        model, tokenizer: the target and its tokenizer (None allowed without stop strings).
        rows: the rows (:class:`RowSpec`).
        method, tree, feed_rejected, extend, copy_tokens: as in :func:`stand_runtime.generate`; the
            tree is resolved once for the batch (``"auto"`` and families sized for ``len(rows)`` rows).
        max_nodes: cap on drafted nodes per row and step (the draft's first nodes kept, lossless); None = none;
            ``"auto"`` = :func:`auto_node_cap`.
        on_tokens: called with the number of tokens committed by each step over all rows (progress).
        on_finish: called as ``on_finish(row_index, result)`` when a row finishes.

    Returns:
        Per row a :class:`GenerationResult`; its ``stats`` hold the row's own steps, and as times the
        wall time of the batch steps the row took part in (so ``tokens_per_s`` is the row's rate
        inside the batch).

    Raises:
        StandError: no rows, a bad row (prompt, budget, seed, stop strings), a prompt plus budget
            beyond the model's context, a model with sliding-window attention (not batched here),
            or an option the method does not take.
    """
    check_model(model)
    if isinstance(rows, RowSpec) or not isinstance(rows, (list, tuple)) or not rows:
        raise StandError("decode_rows takes a non-empty list of RowSpec")
    if len(rows) > MAX_ROWS:
        raise StandError(f"{len(rows)} rows in one batch; at most {MAX_ROWS} (decode them in batches)")
    for index, spec in enumerate(rows):
        if not isinstance(spec, RowSpec):
            raise StandError(f"row {index} is a {type(spec).__name__}, not a RowSpec")
    max_nodes = check_max_nodes(max_nodes, method)
    check_callable("on_tokens", on_tokens)
    check_callable("on_finish", on_finish)
    check_method(method, tree=tree, feed_rejected=feed_rejected, extend=extend, copy_tokens=copy_tokens)
    layout = attention_layout(model)
    if layout.window is not None:
        raise StandError("batched decoding does not support sliding-window attention; decode rows one at a time")
    vocab = vocab_size(model)
    static = method_tree(method, tree, model, batch=len(rows))
    if max_nodes == AUTO:
        max_nodes = auto_node_cap(method, tree, static, len(rows))
    prepared = []
    for index, spec in enumerate(rows):
        prompt = encode_prompt(tokenizer, spec.prompt, vocab)
        check_positions(model, len(prompt), spec.max_new_tokens)
        check_method(method, tree=static, memory=spec.memory)
        eos = check_eos_ids(spec.eos_token_ids, vocab) if spec.eos_token_ids is not None \
            else default_eos_ids(model, tokenizer)
        prepared.append((prompt, StopRule(eos, spec.max_new_tokens, spec.stop, tokenizer)))
    states = []
    for spec, (prompt, stop_rule) in zip(rows, prepared):
        randomness = RandomStream.seeded(spec.seed)
        drafter = make_drafter(method, static, spec.memory, randomness, spec.sampling, model, feed_rejected, False,
                               spec.seed, extend, copy_tokens)
        states.append(DecodeRow(prompt, drafter, spec.sampling, randomness, stop_rule, logprobs=spec.logprobs))
    batch = _Batch(model, states, [spec.memory for spec in rows], max_nodes, on_tokens, on_finish, tokenizer)
    batch.prefill()
    while batch.active:
        batch.step()
    return batch.results


def check_max_nodes(max_nodes, method: str | None = None):
    """``max_nodes`` if it is an int >= 0 (numpy integers accepted), None or ``"auto"``.

    Raises:
        StandError: anything else, or a cap given to a method that drafts nothing (``ar``).
    """
    if max_nodes is None or (isinstance(max_nodes, str) and max_nodes == AUTO):
        return max_nodes
    try:
        max_nodes = check_int("max_nodes", max_nodes, 0)
    except StandError:
        raise StandError(f"max_nodes must be an integer >= 0, None or 'auto', got {max_nodes!r}") from None
    if method == "ar":
        raise StandError("max_nodes caps drafted nodes: method 'ar' drafts none")
    return max_nodes


def auto_node_cap(method: str, spec, static, rows: int) -> int | None:
    """The default cap on drafted nodes per row in a batch of ``rows``.

    A batched forward costs the padded width times the rows, so one wide row (STAND's copied
    tokens beyond its tree) widens every row. When the tree was sized for this batch from the
    latency profile (``"auto"`` or a family), rows are capped at the tree's size; an explicit tree
    (or a batch of one) is not capped.
    """
    if rows < 2 or method not in TREE_METHODS or static is None:
        return None
    return static.num_nodes if sized_family(DEFAULT_TREES[method] if spec is None else spec) is not None else None


class _Batch:
    """The active rows, their batched cache and the batch clock."""

    def __init__(self, model, rows: list[DecodeRow], memories: list, max_nodes, on_tokens, on_finish,
                 tokenizer) -> None:
        self.model = model
        self.rows = rows
        self.memories = memories
        self.max_nodes = max_nodes
        self.on_tokens = on_tokens
        self.on_finish = on_finish
        self.tokenizer = tokenizer
        self.device = model_device(model)
        self.dtype = next(model.parameters()).dtype
        self.active: list[int] = list(range(len(rows)))
        self.results: list[GenerationResult | None] = [None] * len(rows)
        self.cache: BatchedCache | None = None

    def prefill(self) -> None:
        """Prefill each distinct prompt once (batch 1, chunked); rows of one prompt share the copy.

        The prompt's logits feed each drafter memory once (rows sharing a memory feed it once)."""
        caches, by_prompt = [], {}
        for row in self.rows:
            start = time.perf_counter()
            prompt = row.committed
            key = tuple(prompt)
            if key not in by_prompt:
                cache = new_cache(self.model)
                observers, fed = [], set()
                for other, memory in zip(self.rows, self.memories):
                    if other.drafter is None or tuple(other.committed) != key:
                        continue
                    if memory is not None and id(memory) in fed:
                        continue  # one memory learns a prompt once, however many of its rows share it
                    fed.add(id(memory))
                    observers.append(prompt_observer(other.drafter, prompt, other.params))

                def observe(logits, positions, observers=observers):
                    for observer in observers:
                        observer(logits, positions)

                if len(prompt) > 1:
                    prefill(self.model, cache, prompt[:-1], on_logits=observe if observers else None)
                by_prompt[key] = cache
            caches.append(by_prompt[key])
            row.stats.prefill_s += time.perf_counter() - start
        self.cache = BatchedCache.from_rows(caches, self.model.config)

    def step(self) -> None:
        """One batched step over the active rows (see the module docstring)."""
        start = time.perf_counter()
        rows = [self.rows[i] for i in self.active]
        drafts = [row.propose(self.max_nodes) for row in rows]
        drafted = time.perf_counter()
        width = max(len(d.tokens) for d in drafts)
        batch = len(rows)
        ids = torch.zeros(batch, width, dtype=torch.long)
        positions = torch.zeros(batch, width, dtype=torch.long)
        ancestors = torch.eye(width, dtype=torch.bool).repeat(batch, 1, 1)
        for b, (row, draft) in enumerate(zip(rows, drafts)):
            n = len(draft.tokens)
            ids[b, :n] = torch.as_tensor(draft.tokens)
            ids[b, n:] = draft.tokens[0]
            root = len(row.committed) - 1
            positions[b, :n] = torch.as_tensor(draft.depths) + root
            positions[b, n:] = root
            ancestors[b, :n, :n] = draft.ancestor_mask()
        block_start = self.cache.length
        mask = self.cache.attention_mask(ancestors, self.dtype, self.device)
        out = self.model(input_ids=ids.to(self.device), position_ids=positions.to(self.device), attention_mask=mask,
                         cache=self.cache.cache, use_cache=True)
        logits = out.logits
        forwarded = time.perf_counter()
        keep, committed = [], 0
        for b, (row, draft) in enumerate(zip(rows, drafts)):
            settled = row.settle(draft, StepTarget(logits[b, : len(draft.tokens)], row.params))
            keep.append(settled.keep)
            committed += len(settled.tokens)
        verified = time.perf_counter()
        self.cache.keep(block_start, keep, width)
        finished = [b for b, row in enumerate(rows) if row.finish_reason is not None]
        if finished:
            self.cache.select([b for b in range(batch) if b not in finished])
        done = time.perf_counter()
        for row in rows:
            stats = row.stats
            stats.drafting_s += drafted - start
            stats.forward_s += forwarded - drafted
            stats.verification_s += verified - forwarded
            stats.bookkeeping_s += done - verified
        for b in finished:
            index = self.active[b]
            self.results[index] = self._result(self.rows[index])
            if self.on_finish is not None:
                self.on_finish(index, self.results[index])
        self.active = [i for b, i in enumerate(self.active) if b not in finished]
        if self.on_tokens is not None:
            self.on_tokens(committed)

    def _result(self, row: DecodeRow) -> GenerationResult:
        stats = row.finish_stats()
        text = row.stop_rule.text(row.generated, row.finish_reason)
        return GenerationResult(tokens=row.generated, text=text, stats=stats, finish_reason=row.finish_reason,
                                logprobs=row.logprobs)


def generate_batch(
    model,
    tokenizer,
    prompts: Sequence[str | Sequence[int]],
    *,
    n: int = 1,
    method: str = "stand",
    tree=None,
    sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    max_new_tokens: int = 256,
    seed: int | Sequence[int | None] | None = None,
    store: Memory | Sequence[Memory] | None = None,
    feed_rejected: bool = False,
    extend: bool = True,
    copy_tokens: int = COPY_TOKENS,
    max_nodes: int | str | None = AUTO,
    eos_token_ids: Sequence[int] | None = None,
    stop: Sequence[str] = (),
    on_tokens: Callable[[int], None] | None = None,
) -> list[GenerationResult]:
    """Decode ``n`` samples of every prompt in one batch (:func:`decode_rows`).

    Rows are prompt-major: row ``i * n + j`` is sample j of prompt i (transformers'
    ``num_return_sequences`` order).

    Args:
        prompts: texts (through the chat template) or token ids.
        n: samples per prompt (>= 1).
        sampling: one :class:`SamplingParams` for every row, or one per row; None = built from
            ``temperature`` / ``top_p`` / ``top_k`` as in :func:`stand_runtime.generate`.
        seed: an int (row r is seeded with ``seed + r``), one seed (or None) per row, or None.
        store: drafter memory: None = one fresh memory per prompt, shared online by its n rows; one
            memory shared by every row; or one per prompt.
        Other arguments: as in :func:`stand_runtime.generate` and :func:`decode_rows`.

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
    check_method(method, tree=tree, feed_rejected=feed_rejected, extend=extend, copy_tokens=copy_tokens)
    stop = check_stop_strings(stop)
    if eos_token_ids is not None:
        eos_token_ids = check_eos_ids(eos_token_ids, vocab_size(model))
    params = _row_sampling(sampling, temperature, top_p, top_k, total)
    seeds = _row_seeds(seed, total)
    if store is None:
        memories = [new_memory(method, vocab_size(model), tree) for _ in prompts]
    elif isinstance(store, (list, tuple)):
        memories = list(store)
    else:
        memories = [store] * len(prompts)
    if len(memories) != len(prompts):
        raise StandError(f"store has {len(memories)} entries for {len(prompts)} prompts")
    vocab = vocab_size(model)
    rows = []
    for i, prompt in enumerate(prompts):
        ids = encode_prompt(tokenizer, prompt, vocab)
        for j in range(n):
            r = i * n + j
            rows.append(RowSpec(ids, params[r], seeds[r], max_new_tokens, memories[i], stop, eos_token_ids))
    return decode_rows(model, tokenizer, rows, method=method, tree=tree, feed_rejected=feed_rejected, extend=extend,
                       copy_tokens=copy_tokens, max_nodes=max_nodes, on_tokens=on_tokens)


def _row_sampling(sampling, temperature, top_p, top_k, total: int) -> list[SamplingParams]:
    """Per row its :class:`SamplingParams`: one for every row (given, or built from the keywords)
    or a list with one per row.

    Raises:
        StandError: anything else (a dict, a list of the wrong length or holding other things).
    """
    if sampling is None or isinstance(sampling, SamplingParams):
        return [resolve_sampling(sampling, temperature, top_p, top_k)] * total
    if not isinstance(sampling, (list, tuple)):
        raise StandError(f"sampling must be a SamplingParams or a list of them (one per row), "
                         f"got {type(sampling).__name__} {sampling!r}")
    if any(v is not None for v in (temperature, top_p, top_k)):
        raise StandError("give sampling or temperature / top_p / top_k, not both")
    if len(sampling) != total:
        raise StandError(f"sampling has {len(sampling)} entries for {total} rows")
    for r, params in enumerate(sampling):
        if not isinstance(params, SamplingParams):
            raise StandError(f"sampling[{r}] must be a SamplingParams, got {type(params).__name__} {params!r}")
    return list(sampling)


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
