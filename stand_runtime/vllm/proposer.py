"""STAND as a vLLM speculative proposer (``speculative_config={"method": "custom_class", ...}``).

Per running request, every engine step:

1. **feed**: the target's p at the positions the step verified (the root and the accepted drafts),
   as vLLM samples it (temperature / top-p / top-k; for greedy requests the softmax), top-10, into the
   request's n-gram store (STAND paper §3.1) and the fallback store;
2. **learn**: how many of its last chain's tokens were accepted, per position score and kind, for the
   sized rule's acceptance map; and the step's wall time against the tokens of its forward;
3. **draft**: a chain from the blended store (:class:`stand_runtime.drafters.chain.ChainCursor`),
   each token drawn from q by Gumbel-Top-1 (greedy requests: q's mode); where the request's store has
   no context (with ``sized``: also where the rule trusts the copy more), prompt lookup's copy chain
   (one-hot q), then the fallback store shared by every request. Its length: K, or with ``sized`` what
   the batch-wide expected-value rule gives it (:class:`stand_runtime.drafters.chain_budget.ChainBudget`);
4. **q to the verifier**: the chain's draft distributions go to vLLM's rejection sampler, which
   accepts with ``min(1, p/q)`` and resamples from ``max(p - q, 0)`` (Leviathan et al., 2023). With
   ``q_aware`` off, drafts are verified as deterministic (q = 1; also lossless, lower acceptance).

Stores are keyed by the prompt's tokens (:class:`PromptStores`): the ``n`` samples of one request and
repeated requests with the same prompt share one store (best-of-N); a request's state is released when
it leaves the batch. vLLM's prefill computes no logits for prompt positions, so the stores learn from
generated positions only; the copy chain covers the prompt.

Options: :data:`stand_runtime.vllm.options.DEFAULT_OPTIONS`, read from ``STAND_VLLM_OPTIONS``.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from ..sizing.value import COPY_NGRAM, match_rate
from ..drafters.chain import KINDS, ChainCursor, ChainDraft
from ..drafters.chain_budget import FORWARD_SIZES, ChainBudget, default_profile, profile_function
from ..drafters.suffix_index import MAX_MATCH, NativeSuffixIndex, SuffixIndex, copy_index, repeated
from ..sizing.latency_model import LatencyModel
from ..errors import StandError
from ..drafters.feeds import STORE_TOP_K, LogitsFeed, store_params
from ..files import write_json_atomic
from ..limits import MAX_TEMPERATURE, MIN_TEMPERATURE, SEED_LIMIT
from ..store.native_store import store_class, update_sequences
from ..store.ngram_store import NGramStore
from ..randomness import RandomStream, drafting_seed
from ..target.sampling import SamplingParams
from .options import DEFAULT_OPTIONS, OPTIONS_ENV, load_prior, proposer_summary, read_options
from .runner_access import LOG, BatchRow, RunnerAccess, StepLogits, check_version, find_runner

__all__ = ["DEFAULT_OPTIONS", "OPTIONS_ENV", "PromptStores", "StandProposer", "read_options"]

_GREEDY_EPS = 1e-5  # vLLM samples greedily below this temperature

FALLBACK_ENTRIES = 200_000
"""Contexts per table of the fallback store (least recently updated evicted)."""


class PromptStores:
    """One n-gram store per prompt (docs/vllm.md §7.3), least recently used dropped beyond ``max_prompts``.

    Args:
        max_prompts: stores kept at most.
        max_n: longest n-gram context (tokens) of each store.
        store_type: the stores' class (:func:`stand_runtime.store.native_store.store_class`).
    """

    def __init__(self, max_prompts: int, max_n: int, store_type: type[NGramStore] = NGramStore) -> None:
        self.max_prompts = max_prompts
        self.max_n = max_n
        self.store_type = store_type
        self._stores: OrderedDict[tuple[int, ...], NGramStore] = OrderedDict()
        self.created = 0

    def get(self, prompt: tuple[int, ...]) -> NGramStore:
        """The store of ``prompt`` (made on first use)."""
        store = self._stores.get(prompt)
        if store is None:
            store = self._stores[prompt] = self.store_type(top_k=STORE_TOP_K, max_n=self.max_n)
            self.created += 1
            while len(self._stores) > self.max_prompts:
                self._stores.popitem(last=False)
        self._stores.move_to_end(prompt)
        return store

    def __len__(self) -> int:
        return len(self._stores)

    def entries(self) -> int:
        """Contexts held by all kept stores."""
        return sum(len(store) for store in self._stores.values())


@dataclass
class _Request:
    """A running request's drafting state; ``last``: its last chain's (scores, kinds), until verified."""

    store: NGramStore
    params: SamplingParams
    randomness: RandomStream | None
    index: SuffixIndex | NativeSuffixIndex | None
    last: tuple[list[float], list[int]] | None = None


def _sampler_top(step: StepLogits, rows: list[int], params: SamplingParams) -> tuple[np.ndarray, np.ndarray] | None:
    """The store observation of ``rows`` (``([n, k] ids, [n, k] float64 probs)``) from the nuclei
    vLLM's sampler cut this step (:mod:`stand_runtime.vllm.cpu032.nuclei`), when it cut every one of
    them and ``params`` is the p it cut (top-p < 1, no top-k); else None."""
    found = step.nuclei
    if found is None or params.greedy or params.top_k or params.top_p >= 1.0 or not rows:
        return None
    index = torch.as_tensor(rows)
    if not bool(found.known[index].all()):
        return None
    return found.ids[index].numpy(), found.probs[index].double().numpy()


def _target_params(row: BatchRow) -> SamplingParams:
    """Our :class:`SamplingParams` for a vLLM request (greedy below vLLM's epsilon)."""
    if row.temperature < _GREEDY_EPS:
        return SamplingParams(temperature=0.0, top_p=1.0, top_k=0)
    return SamplingParams(temperature=min(max(row.temperature, MIN_TEMPERATURE), MAX_TEMPERATURE), top_p=row.top_p, top_k=row.top_k)


def _budget(options: dict) -> ChainBudget:
    """The sized rule: vLLM's measured latency here when given, else flat, corrected by every departure
    of the observed step times (``tolerance`` 1: the profile times plain steps, not the rejection
    sampler's work per drafted token)."""
    latency = options["latency"]
    profile = default_profile if latency is None else profile_function(latency["sizes"], latency["seconds"])
    return ChainBudget(LatencyModel(profile, FORWARD_SIZES, tolerance=1.0))


class StandProposer:
    """vLLM ``custom_class`` proposer drafting STAND chains (see the module docstring).

    Args:
        vllm_config: vLLM's engine configuration; ``speculative_config.num_speculative_tokens`` is
            the chain length K (with ``sized``, the longest chain).

    Raises:
        VLLMInternalsChanged: an unsupported vLLM release line, or an internal it reads moved.
        StandError: bad ``STAND_VLLM_OPTIONS``.
    """

    def __init__(self, vllm_config) -> None:
        check_version()
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.vocab = int(vllm_config.model_config.get_vocab_size())
        self.options = read_options(os.environ.get(OPTIONS_ENV))
        store_type = store_class()
        self.stores = PromptStores(self.options["max_prompts"], self.options["max_n"], store_type)
        self.fallback = (store_type(top_k=STORE_TOP_K, max_n=self.options["max_n"], max_entries_per_n=FALLBACK_ENTRIES)
                         if self.options["fallback"] else None)
        self.budget = _budget(self.options) if self.options["sized"] else None
        self.prior = self._load_prior()
        self._requests: dict[str, _Request] = {}
        self._access: RunnerAccess | None = None
        self._probs: torch.Tensor | None = None  # [rows, K, vocab] q buffer on the logits' device, zero outside _written
        self._written: tuple[torch.Tensor, ...] | None = None  # the (row, position, token) indices written last step
        self._pending: list[tuple[int, int, np.ndarray, np.ndarray]] = []  # this step's q entries, not yet written
        self._feeds: list[tuple] = []  # this step's store updates, merged after every request is fed
        self._called: tuple[float, set[str], bool] | None = None  # the previous call: its start, its decoding
        # requests, and whether they were all decoding in the call before it (no request joined)
        LOG.info("stand-treeopt: STAND proposer loaded: %s", proposer_summary(self.k, self.options))
        self.totals = {"steps": 0, "forwards": 0, "tokens": 0, "drafted": 0, "requests": 0,
                       "requests_without_drafts": 0, "positions_by_kind": [0] * KINDS, "prior_fills": 0,
                       "chain_lengths": [0] * (self.k + 1)}
        self._refused: set[str] = set()  # requests decoded without drafts (see _refuse)

    def load_model(self, model) -> None:
        """vLLM's CPU runner hands the target model here: unused, but the runner is attached now (when it
        is the caller) so that the first step's logits are recorded too."""
        if self._access is None:
            runner = find_runner(self, required=False)
            if runner is not None:
                self._access = RunnerAccess(runner, nucleus_k=STORE_TOP_K)

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings=None) -> list[list[int]]:
        """Feed the stores with the step's verified rows and draft each request's next chain.

        Args:
            sampled_token_ids: per batch row, the tokens this step committed (empty: none, e.g. a
                partial prefill).
            num_tokens_no_spec: ``[>= rows]`` int, committed tokens per row (prompt + output).
            token_ids_cpu: ``[max_num_reqs, max_model_len]`` int32 token ids per row.
            slot_mappings: unused.

        Returns:
            Per batch row, up to K draft token ids (empty: no draft).
        """
        started = time.perf_counter()
        if self._access is None:
            self._access = RunnerAccess(find_runner(self), nucleus_k=STORE_TOP_K)
        access = self._access
        batch = access.batch()
        step = access.take_step()
        offsets = step.row_offsets(len(batch)) if step is not None else None
        self._observe_forward(started, batch, sampled_token_ids, step, offsets)
        self._clear_probs()
        if step is not None:
            self._ensure_probs(len(batch), step.logits.shape[-1], step.logits.device)
        else:
            self._ensure_probs(len(batch), self.vocab, access.device)
        live = {row.req_id for row in batch}
        for req_id in [r for r in self._requests if r not in live]:
            del self._requests[req_id]
        self._refused &= live
        self.totals["steps"] += 1
        observed = self._observe_rows(batch, sampled_token_ids, step, offsets)
        cursors = [self._cursor(i, row, sampled, num_tokens_no_spec, token_ids_cpu, step, observed.get(i))
                   for i, (row, sampled) in enumerate(zip(batch, sampled_token_ids))]
        self._merge_feeds()
        if self.prior is not None:
            self._fill_roots(batch, cursors)
        if self.budget is not None:
            self.budget.allocate(cursors, len(batch))
        drafts = [self._finish(i, cursor, batch[i].req_id) for i, cursor in enumerate(cursors)]
        if self._pending:
            self._flush_probs()
            access.set_draft_probs(self._probs[: len(batch)], [row.req_id for row in batch])
        if self.options["stats_path"]:
            write_json_atomic(self.options["stats_path"], self.stats())
        return drafts

    def _load_prior(self):
        """The successor prior of option ``prior`` (None without one, or with a warning when it covers
        another vocabulary than the target's)."""
        if self.options["prior"] is None:
            return None
        prior = load_prior(self.options["prior"])
        if prior.vocab != self.vocab:
            LOG.warning("STAND drafts without the successor prior %s: it covers %d tokens, the target %d",
                        self.options["prior"], prior.vocab, self.vocab)
            return None
        return prior

    def _fill_roots(self, batch: list[BatchRow], cursors: list) -> None:
        """Give each drafting request's store the prior's row for its root token where neither it nor
        the fallback store has seen that token as a context (:meth:`stand_runtime.drafters.prior.SuccessorPrior.fill`,
        after this step's feeds are merged), for requests sampled with the prior's distribution."""
        for row, cursor in zip(batch, cursors):
            if cursor is None or not 0 <= cursor.root < self.prior.vocab:
                continue
            if self.fallback is not None and self.fallback.match((cursor.root,)) is not None:
                continue
            state = self._requests[row.req_id]
            if self.prior.serves(state.params) and self.prior.fill(state.store, cursor.root):
                self.totals["prior_fills"] += 1

    def _observe_forward(self, started: float, batch: list[BatchRow], sampled_token_ids, step, offsets) -> None:
        """Hand the sized rule the wall time since the previous call against the tokens of the forward
        in between, when that forward decoded only requests that were decoding already (no prefill)
        and the call before it had no request joining either (a new request's first forward runs
        cold: it would make the plain forward look dear)."""
        decoding = {row.req_id for row, sampled in zip(batch, sampled_token_ids) if sampled}
        previous = self._called
        settled = previous is not None and decoding <= previous[1]
        self._called = (started, decoding, settled)
        if self.budget is None or not settled or offsets is None or len(decoding) != len(batch):
            return
        if previous[2]:
            self.budget.observe_forward(int(step.logits.shape[0]), started - previous[0])

    def _observe_rows(self, batch: list[BatchRow], sampled_token_ids, step: StepLogits | None,
                      offsets) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """What the stores record of this step's verified rows, per batch row ``i`` ``([c, k] ids, [c, k]
        probs)`` for its ``c`` committed tokens: one batched top-k per sampling distribution, or the
        top-k the sampler's top-p cut found for those rows (:func:`_sampler_top`)."""
        if offsets is None:
            return {}
        groups: dict[SamplingParams, list[int]] = {}
        for i, (row, sampled) in enumerate(zip(batch, sampled_token_ids)):
            if sampled and row.req_id not in self._refused:
                state = self._requests.get(row.req_id)
                try:
                    params = state.params if state is not None else _target_params(row)
                except (StandError, ValueError, TypeError):  # refused in _cursor, with the reason logged
                    continue
                groups.setdefault(store_params(params), []).append(i)
        observed = {}
        for params, members in groups.items():
            rows = [r for i in members for r in range(offsets[i], offsets[i] + len(sampled_token_ids[i]))]
            ids, probs = _sampler_top(step, rows, params) or LogitsFeed(step.logits, params).top(rows, STORE_TOP_K, params)
            start = 0
            for i in members:
                count = len(sampled_token_ids[i])
                observed[i] = (ids[start: start + count], probs[start: start + count])
                start += count
        return observed

    def _cursor(self, i: int, row: BatchRow, sampled: list[int], num_tokens_no_spec, token_ids_cpu,
                step: StepLogits | None, observed) -> ChainCursor | None:
        """Feed request ``row`` (``observed``: its rows' store observation, or None), learn its last
        chain's outcome, and open its next chain (None: it drafts nothing this step)."""
        if not sampled or row.req_id in self._refused:
            return None
        try:
            state = self._state(row)
        except (StandError, ValueError, TypeError) as error:  # this request only: never the engine
            self._refuse(row.req_id, error)
            return None
        length = int(num_tokens_no_spec[i])
        context = token_ids_cpu[i, :length].tolist()
        self.totals["forwards"] += 1
        self.totals["tokens"] += len(sampled)
        if observed is not None:
            self._feed(state, context, len(sampled), *observed)
            if state.last is not None and self.budget is not None:
                verified = step.num_draft_tokens[i] if step.num_draft_tokens is not None else 0
                scores, kinds = (values[:verified] for values in state.last)
                self.budget.observe_outcome(scores, kinds, min(len(sampled) - 1, len(scores)))
        state.last = None
        room = min(self.k, self.max_model_len - length - 1)
        copy, match = state.index.match(context, room) if state.index is not None and room > 0 else (None, 0)
        copy = repeated(copy, room) if copy else copy  # a chain the context's end cut, continued as a repeat
        return ChainCursor(state.store, context, room, state.randomness, copy, self.fallback,
                           copy_rate=match_rate(match, COPY_NGRAM))

    def _finish(self, i: int, cursor: ChainCursor | None, req_id: str) -> list[int]:
        """Row ``i``'s drafts: a fixed-K chain runs to its end; its q goes to the buffer."""
        if cursor is None:
            return []
        if self.budget is None:
            while cursor.peek() is not None:
                cursor.take()
        chain, state = cursor.draft, self._requests[req_id]
        self.totals["drafted"] += len(chain)
        self.totals["chain_lengths"][len(chain)] += 1
        for kind in chain.kinds:
            self.totals["positions_by_kind"][kind] += 1
        if chain.tokens:
            state.last = (chain.scores, chain.kinds)
            if not state.params.greedy and self.options["q_aware"]:
                self._write_probs(i, chain, drawn=state.randomness is not None)
        return chain.tokens

    def _refuse(self, req_id: str, error: Exception) -> None:
        """Decode request ``req_id`` without drafts from now on and say why once in vLLM's log."""
        self._refused.add(req_id)
        self.totals["requests_without_drafts"] += 1
        LOG.warning("STAND drafts nothing for request %s: %s", req_id, " ".join(str(error).split()))

    def _state(self, row: BatchRow) -> _Request:
        state = self._requests.get(row.req_id)
        if state is None:
            params = _target_params(row)
            stochastic = self.options["stochastic"] and not params.greedy
            # the drafting noise needs a seed in [0, 2**64); any int a client sends (vLLM takes -1 and
            # other negatives) folds into that range, mixed (drafting_seed) so that it is not the seed of
            # vLLM's own generator. The drafts repeat per seed only from the same store: a request sent
            # again drafts from what the prompt's earlier requests taught
            seed = None if row.seed is None else drafting_seed(int(row.seed) % SEED_LIMIT)
            randomness = RandomStream.seeded(seed) if stochastic else None
            index = copy_index(COPY_NGRAM, MAX_MATCH) if self.options["copy"] else None
            state = self._requests[row.req_id] = _Request(self.stores.get(tuple(row.prompt)), params, randomness, index)
            self.totals["requests"] += 1
        return state

    def _feed(self, state: _Request, context: list[int], committed: int, ids: np.ndarray, probs: np.ndarray) -> None:
        """Queue p at the ``committed`` verified positions for the request's store and the fallback
        store: row r of ``ids``, ``probs`` (``[committed, k]``) follows ``context[: len(context) - committed + r]``."""
        start = len(context) - committed - 1
        for store in (state.store, self.fallback):
            if store is not None:
                self._feeds.append((store, context, range(start, start + committed), ids, probs))

    def _merge_feeds(self) -> None:
        """Merge this step's queued observations into their stores, in request order
        (:func:`stand_runtime.store.native_store.update_sequences`), before any chain is drafted."""
        feeds, self._feeds = self._feeds, []
        update_sequences(feeds)

    def _ensure_probs(self, rows: int, vocab: int, device: torch.device) -> None:
        """A zeroed float32 q buffer of at least ``[rows, K, vocab]`` on the logits' ``device`` (grown by doubling)."""
        probs = self._probs
        if probs is None or probs.shape[0] < rows or probs.shape[-1] != vocab or probs.device != device:
            rows = max(rows, 8 if probs is None else 2 * probs.shape[0])
            # on CPU numpy's zeros is calloc: the OS maps zero pages as rows are written (torch.zeros
            # writes all of it up front)
            self._probs = (torch.from_numpy(np.zeros((rows, self.k, vocab), dtype=np.float32)) if device.type == "cpu"
                           else torch.zeros((rows, self.k, vocab), dtype=torch.float32, device=device))
            self._written = None

    def _write_probs(self, row: int, chain: ChainDraft, drawn: bool) -> None:
        """Queue the chain's q rows for batch row ``row``: the distribution each token was drawn from when
        ``drawn``, else (copied tokens, ``stochastic`` off) one-hot on the token."""
        for j, (token, support) in enumerate(zip(chain.tokens, chain.support)):
            one_hot = support is None or not drawn
            self._pending.append((row, j, np.array([token]) if one_hot else support[0],
                                  np.ones(1) if one_hot else support[1]))

    def _flush_probs(self) -> None:
        """Write the queued q entries into the buffer in one indexed copy to its device."""
        pending, self._pending = self._pending, []
        sizes = [len(ids) for _, _, ids, _ in pending]
        index = (np.repeat([row for row, _, _, _ in pending], sizes), np.repeat([j for _, j, _, _ in pending], sizes),
                 np.concatenate([ids for _, _, ids, _ in pending]))
        device = self._probs.device
        self._written = tuple(torch.from_numpy(i.astype(np.int64)).to(device) for i in index)
        values = torch.from_numpy(np.concatenate([q for _, _, _, q in pending]).astype(np.float32)).to(device)
        self._probs.index_put_(self._written, values)

    def _clear_probs(self) -> None:
        """Zero the q entries written for the previous step (the runner has copied them by now)."""
        self._pending = []
        if self._written is not None:
            self._probs.index_put_(self._written, torch.zeros((), dtype=torch.float32, device=self._probs.device))
            self._written = None

    def stats(self) -> dict:
        """Counters since the engine started (JSON-ready): steps, forwards, committed and drafted tokens,
        drafted positions per kind, chains per length, requests, stores and their contexts, and with
        ``sized`` the rule's state."""
        stats = {**self.totals, "stores_created": self.stores.created, "stores_kept": len(self.stores),
                 "store_entries": self.stores.entries(), "running": len(self._requests), "k": self.k,
                 "fallback_entries": len(self.fallback) if self.fallback is not None else 0, "options": self.options}
        if self.budget is not None:
            stats["sized"] = self.budget.stats()
        return stats
