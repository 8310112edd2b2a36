"""The engine loop, one for a single sequence and for a batch: draft → one target forward → verify →
commit, over the active rows, until each finishes (STAND paper §3; docs/architecture.md §1.4, §1.5).

Per step every active row proposes a draft (:meth:`DecodeRow.propose`), the row caches run all drafts
through the target in one forward (:class:`RowCaches`: :class:`SequenceCache` for one sequence, with
any attention layout the model has; :class:`BatchCache` for B rows of different lengths in one
padded forward), each row settles its draft against its own logits (verification, stop rule, drafter
feeding: :meth:`DecodeRow.settle`), and the caches keep each row's root and accepted entries. Rows
finish independently (EOS, stop string, budget) and leave at once; with more rows than slots, the
next waiting rows take their places before the next step (continuous batching, :meth:`Loop.admit`). One device-aware
:class:`stand_runtime.engine.clock.Clock` times every phase into the statistics of the rows it served.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Protocol, Sequence

import torch

from ..checks import check_int
from ..drafters import Drafter
from ..drafters.feeds import LogitsFeed
from ..errors import StandError
from ..sizing.allocation import BatchAllocator
from ..sizing.value import ValueRule
from ..store.drafting import best_first_rows
from ..store.native_store import update_sequences
from ..target.forward import draft_forward, model_device, prefill, with_cache
from ..target.kv_cache import BatchedCache, PrefixCache, copied_cache, keep_tree_entries, new_cache
from ..target.sampling import SamplingParams
from ..trees.draft import Draft
from ..verify_batch import verify_rows
from .clock import Clock
from .metrics import GenerationResult
from .row import DecodeRow, Settled, StepTarget, learn_rows, walk_rows


class RowCaches(Protocol):
    """How the rows' KV caches live and run through the target (one sequence, or a padded batch)."""

    def prefill(self, model, rows: Sequence[DecodeRow], clock: Clock, waiting: Sequence[DecodeRow] = ()) -> None:
        """Cache every row's prompt minus its last token (the first root) and feed the drafters; a
        batch adds the rows to those it holds (after them). ``waiting``: rows to be added later."""

    def forward(self, model, rows: Sequence[DecodeRow], drafts: Sequence[Draft]) -> list[torch.Tensor]:
        """One target forward over every row's draft: per row its ``[n_nodes, vocab]`` logits."""

    def keep(self, settled: Sequence[Settled], drafts: Sequence[Draft]) -> None:
        """Keep each row's root and accepted entries (``Settled.keep``); drop the rest of the step."""

    def drop(self, finished: Sequence[int], active: int) -> None:
        """Remove the rows at positions ``finished`` of the ``active`` rows (they finished)."""

    def forwarded(self, drafts: Sequence[Draft]) -> int:
        """Tokens the last forward ran (padding included)."""


def prompt_observer(drafter: Drafter, prompt: list[int], params: SamplingParams):
    """The prefill callback that hands a prompt chunk's logits to ``drafter`` as a
    :class:`stand_runtime.drafters.feeds.LogitsFeed` of p under ``params`` (refusing non-finite logits in
    the rows the drafter reads; rows it does not read are checked by verification when they are
    visited, so the whole chunk is never checked at once)."""
    def observe(logits: torch.Tensor, positions: range) -> None:
        source = f"the prompt's positions {positions.start}-{positions.stop - 1}"
        drafter.observe_prompt(prompt, LogitsFeed(logits, params, source=source), positions)

    return observe


class SequenceCache:
    """One sequence's cache (a transformers cache, compacted after each step; any attention layout)."""

    def __init__(self, model) -> None:
        self.cache = new_cache(model)
        self._prefix = 0

    def prefill(self, model, rows, clock: Clock, waiting=()) -> None:
        (row,) = rows
        prompt = row.committed
        clock.rows = [row.stats]
        if len(prompt) > 1:
            prefill(model, self.cache, prompt[:-1], on_logits=None if row.drafter is None else
                    prompt_observer(row.drafter, prompt, row.params))
        learn_rows(rows, prompt)
        clock.lap("prefill_s")

    def forward(self, model, rows, drafts) -> list[torch.Tensor]:
        self._prefix = self.cache.get_seq_length()
        return [draft_forward(model, self.cache, drafts[0], self._prefix)]

    def keep(self, settled, drafts) -> None:
        if settled[0].keep:
            keep_tree_entries(self.cache, self._prefix, settled[0].keep, len(drafts[0].tokens))

    def drop(self, finished, active) -> None:
        pass

    def forwarded(self, drafts) -> int:
        return len(drafts[0].tokens)


class BatchCache:
    """B rows in one padded forward (:class:`stand_runtime.target.kv_cache.BatchedCache`).

    Drafts are padded to a common node count N (padding nodes attend only to themselves, are never
    visited by verification and are dropped from the cache); one forward over ``[B, N]`` tokens with
    positions ``len(row) - 1 + depth`` and one additive ``[B, 1, N, S + N]`` mask of each row's valid
    cache slots and its tree. Rows of one prompt share its prefill (also rows admitted later into a
    running batch: the prompt's cache is kept while a waiting row has that prompt); rows sharing a
    drafter memory (``DecodeRow.memory``) feed it the prompt once.
    """

    def __init__(self, model, prefixes: PrefixCache | None = None) -> None:
        self.device = model_device(model)
        self.dtype = next(model.parameters()).dtype
        self.prefixes = prefixes
        self.cache: BatchedCache | None = None
        self._prompts: dict[tuple, tuple] = {}  # prompt ids -> (its single-row cache, the learners fed)
        self._block = 0
        self._width = 0

    def prefill(self, model, rows, clock: Clock, waiting: Sequence[DecodeRow] = ()) -> None:
        """Prefill ``rows`` and add them to the batch (after the rows already in it); keep the prompt
        caches ``waiting`` rows will need. A kept prompt is run again only for a row whose drafter
        memory has not learned it (the prompt's logits are not kept)."""
        caches = []
        for row in rows:
            clock.rows = [row.stats]
            key = tuple(row.committed)
            kept = self._prompts.get(key)
            if kept is None or any(_learner(other) not in kept[1] for other in rows if _learns(other, key)):
                self._prompts[key] = self._prefill_prompt(model, rows, row.committed)
            caches.append(self._prompts[key][0])
            clock.lap("prefill_s")
        needed = {tuple(row.committed) for row in waiting}
        self._prompts = {key: kept for key, kept in self._prompts.items() if key in needed}
        added = BatchedCache.from_rows(caches, model.config)
        if self.cache is None or not self.cache.valid.shape[0]:  # the first rows, or every row had left
            self.cache = added
        else:
            self.cache.extend(added)

    def _prefill_prompt(self, model, rows, prompt: list[int]) -> tuple[object, set]:
        """``prompt``'s single-row cache, its logits fed once to each memory of ``rows`` that start
        from it; with the learners fed (:func:`_learner`). With a :class:`PrefixCache`, from a copy of
        the longest kept prefix every such memory was fed (only the rest runs through the target), and
        kept for later prompts."""
        learning = [other for other in rows if _learns(other, tuple(prompt))]
        memories = None  # the memories fed, when a kept prefix may serve them (none is a row's own)
        if self.prefixes is not None and all(other.memory is not None for other in learning):
            memories = [other.memory for other in learning]
        found = None if memories is None else self.prefixes.longest(prompt[:-1], memories)
        start, cache = (0, new_cache(model)) if found is None else (found[0], copied_cache(model, found[1]))
        observers, fed = [], set()
        for other in learning:
            if _learner(other) in fed:
                continue  # one memory learns a prompt once, however many of its rows share it
            fed.add(_learner(other))
            observers.append(prompt_observer(other.drafter, prompt, other.params))

        def observe(logits, positions):
            for observer in observers:
                observer(logits, positions)

        if len(prompt) - 1 > start:
            prefill(model, cache, prompt[start:-1], on_logits=observe if observers else None, offset=start)
        learn_rows(rows, prompt)
        if memories is not None:
            self.prefixes.add(prompt[:-1], cache, memories)
        return cache, fed

    def forward(self, model, rows, drafts) -> list[torch.Tensor]:
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
        self._block, self._width = self.cache.length, width
        mask = self.cache.attention_mask(ancestors, self.dtype, self.device)
        logits = model(input_ids=ids.to(self.device), position_ids=positions.to(self.device), attention_mask=mask,
                       **with_cache(model, self.cache.cache), use_cache=True).logits
        return [logits[b, : len(d.tokens)] for b, d in enumerate(drafts)]

    def keep(self, settled, drafts) -> None:
        self.cache.keep(self._block, [s.keep for s in settled], self._width)

    def drop(self, finished, active) -> None:
        if finished:
            self.cache.select([b for b in range(active) if b not in finished])

    def forwarded(self, drafts) -> int:
        return len(drafts) * max(len(d.tokens) for d in drafts)


def _learns(row: DecodeRow, prompt: tuple) -> bool:
    """Whether ``row`` starts from ``prompt`` and has a drafter that reads a prompt's logits (one whose
    ``reads_prompt`` is False, as prompt lookup's, needs none)."""
    return row.drafter is not None and row.drafter.reads_prompt and tuple(row.committed) == prompt


def _learner(row: DecodeRow) -> int:
    """Who learns ``row``'s prompt: its shared memory, or the row's own drafter (memory None)."""
    return id(row.memory) if row.memory is not None else id(row)


def default_batch_verify(caches: RowCaches, device) -> bool:
    """Whether the loop verifies a step's rows at once when not told (docs/algorithms.md §4.7): for a batch
    (:class:`BatchCache`) on an accelerator; on a CPU the walk, which computes p only where it goes."""
    return isinstance(caches, BatchCache) and torch.device(device).type != "cpu"


class Loop:
    """Decode ``rows`` to the end (see the module docstring).

    Args:
        model: the target.
        rows: one :class:`DecodeRow` per sequence (prompt, drafter, sampling, randomness, stop rule).
        caches: the row caches (:class:`SequenceCache` for one row, :class:`BatchCache` for a batch).
        max_nodes: cap on drafted nodes per row and step (None = none).
        on_tokens: called with the number of tokens each step committed over all rows (progress).
        on_finish: called as ``on_finish(row_index, result)`` when a row finishes.
        batch_verify: verify all rows of a step at once on the logits' device
            (:func:`stand_runtime.verify_batch.verify_rows`, one transfer to the host) instead of walking
            each row's tree on the host; None = for a batch (:class:`BatchCache`) on an accelerator.
        slots: rows decoded together at most (None = all); the others wait, in order, and each takes
            the slot of a row that finished before the next step (continuous batching: a batch whose
            rows finish at different steps stays full; :class:`BatchCache` only).
        value: the value rule the rows' drafters share (a value-sized tree,
            :func:`stand_runtime.engine.row.sizing_rule`): the loop hands it the step times and, when it
            allocates per forward, sizes the rows' drafts with it; None = none.

    Raises:
        StandError: ``slots`` < 1, or a wait (``slots`` below the rows) with a cache that cannot add rows.
    """

    def __init__(self, model, rows: Sequence[DecodeRow], caches: RowCaches, max_nodes: int | None = None,
                 on_tokens: Callable[[int], None] | None = None,
                 on_finish: Callable[[int, GenerationResult], None] | None = None,
                 batch_verify: bool | None = None, slots: int | None = None, value: ValueRule | None = None) -> None:
        self.batch_verify = default_batch_verify(caches, model_device(model)) if batch_verify is None else batch_verify
        self.model = model
        self.rows = list(rows)
        self.caches = caches
        self.max_nodes = max_nodes
        self.on_tokens = on_tokens
        self.on_finish = on_finish
        self.clock = Clock(model_device(model))
        for row in self.rows:
            row.lap = self.clock.lap
        if len(self.rows) > 1:
            defer_feeds(self.rows)  # native stores: the rows' feeds merged in one call per step
        self.slots = len(self.rows) if slots is None else check_int("slots", slots, 1)
        if self.slots < len(self.rows) and not isinstance(caches, BatchCache):
            raise StandError("rows wait for a slot only in a batch (BatchCache)")
        self.active: list[int] = list(range(min(self.slots, len(self.rows))))
        self.waiting = deque(range(len(self.active), len(self.rows)))
        self.results: list[GenerationResult | None] = [None] * len(self.rows)
        self.value = value
        self.allocator = BatchAllocator.for_rule(value, max_nodes)
        self._warm = False  # the first forward after the prefill is cold (caches grow): not observed

    def _observe_step(self, rows, tokens: int, seconds: float, emitted: int) -> None:
        """Hand the step's measured time (drafting, forward, verification, bookkeeping: what a step
        costs in wall time, so the host work that grows with the draft is priced too) to the value rule, so its latency model corrects itself (on a CPU; on CUDA the time is only known at a sync). The
        loop's first forward is left out: it runs cold, and as every decode starts with a roots-only
        forward, counting it would make the smallest forward look dear and the rule draft wider than it
        pays."""
        warm, self._warm = self._warm, True
        if warm and self.value is not None:
            self.value.observe_forward(tokens, seconds, emitted)

    def _allocate(self, rows, drafts: list[Draft]) -> list[Draft]:
        """The drafts cut by the batch allocator (value-sized rows: one node budget for the forward,
        :mod:`stand_runtime.sizing.allocation`; timed as drafting), and each row's share of the forward
        and of its padding counted into its statistics."""
        if self.allocator is not None:
            drafts = self.allocator.allocate(drafts)
            self.clock.lap("drafting_s")
        width = self.caches.forwarded(drafts) // len(drafts)
        for row, draft in zip(rows, drafts):
            row.stats.forwarded_tokens += width
            row.stats.padding_tokens += width - len(draft.tokens)
        return drafts

    def _verify(self, rows, drafts, logits, targets) -> list:
        """Every row's :class:`stand_runtime.verify.Verification`: from the batched verifier when it is
        on, else from the rows' walks advanced level by level (:func:`.row.walk_rows`)."""
        if self.batch_verify:
            noises = None if rows[0].noise is None else [row.noise.at(len(row.committed)) for row in rows]
            verified = verify_rows(drafts, logits, [row.params for row in rows], [row.randomness for row in rows], noises)
        else:
            verified = walk_rows([row.walk(draft) for row, draft in zip(rows, drafts)], targets)
        self.clock.lap("verification_s")
        return verified

    def run(self) -> list[GenerationResult]:
        """Prefill, then step until every row finished; one result per row, in order."""
        self.caches.prefill(self.model, [self.rows[i] for i in self.active], self.clock, self._waiting_rows())
        while self.active:
            self.step()
            self.admit()
        return self.results

    def _waiting_rows(self) -> list[DecodeRow]:
        return [self.rows[i] for i in self.waiting]

    def admit(self) -> None:
        """Give the slots of finished rows to waiting rows (prefilled and added to the batch); the
        step after an admission is not observed by the latency model (the cache was rebuilt)."""
        free = min(self.slots - len(self.active), len(self.waiting))
        if free <= 0:
            return
        admitted = [self.waiting.popleft() for _ in range(free)]
        self.clock.lap(None)
        self.caches.prefill(self.model, [self.rows[i] for i in admitted], self.clock, self._waiting_rows())
        self.active.extend(admitted)
        self._warm = False

    def step(self) -> None:
        """One step over the active rows: draft, one forward, settle, keep; finished rows leave."""
        rows = [self.rows[i] for i in self.active]
        self.clock.rows = [row.stats for row in rows]
        self.clock.lap(None)
        started = time.perf_counter()
        drafts = self._allocate(rows, propose_rows(rows, self.max_nodes))  # native trees: one call for the rows
        logits = self.caches.forward(self.model, rows, drafts)
        timed = self.clock.lap("forward_s") is not None  # on CUDA the step's time is not known here
        targets = [StepTarget(out, row.params, False if self.batch_verify else None) for row, out in zip(rows, logits)]
        verified = self._verify(rows, drafts, logits, targets)
        settled = [row.settle(draft, target, verification)
                   for row, draft, target, verification in zip(rows, drafts, targets, verified)]
        feed_rows(rows)  # the native stores' updates deferred by settle, in one call
        self.caches.keep(settled, drafts)
        finished = [b for b, row in enumerate(rows) if row.finish_reason is not None]
        self.caches.drop(finished, len(rows))
        self.clock.lap("bookkeeping_s")
        if timed:
            self._observe_step(rows, self.caches.forwarded(drafts), time.perf_counter() - started,
                               sum(len(s.tokens) for s in settled))
        if finished:
            self.clock.settle()
        for b in finished:
            index = self.active[b]
            self.results[index] = self.rows[index].result()
            if self.on_finish is not None:
                self.on_finish(index, self.results[index])
        self.active = [i for b, i in enumerate(self.active) if b not in finished]
        if self.on_tokens is not None:
            self.on_tokens(sum(len(s.tokens) for s in settled))


def defer_feeds(rows: Sequence[DecodeRow]) -> None:
    """Let every row whose drafter feeds in batch (:attr:`Drafter.feeds_in_batch`) leave its step's update
    to :func:`feed_rows`."""
    for row in rows:
        row.defer_feed = row.drafter is not None and row.drafter.feeds_in_batch


def propose_rows(rows: Sequence[DecodeRow], max_nodes: int | None = None) -> list[Draft]:
    """Every row's draft (:meth:`DecodeRow.propose`), the rows whose drafter drafts in batch
    (:attr:`Drafter.drafts_in_batch`) in one call (rows in order; the same drafts as the per-row calls)."""
    batched = [b for b, row in enumerate(rows) if row.wants_draft(max_nodes) and row.drafter.drafts_in_batch]
    if len(batched) < 2:
        return [row.propose(max_nodes) for row in rows]
    requests = [rows[b].drafter.batch_request(rows[b].committed, rows[b].remaining - 1) for b in batched]
    drafted = dict(zip(batched, best_first_rows(requests)))
    return [row.proposed(row.drafter.batch_drafted(drafted[b]), max_nodes) if b in drafted else row.propose(max_nodes)
            for b, row in enumerate(rows)]


def feed_rows(rows: Sequence[DecodeRow]) -> None:
    """Merge the rows' pending step observations (``DecodeRow.pending_feed``) into their stores in
    one call, in row order."""
    pending = [row.pending_feed for row in rows if row.pending_feed is not None]
    for row in rows:
        row.pending_feed = None
    if pending:
        update_sequences(pending)
