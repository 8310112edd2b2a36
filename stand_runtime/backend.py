"""The decoding-backend seam: one small protocol that benchmarks, calibration and search drive.

A backend continues prompts: "here are requests (a prompt, n samples, sampling parameters, a token
budget, stop strings, whether to record p); give me the completions with their statistics". The
decoding method (``stand``, ``pld``, ``ar``, ...) and its drafter memory belong to the backend, so a
driver never touches an engine's internals. :class:`HFBackend` implements it on the Hugging Face
engine (:func:`stand_runtime.generate`), the exact reference; a vLLM or batched engine implements the
same :class:`DecodingBackend` protocol.

Memory sharing follows the STAND paper's best-of-N setting (§3.1): the n samples of one request share
one drafter memory (the n-gram store, Token Recycling's matrix); requests that name the same
``group`` share one (every request of one problem in a tree search); ``share_memory=True`` shares one
across every request the backend ever serves.

With ``max_batch > 1`` the samples of every request are decoded together, ``max_batch`` rows per
target forward (:func:`stand_runtime.batch_decode.decode_rows`); rows sharing a memory then share it
online (what one row verified this step, another drafts from next step).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from .batch_decode import RowSpec, auto_node_cap, check_max_nodes, decode_rows
from .batch_sampling import RecordedDistributions, sample_recorded
from .decode import check_budget, generate
from .drafters import Memory, check_method, method_tree, new_memory
from .errors import StandError
from .metrics import DecodeStats
from .model_facts import check_model, check_positions, default_eos_ids, vocab_size
from .prompts import encode_prompt
from .randomness import SEED_LIMIT, check_seed
from .sampling import SamplingParams
from .stopping import check_stop_strings


@dataclass(frozen=True)
class DecodeRequest:
    """One prompt to continue ``n`` times.

    Attributes:
        prompt: text (through the chat template) or token ids.
        n: samples (>= 1); sample i is seeded with ``seed + i``.
        max_new_tokens: token budget per sample.
        sampling: the target sampling distribution.
        seed: seed of sample 0 (None = nondeterministic).
        stop: strings that end a sample once its text contains one.
        record_probs: also return the target's distributions at every position
            (:class:`stand_runtime.batch_sampling.RecordedDistributions`).
        ignore_eos: decode every sample to ``max_new_tokens`` (equal lengths for speed comparisons;
            ``Completion.text`` then stops at the first EOS).
        logprobs: also return each generated token's log-probability (``Completion.logprobs``).
        group: requests naming the same group share one drafter memory (e.g. a problem's id in a
            tree search); None = the request's own memory (shared by its n samples).

    Raises:
        StandError: n < 1, a bad budget, seed or stop string.
    """

    prompt: str | Sequence[int]
    n: int = 1
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    record_probs: bool = False
    ignore_eos: bool = False
    logprobs: bool = False
    group: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise StandError(f"n (samples per prompt) must be an integer >= 1, got {self.n!r}")
        check_budget(self.max_new_tokens)
        check_seed(self.seed)
        if self.seed is not None and self.seed + self.n - 1 >= SEED_LIMIT:
            raise StandError(f"seed {self.seed} + {self.n} samples runs past 2**64")
        if not isinstance(self.sampling, SamplingParams):
            raise StandError(f"sampling must be a SamplingParams, not {type(self.sampling).__name__}")
        if self.group is not None and not isinstance(self.group, str):
            raise StandError(f"group must be a string or None, got {self.group!r}")
        for name in ("record_probs", "ignore_eos", "logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise StandError(f"{name} must be True or False, got {getattr(self, name)!r}")
        object.__setattr__(self, "stop", check_stop_strings(self.stop))

    def seed_of(self, sample: int) -> int | None:
        """The seed of sample ``sample`` (None when the request is unseeded)."""
        return None if self.seed is None else self.seed + sample


@dataclass
class Completion:
    """One sample of a request.

    Attributes:
        prompt_ids: the prompt's token ids.
        tokens: generated token ids (EOS included when it ended the sample).
        text: ``tokens`` decoded.
        finish_reason: ``"eos"``, ``"stop"`` or ``"length"``.
        stats: decoding statistics (acceptance length, time split, drafter memory).
        recorded: the target's distributions along the sample, when the request asked for them.
        logprobs: per generated token its log-probability, when the request asked for them.
    """

    prompt_ids: list[int]
    tokens: list[int]
    text: str
    finish_reason: str | None
    stats: DecodeStats
    recorded: RecordedDistributions | None = None
    logprobs: list[float] | None = None


MEMORY_GROUPS = 64
"""Drafter memories an :class:`HFBackend` keeps for request groups (least recently used dropped)."""

OnCompletion = Callable[[int, int, Completion], None]
"""Called as ``on_completion(request_index, sample_index, completion)`` when a sample is done."""

OnTokens = Callable[[int], None]
"""Called with the number of tokens generated since its last call (progress)."""


class DecodingBackend(Protocol):
    """Anything that continues prompts with one decoding method (see the module docstring)."""

    def generate(self, requests: Sequence[DecodeRequest], *, on_completion: OnCompletion | None = None,
                 on_tokens: OnTokens | None = None) -> list[list[Completion]]:
        """Continue every request; returns, per request, its n completions in sample order.

        Raises:
            StandError: a request the backend cannot serve (one line, before decoding it).
        """


class HFBackend:
    """:class:`DecodingBackend` on the Hugging Face engine.

    Args:
        model, tokenizer: the target (see :func:`stand_runtime.load_model`).
        method: the decoding method (:data:`stand_runtime.drafters.METHODS`).
        tree: the static tree of a tree method (resolved once here); None = the method's default.
        feed_rejected, diagnose: STAND options (see :func:`stand_runtime.generate`).
        share_memory: one drafter memory for every request instead of one per request.
        batch_size: rows sampled together for ``record_probs`` requests (batched plain sampling).
        max_batch: rows decoded together per target forward (1 = one sample after another through
            :func:`stand_runtime.generate`; more = :func:`stand_runtime.batch_decode.decode_rows`).
        max_nodes: with ``max_batch > 1``, cap on drafted nodes per row and step (None = none;
            ``"auto"`` = the tree's size when it was sized for the batch, see
            :func:`stand_runtime.batch_decode.auto_node_cap`).

    Requests with ``record_probs`` are sampled by batched plain decoding (method ``ar`` only, no stop
    strings); the others are decoded by the method, ``max_batch`` rows at a time.

    Raises:
        StandError: an unknown method, a bad tree, or an option the method does not take.
    """

    def __init__(self, model, tokenizer, method: str = "ar", *, tree=None, feed_rejected: bool = False,
                 diagnose: bool = False, share_memory: bool = False, batch_size: int = 8, max_batch: int = 1,
                 max_nodes: int | str | None = "auto") -> None:
        check_model(model)
        check_method(method, tree=tree, feed_rejected=feed_rejected)
        for name, value in (("batch_size", batch_size), ("max_batch", max_batch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StandError(f"{name} must be an integer >= 1, got {value!r}")
        if diagnose and max_batch > 1:
            raise StandError("diagnose runs one sample at a time: use max_batch 1")
        self.model = model
        self.tokenizer = tokenizer
        self.method = method
        self.tree = method_tree(method, tree, model, batch=max_batch)
        self.feed_rejected = feed_rejected
        self.diagnose = diagnose
        self.batch_size = batch_size
        self.max_batch = max_batch
        check_max_nodes(max_nodes)
        self.max_nodes = auto_node_cap(method, tree, self.tree, max_batch) if max_nodes == "auto" else max_nodes
        self.shared_memory: Memory | None = new_memory(method, vocab_size(model), self.tree) if share_memory else None
        self._groups: OrderedDict[str, Memory | None] = OrderedDict()

    def memory_for(self, request: DecodeRequest) -> Memory | None:
        """The drafter memory ``request`` decodes with: the backend's shared one, its group's (made
        on first use, least recently used dropped beyond :data:`MEMORY_GROUPS`), or a fresh one."""
        if self.shared_memory is not None:
            return self.shared_memory
        if request.group is None:
            return new_memory(self.method, vocab_size(self.model), self.tree)
        if request.group not in self._groups:
            self._groups[request.group] = new_memory(self.method, vocab_size(self.model), self.tree)
            while len(self._groups) > MEMORY_GROUPS:
                self._groups.popitem(last=False)
        self._groups.move_to_end(request.group)
        return self._groups[request.group]

    def generate(self, requests: Sequence[DecodeRequest], *, on_completion: OnCompletion | None = None,
                 on_tokens: OnTokens | None = None) -> list[list[Completion]]:
        if isinstance(requests, DecodeRequest) or not isinstance(requests, (list, tuple)):
            raise StandError("generate takes a list of DecodeRequest")
        if not all(isinstance(r, DecodeRequest) for r in requests):
            bad = next(r for r in requests if not isinstance(r, DecodeRequest))
            raise StandError(f"generate takes a list of DecodeRequest, got an item {type(bad).__name__}")
        recorded = [r for r in requests if r.record_probs]
        if recorded and self.method != "ar":
            raise StandError(f"record_probs needs method 'ar' (batched plain sampling), not {self.method!r}")
        if any(r.stop for r in recorded):
            raise StandError("record_probs requests take no stop strings")
        out: list[list[Completion]] = [[] for _ in requests]
        if recorded:
            self._sample_recorded([i for i, r in enumerate(requests) if r.record_probs], requests, out,
                                  on_completion, on_tokens)
        decoded = [i for i, r in enumerate(requests) if not r.record_probs]
        if self.max_batch > 1:
            self._decode_batched(decoded, requests, out, on_completion, on_tokens)
        else:
            for index in decoded:
                out[index] = self._decode(index, requests[index], on_completion, on_tokens)
        return out

    def _eos_for(self, request: DecodeRequest) -> list[int]:
        return [] if request.ignore_eos else default_eos_ids(self.model, self.tokenizer)

    def _completion(self, request: DecodeRequest, prompt: list[int], result) -> Completion:
        text = result.text
        if request.ignore_eos and self.tokenizer is not None:
            eos = default_eos_ids(self.model, self.tokenizer)
            first = next((i for i, token in enumerate(result.tokens) if token in eos), len(result.tokens))
            text = self.tokenizer.decode(result.tokens[:first], skip_special_tokens=True)
        return Completion(prompt, result.tokens, text, result.finish_reason, result.stats, logprobs=result.logprobs)

    def _decode(self, index: int, request: DecodeRequest, on_completion, on_tokens) -> list[Completion]:
        memory = self.memory_for(request)
        prompt = encode_prompt(self.tokenizer, request.prompt, vocab_size(self.model))
        stream = None if on_tokens is None else (lambda tokens: on_tokens(len(tokens)))
        completions = []
        for sample in range(request.n):
            result = generate(
                self.model, self.tokenizer, prompt, method=self.method, tree=self.tree,
                sampling=request.sampling, max_new_tokens=request.max_new_tokens, seed=request.seed_of(sample),
                store=memory, feed_rejected=self.feed_rejected, diagnose=self.diagnose, stop=request.stop,
                on_tokens=stream, eos_token_ids=self._eos_for(request), logprobs=request.logprobs,
            )
            completion = self._completion(request, prompt, result)
            completions.append(completion)
            if on_completion is not None:
                on_completion(index, sample, completion)
        return completions

    def _decode_batched(self, indices: list[int], requests, out, on_completion, on_tokens) -> None:
        vocab = vocab_size(self.model)
        rows: list[tuple[int, int, RowSpec]] = []
        for index in indices:
            request = requests[index]
            memory = self.memory_for(request)
            prompt = encode_prompt(self.tokenizer, request.prompt, vocab)
            out[index] = [None] * request.n
            for sample in range(request.n):
                rows.append((index, sample, RowSpec(prompt, request.sampling, request.seed_of(sample),
                                                    request.max_new_tokens, memory, request.stop,
                                                    self._eos_for(request), request.logprobs)))
        for start in range(0, len(rows), self.max_batch):
            chunk = rows[start: start + self.max_batch]

            def finished(position: int, result, chunk=chunk) -> None:
                index, sample, spec = chunk[position]
                completion = self._completion(requests[index], spec.prompt, result)
                out[index][sample] = completion
                if on_completion is not None:
                    on_completion(index, sample, completion)

            decode_rows(self.model, self.tokenizer, [spec for _, _, spec in chunk], method=self.method,
                        tree=self.tree, feed_rejected=self.feed_rejected, max_nodes=self.max_nodes,
                        on_tokens=on_tokens, on_finish=finished)

    def _sample_recorded(self, indices: list[int], requests, out, on_completion, on_tokens) -> None:
        vocab = vocab_size(self.model)
        eos = default_eos_ids(self.model, self.tokenizer)
        by_params: dict[tuple, list[tuple[int, int]]] = {}
        for index in indices:  # rows of one batch share sampling parameters and budget
            request = requests[index]
            key = (request.sampling, request.max_new_tokens)
            by_params.setdefault(key, []).extend((index, sample) for sample in range(request.n))
        for (params, budget), rows in by_params.items():
            prompts = [encode_prompt(self.tokenizer, requests[i].prompt, vocab) for i, _ in rows]
            for prompt in prompts:
                check_positions(self.model, len(prompt), budget)
            seeds = [requests[i].seed_of(s) for i, s in rows]
            sampled = sample_recorded(self.model, prompts, params, budget, eos, seeds, self.batch_size, on_tokens)
            for (index, sample), seq in zip(rows, sampled):
                stats = DecodeStats(prompt_tokens=len(seq.prompt))
                for _ in seq.tokens:
                    stats.record_step(1, 0, 0, True)
                finish = "eos" if seq.tokens and seq.tokens[-1] in eos else "length"
                text = self.tokenizer.decode(seq.tokens, skip_special_tokens=True) if self.tokenizer is not None else ""
                completion = Completion(seq.prompt, seq.tokens, text, finish, stats, seq.recorded)
                out[index].append(completion)
                if on_completion is not None:
                    on_completion(index, sample, completion)
