"""STAND as a vLLM speculative proposer (``speculative_config={"method": "custom_class", ...}``).

Per running request, every engine step:

1. **feed**: the target's p at the positions the step verified (the root and the accepted drafts),
   after the request's temperature / top-p / top-k as vLLM samples it (for greedy requests the
   softmax), top-10, into the request's n-gram store (STAND paper §3.1);
2. **draft**: a chain of up to K tokens from the store (:func:`stand_runtime.drafters.chain.draft_chain`),
   each drawn from q by Gumbel-Top-1 at temperature > 0, q's most likely token for greedy requests;
   where the store misses, prompt lookup's copy chain continues it (one-hot q);
3. **q to the verifier**: the chain's draft distributions go to vLLM's rejection sampler, which then
   accepts with ``min(1, p/q)`` and resamples from ``max(p - q, 0)`` (lossless for drafts drawn
   from q; Leviathan et al., 2023). With ``q_aware`` off, drafts are verified as deterministic
   (q = 1; also lossless, lower acceptance).

Stores are keyed by the prompt's tokens: the ``n`` samples of one request (``SamplingParams(n=16)``)
and repeated requests with the same prompt share one store (best-of-N), at most ``max_prompts``
stores are kept (least recently used dropped), and a request's state is released when it leaves the
batch. vLLM's prefill computes no logits for prompt positions, so the store learns from generated
positions only; the copy chain covers the prompt.

Options come from the environment variable ``STAND_VLLM_OPTIONS`` (JSON, read in the engine
process; :func:`stand_runtime.vllm.speculative_config` sets it): ``stochastic`` (bool, default
true; false drafts q's top tokens, verified with a one-hot q), ``q_aware`` (bool, true), ``copy`` (bool, true), ``max_prompts`` (int, 64), ``max_n``
(int, 3), ``stats_path`` (a JSON file the proposer rewrites after every step; default none).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from ..checks import check_int
from ..drafters.chain import ChainDraft, draft_chain
from ..drafters.suffix_index import SuffixIndex
from ..errors import StandError
from ..drafters.feeds import STORE_TOP_K, LogitsFeed, feed_store
from ..files import check_writable, parse_json_object, write_json_atomic
from ..limits import MAX_PROMPT_STORES
from ..store.ngram_store import MAX_CONTEXT, NGramStore
from ..randomness import SEED_LIMIT, RandomStream
from ..target.sampling import MIN_TEMPERATURE, SamplingParams
from .runner_access import LOG, BatchRow, RunnerAccess, StepLogits, check_version, find_runner

OPTIONS_ENV = "STAND_VLLM_OPTIONS"
DEFAULT_OPTIONS = {"stochastic": True, "q_aware": True, "copy": True, "max_prompts": 64, "max_n": 3,
                   "stats_path": None}
OPTION_LIMITS = {"max_prompts": (1, MAX_PROMPT_STORES), "max_n": (1, MAX_CONTEXT)}
"""Integer options and their ranges (checked when the config is built, before vLLM starts)."""
_GREEDY_EPS = 1e-5  # vLLM samples greedily below this temperature


def read_options(text: str | None) -> dict:
    """The proposer's options: :data:`DEFAULT_OPTIONS` updated from JSON ``text``.

    Raises:
        StandError: not a JSON object, an unknown option, or a value of the wrong type.
    """
    options = dict(DEFAULT_OPTIONS)
    if text is not None and not isinstance(text, (str, bytes, bytearray)):
        raise StandError(f"{OPTIONS_ENV} must be JSON text, got {type(text).__name__}")
    if not text:
        return options
    given = parse_json_object(text, OPTIONS_ENV)
    for name, value in given.items():
        if name not in DEFAULT_OPTIONS:
            raise StandError(f"unknown STAND vLLM option {name!r} (valid: {', '.join(DEFAULT_OPTIONS)})")
        if name in OPTION_LIMITS:
            check_int(f"STAND vLLM option {name}", value, *OPTION_LIMITS[name])
        if name in ("stochastic", "q_aware", "copy") and not isinstance(value, bool):
            raise StandError(f"STAND vLLM option {name} must be true or false, got {value!r}")
        if name == "stats_path" and value is not None:
            if not isinstance(value, str) or not value:
                raise StandError(f"STAND vLLM option stats_path must be a path or null, got {value!r}")
            try:
                check_writable(value)
            except StandError as error:
                raise StandError(f"STAND vLLM option stats_path: {error}") from None
        options[name] = value
    return options


def proposer_summary(k: int, options: dict) -> str:
    """The proposer's settings in words (the line it logs when vLLM loads it)."""
    return (f"chains of up to {k} draft tokens per request and step (fixed K); one store per prompt, contexts "
            f"up to {options['max_n']} tokens, at most {options['max_prompts']} prompts kept; "
            f"{'Gumbel draws from q' if options['stochastic'] else 'q' + chr(39) + 's top tokens'} at temperature > 0, "
            f"{'q-aware' if options['q_aware'] else 'q = 1'} verification, copy chain "
            f"{'on' if options['copy'] else 'off'}")


class PromptStores:
    """One n-gram store per prompt, least recently used dropped beyond ``max_prompts``.

    Args:
        max_prompts: stores kept at most.
        max_n: longest n-gram context (tokens) of each store.
    """

    def __init__(self, max_prompts: int, max_n: int) -> None:
        self.max_prompts = max_prompts
        self.max_n = max_n
        self._stores: OrderedDict[tuple[int, ...], NGramStore] = OrderedDict()
        self.created = 0

    def get(self, prompt: tuple[int, ...]) -> NGramStore:
        """The store of ``prompt`` (made on first use)."""
        store = self._stores.get(prompt)
        if store is None:
            store = self._stores[prompt] = NGramStore(top_k=STORE_TOP_K, max_n=self.max_n)
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
    """A running request's drafting state."""

    store: NGramStore
    params: SamplingParams
    randomness: RandomStream | None
    index: SuffixIndex | None


def _target_params(row: BatchRow) -> SamplingParams:
    """Our :class:`SamplingParams` for a vLLM request (greedy below vLLM's epsilon)."""
    if row.temperature < _GREEDY_EPS:
        return SamplingParams(temperature=0.0, top_p=1.0, top_k=0)
    return SamplingParams(temperature=max(row.temperature, MIN_TEMPERATURE), top_p=row.top_p, top_k=row.top_k)


class StandProposer:
    """vLLM ``custom_class`` proposer drafting STAND chains (see the module docstring).

    Args:
        vllm_config: vLLM's engine configuration; ``speculative_config.num_speculative_tokens`` is
            the chain length K.

    Raises:
        VLLMInternalsChanged: an untested vLLM release line.
        StandError: bad ``STAND_VLLM_OPTIONS``.
    """

    def __init__(self, vllm_config) -> None:
        check_version()
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.vocab = int(vllm_config.model_config.get_vocab_size())
        self.options = read_options(os.environ.get(OPTIONS_ENV))
        self.stores = PromptStores(self.options["max_prompts"], self.options["max_n"])
        self._requests: dict[str, _Request] = {}
        self._access: RunnerAccess | None = None
        self._probs: torch.Tensor | None = None  # [rows, K, vocab] q buffer, zero outside _written
        self._written: list[tuple[int, int, np.ndarray]] = []
        LOG.info("stand-treeopt: STAND proposer loaded: %s", proposer_summary(self.k, self.options))
        self.totals = {"steps": 0, "forwards": 0, "tokens": 0, "drafted": 0, "requests": 0,
                       "requests_without_drafts": 0}
        self._refused: set[str] = set()  # requests decoded without drafts (see _refuse)

    def load_model(self, model) -> None:
        """vLLM's CPU runner hands the target model here; STAND drafts without it, but attaches to
        the runner now (when it is the caller) so that the first step's logits are recorded too."""
        if self._access is None:
            runner = find_runner(self, required=False)
            if runner is not None:
                self._access = RunnerAccess(runner)

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
        if self._access is None:
            self._access = RunnerAccess(find_runner(self))
        access = self._access
        batch = access.batch()
        step = access.take_step()
        offsets = step.row_offsets(len(batch)) if step is not None else None
        self._clear_probs()
        self._ensure_probs(len(batch), step.logits.shape[-1] if step is not None else self.vocab)
        live = {row.req_id for row in batch}
        for req_id in [r for r in self._requests if r not in live]:
            del self._requests[req_id]
        self._refused &= live
        self.totals["steps"] += 1
        drafts: list[list[int]] = []
        for i, (row, sampled) in enumerate(zip(batch, sampled_token_ids)):
            if not sampled or row.req_id in self._refused:
                drafts.append([])
                continue
            try:
                state = self._state(row)
            except (StandError, ValueError, TypeError) as error:  # this request only: never the engine
                self._refuse(row.req_id, error)
                drafts.append([])
                continue
            length = int(num_tokens_no_spec[i])
            context = token_ids_cpu[i, :length].tolist()
            self.totals["forwards"] += 1
            self.totals["tokens"] += len(sampled)
            if offsets is not None:
                self._feed(state, context, len(sampled), step, offsets[i])
            chain = self._draft(state, context, length)
            self.totals["drafted"] += len(chain)
            if chain.tokens and not state.params.greedy and self.options["q_aware"]:
                self._write_probs(i, chain, drawn=state.randomness is not None)
            drafts.append(chain.tokens)
        if self._written:
            access.set_draft_probs(self._probs[: len(batch)], [row.req_id for row in batch])
        if self.options["stats_path"]:
            write_json_atomic(self.options["stats_path"], self.stats())
        return drafts

    def _refuse(self, req_id: str, error: Exception) -> None:
        """Decode request ``req_id`` without drafts from now on (plain decoding: still its exact
        output) and say why once in vLLM's log."""
        self._refused.add(req_id)
        self.totals["requests_without_drafts"] += 1
        LOG.warning("STAND drafts nothing for request %s: %s", req_id, " ".join(str(error).split()))

    def _state(self, row: BatchRow) -> _Request:
        state = self._requests.get(row.req_id)
        if state is None:
            params = _target_params(row)
            stochastic = self.options["stochastic"] and not params.greedy
            # the drafting noise needs a seed in [0, 2**64); any int a client sends (vLLM takes -1 and
            # other negatives) folds into that range: drafts stay reproducible per seed, and lossless
            seed = None if row.seed is None else int(row.seed) % SEED_LIMIT
            randomness = RandomStream.seeded(seed) if stochastic else None
            index = SuffixIndex() if self.options["copy"] else None
            state = self._requests[row.req_id] = _Request(self.stores.get(tuple(row.prompt)), params, randomness, index)
            self.totals["requests"] += 1
        return state

    def _feed(self, state: _Request, context: list[int], committed: int, step: StepLogits, first_row: int) -> None:
        """Record p at the ``committed`` verified positions: rows ``first_row ..`` of the step predict
        the tokens after ``context[: len(context) - committed + r]``."""
        feed = LogitsFeed(step.logits[first_row: first_row + committed], state.params)
        start = len(context) - committed - 1
        feed_store(state.store, context, range(start, start + committed), feed, range(committed), state.params)

    def _draft(self, state: _Request, context: list[int], length: int) -> ChainDraft:
        room = min(self.k, self.max_model_len - length - 1)
        if room <= 0:
            return ChainDraft()
        copy = state.index.continuation(context, room) if state.index is not None else None
        return draft_chain(state.store, context, room, state.randomness, copy)

    def _ensure_probs(self, rows: int, vocab: int) -> None:
        """A zeroed q buffer of at least ``[rows, K, vocab]`` (grown by doubling)."""
        if self._probs is None or self._probs.shape[0] < rows or self._probs.shape[-1] != vocab:
            rows = max(rows, 8 if self._probs is None else 2 * self._probs.shape[0])
            self._probs = torch.zeros(rows, self.k, vocab, dtype=torch.float32)
            self._written = []

    def _write_probs(self, row: int, chain: ChainDraft, drawn: bool) -> None:
        """Write the chain's q rows into the q buffer at batch row ``row``: the distribution each
        token was drawn from when ``drawn``; one-hot on the token for copied tokens and for
        deterministic drafts (``stochastic`` off), the deterministic-draft rule."""
        for j, (token, support) in enumerate(zip(chain.tokens, chain.support)):
            one_hot = support is None or not drawn
            ids = np.array([token]) if one_hot else support[0]
            q = np.ones(1) if one_hot else support[1]
            self._probs[row, j, torch.from_numpy(ids)] = torch.from_numpy(q.astype(np.float32))
            self._written.append((row, j, ids))

    def _clear_probs(self) -> None:
        """Zero the q entries written for the previous step (the runner has copied them by now)."""
        for row, j, ids in self._written:
            self._probs[row, j, torch.from_numpy(ids)] = 0.0
        self._written = []

    def stats(self) -> dict:
        """Counters since the engine started (JSON-ready): steps, per-request forwards, committed
        tokens and drafted tokens in total, requests seen, stores made and kept, store contexts."""
        return {**self.totals, "stores_created": self.stores.created, "stores_kept": len(self.stores),
                "store_entries": self.stores.entries(), "running": len(self._requests), "k": self.k,
                "options": self.options}
