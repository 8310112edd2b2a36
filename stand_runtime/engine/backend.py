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
across every request the backend ever serves; ``cross_prompt=True`` keeps one cross-prompt memory under
every request's (or group's) own: a STAND store drafts over it (:class:`stand_runtime.NGramStore`'s
``base``), another method's memory is the one memory.

With ``max_batch > 1`` the samples of every request are decoded together, ``max_batch`` rows per
target forward (:func:`stand_runtime.engine.decode.decode_rows`); rows sharing a memory then share it
online (what one row verified this step, another drafts from next step).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from .decode import decode_rows
from .batch_sampling import RecordedDistributions, sample_recorded
from ..checks import check_bool, check_callable, check_int
from .decode import generate
from ..drafters import Memory
from ..method import Method, as_method
from ..sizing.session import SizingSession, check_sizing
from .row import RowSpec, check_budget
from ..errors import StandError
from ..limits import MAX_ROWS, MAX_SAMPLES
from .metrics import DecodeStats, GenerationResult
from ..target.model_facts import check_model, check_positions, check_tokenizer, default_eos_ids, vocab_size
from ..target.kv_cache import PrefixCache
from ..target.prompts import check_prompt, encode_prompt
from ..randomness import check_seed, check_seed_span
from ..target.sampling import SamplingParams
from .stopping import check_stop_strings, text_before_stop


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
            (:class:`stand_runtime.engine.batch_sampling.RecordedDistributions`).
        ignore_eos: decode every sample to ``max_new_tokens`` (equal lengths for speed comparisons;
            ``Completion.text`` then stops at the first EOS).
        logprobs: also return each generated token's log-probability (``Completion.logprobs``).
        group: requests naming the same group share one drafter memory (e.g. a problem's id in a
            tree search); None = the request's own memory (shared by its n samples).

    Raises:
        StandError: an empty prompt or one of another type, n < 1, a bad budget, seed or stop string.
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
        check_prompt(self.prompt)
        object.__setattr__(self, "n", check_int("n (samples per prompt)", self.n, 1, MAX_SAMPLES))
        object.__setattr__(self, "max_new_tokens", check_budget(self.max_new_tokens))
        check_seed(self.seed)
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
            check_seed_span(self.seed, self.n, "samples")
        if not isinstance(self.sampling, SamplingParams):
            raise StandError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__} {self.sampling!r}")
        if self.group is not None and (not isinstance(self.group, str) or not self.group):
            raise StandError(f"group must be a non-empty string or None, got {self.group!r}")
        for name in ("record_probs", "ignore_eos", "logprobs"):
            object.__setattr__(self, name, check_bool(name, getattr(self, name)))
        object.__setattr__(self, "stop", check_stop_strings(self.stop))
        if self.record_probs and self.logprobs:
            raise StandError("record_probs and logprobs cannot be combined: a record_probs request returns the "
                             "recorded distributions (their log gives each token's log-probability under p)")
        if self.record_probs and self.stop:
            raise StandError("record_probs requests take no stop strings")

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


RECORD_BATCH = 8
"""Rows sampled together for ``record_probs`` requests by default (:class:`HFBackend`'s ``batch_size``)."""

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
        method: a :class:`stand_runtime.Method` (its tree, STAND options and ``max_nodes``), or a
            method name parsed with its defaults for ``max_batch`` rows.
        share_memory: one drafter memory for every request instead of one per request.
        cross_prompt: each request's (or group's) STAND store over one cross-prompt memory fed by every
            request (other methods: one memory for every request, as ``share_memory``).
        batch_size: rows sampled together for ``record_probs`` requests (batched plain sampling).
        max_batch: rows decoded together per target forward (1 = one sample after another through
            :func:`stand_runtime.generate`; more = :func:`stand_runtime.engine.decode.decode_rows`).
        sizing: the sizing session of a value-sized tree (``dynamic-auto``), shared by every request;
            None = one made for the model here (:meth:`stand_runtime.SizingSession.for_model`).

    Requests with ``record_probs`` are sampled by batched plain decoding (method ``ar`` only, no stop
    strings); the others are decoded by the method, ``max_batch`` rows at a time, a finished row's place
    taken at once by the next waiting row (continuous batching); a prompt that extends one a batch
    prefilled before (a tree search's next round) is prefilled from it (:attr:`prefixes`). Every request
    decodes with the one method and the one sizing session, so a value-sized tree's rule learns from them
    all; under the drafter-invariant verification (the method's default) a seeded request sent again
    samples the same text, plain decoding's for that seed, whatever the rule drafts (under recursive
    rejection it may sample another, equally distributed, text unless the session is frozen).

    Raises:
        StandError: an unknown method or bad tree (a name), ``diagnose`` or ``max_nodes`` with a
            ``max_batch`` they do not apply to, ``batch_size`` without method ``ar``, ``share_memory``
            with ``cross_prompt``.
    """

    def __init__(self, model, tokenizer, method: Method | str = "ar", *, share_memory: bool = False,
                 batch_size: int = RECORD_BATCH, max_batch: int = 1, sizing: SizingSession | None = None,
                 cross_prompt: bool = False) -> None:
        check_model(model)
        check_tokenizer(tokenizer)
        share_memory = check_bool("share_memory", share_memory)
        if check_bool("cross_prompt", cross_prompt) and share_memory:
            raise StandError("share_memory and cross_prompt both share a memory across requests: choose one")
        batch_size = check_int("batch_size", batch_size, 1, MAX_ROWS)
        max_batch = check_int("max_batch", max_batch, 1, MAX_ROWS)
        method = as_method(method, model, max_batch)
        if method.ablation.diagnose and max_batch > 1:
            raise StandError("diagnose runs one sample at a time: use max_batch 1")
        if method.max_nodes is not None and max_batch == 1:
            raise StandError("max_nodes caps drafts of batched rows: it applies with max_batch > 1")
        if batch_size != RECORD_BATCH and method.name != "ar":
            raise StandError("batch_size applies to record_probs requests, which need method 'ar'")
        self.model = model
        self.tokenizer = tokenizer
        self.method = method
        self.sizing = check_sizing(sizing) if sizing is not None or not method.value_sized else SizingSession.for_model(model)
        self.batch_size = batch_size
        self.max_batch = max_batch
        self.shared_memory: Memory | None = method.new_memory(vocab_size(model)) if share_memory else None
        self.cross_memory: Memory | None = method.new_memory(vocab_size(model)) if cross_prompt else None
        self.prefixes = PrefixCache()  # prompts a batch prefilled, for later prompts that extend them
        self._groups: OrderedDict[str, Memory | None] = OrderedDict()

    def memory_for(self, request: DecodeRequest) -> Memory | None:
        """The drafter memory ``request`` decodes with: the backend's shared one, its group's (made
        on first use, least recently used dropped beyond :data:`MEMORY_GROUPS`), or a fresh one."""
        if self.shared_memory is not None:
            return self.shared_memory
        if request.group is None:
            return self.method.problem_memory(vocab_size(self.model), self.cross_memory)
        if request.group not in self._groups:
            self._groups[request.group] = self.method.problem_memory(vocab_size(self.model), self.cross_memory)
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
        check_callable("on_completion", on_completion)
        check_callable("on_tokens", on_tokens)
        prompts = []  # each request's prompt ids, encoded once: checked here, decoded below
        for index, request in enumerate(requests):
            try:
                prompts.append(self.check_request(request))
            except StandError as error:
                raise StandError(f"request {index}: {error}") from None
        recorded = [r for r in requests if r.record_probs]
        out: list[list[Completion]] = [[] for _ in requests]
        if recorded:
            self._sample_recorded([i for i, r in enumerate(requests) if r.record_probs], requests, prompts, out,
                                  on_completion, on_tokens)
        decoded = [i for i, r in enumerate(requests) if not r.record_probs]
        if self.max_batch > 1:
            self._decode_batched(decoded, requests, prompts, out, on_completion, on_tokens)
        else:
            for index in decoded:
                out[index] = self._decode(index, requests[index], prompts[index], on_completion, on_tokens)
        return out

    def check_request(self, request: DecodeRequest) -> list[int]:
        """Check that this backend can serve ``request`` (before any decoding); returns its prompt ids.

        Raises:
            StandError: not a DecodeRequest, a prompt the tokenizer cannot encode or with ids outside
                the vocabulary, a prompt plus budget beyond the model's context, or ``record_probs``
                with a method other than ``ar``.
        """
        if not isinstance(request, DecodeRequest):
            raise StandError(f"a request must be a DecodeRequest, got {type(request).__name__}")
        if request.record_probs and self.method.name != "ar":
            raise StandError(f"record_probs needs method 'ar' (batched plain sampling), not {self.method.name!r}")
        prompt = encode_prompt(self.tokenizer, request.prompt, vocab_size(self.model))
        check_positions(self.model, len(prompt), request.max_new_tokens)
        return prompt

    def _eos_for(self, request: DecodeRequest) -> list[int]:
        return [] if request.ignore_eos else default_eos_ids(self.model, self.tokenizer)

    def _completion(self, request: DecodeRequest, prompt: list[int], result) -> Completion:
        text = result.text
        if request.ignore_eos and self.tokenizer is not None:
            eos = default_eos_ids(self.model, self.tokenizer)
            first = next((i for i, token in enumerate(result.tokens) if token in eos), len(result.tokens))
            text = self.tokenizer.decode(result.tokens[:first], skip_special_tokens=True)
            if result.finish_reason == "stop":
                text = text_before_stop(text, request.stop)
        return Completion(prompt, result.tokens, text, result.finish_reason, result.stats, logprobs=result.logprobs)

    def _decode(self, index: int, request: DecodeRequest, prompt: list[int], on_completion, on_tokens
                ) -> list[Completion]:
        memory = self.memory_for(request)
        stream = None if on_tokens is None else (lambda step: on_tokens(len(step.tokens)))
        completions = []
        for sample in range(request.n):
            result = generate(
                self.model, self.tokenizer, prompt, method=self.method, sampling=request.sampling,
                max_new_tokens=request.max_new_tokens, seed=request.seed_of(sample), store=memory,
                stop=request.stop, on_step=stream, eos_token_ids=self._eos_for(request), logprobs=request.logprobs,
                sizing=self.sizing,
            )
            completion = self._completion(request, prompt, result)
            completions.append(completion)
            if on_completion is not None:
                on_completion(index, sample, completion)
        return completions

    def _decode_batched(self, indices: list[int], requests, prompts, out, on_completion, on_tokens) -> None:
        rows: list[tuple[int, int, RowSpec]] = []
        for index in indices:
            request, prompt = requests[index], prompts[index]
            memory = self.memory_for(request)
            out[index] = [None] * request.n
            for sample in range(request.n):
                rows.append((index, sample, RowSpec(prompt, request.sampling, request.seed_of(sample),
                                                    request.max_new_tokens, memory, request.stop,
                                                    self._eos_for(request), request.logprobs)))
        for start in range(0, len(rows), MAX_ROWS):  # max_batch rows at a time, a finished row's place refilled
            chunk = rows[start: start + MAX_ROWS]

            def finished(position: int, result, chunk=chunk) -> None:
                index, sample, spec = chunk[position]
                completion = self._completion(requests[index], spec.prompt, result)
                out[index][sample] = completion
                if on_completion is not None:
                    on_completion(index, sample, completion)

            decode_rows(self.model, self.tokenizer, [spec for _, _, spec in chunk], method=self.method,
                        on_tokens=on_tokens, on_finish=finished, slots=self.max_batch, prefixes=self.prefixes,
                        sizing=self.sizing)

    def _sample_recorded(self, indices: list[int], requests, prompt_ids, out, on_completion, on_tokens) -> None:
        eos = default_eos_ids(self.model, self.tokenizer)
        by_params: dict[tuple, list[tuple[int, int]]] = {}
        for index in indices:  # rows of one batch share sampling parameters, budget and EOS rule
            request = requests[index]
            key = (request.sampling, request.max_new_tokens, request.ignore_eos)
            by_params.setdefault(key, []).extend((index, sample) for sample in range(request.n))
        for (params, budget, ignore_eos), rows in by_params.items():
            prompts = [prompt_ids[i] for i, _ in rows]
            seeds = [requests[i].seed_of(s) for i, s in rows]
            ends = [] if ignore_eos else eos
            sampled = sample_recorded(self.model, prompts, params, budget, ends, seeds, self.batch_size, on_tokens)
            for (index, sample), seq in zip(rows, sampled):
                stats = DecodeStats(prompt_tokens=len(seq.prompt))
                for _ in seq.tokens:
                    stats.record_step(1, 0, 0, True)
                finish = "eos" if seq.tokens and seq.tokens[-1] in ends else "length"
                result = GenerationResult(tokens=seq.tokens, text="", stats=stats, finish_reason=finish)
                if self.tokenizer is not None:
                    result.text = self.tokenizer.decode(seq.tokens, skip_special_tokens=True)
                completion = self._completion(requests[index], seq.prompt, result)
                completion.recorded = seq.recorded
                out[index].append(completion)
                if on_completion is not None:
                    on_completion(index, sample, completion)
