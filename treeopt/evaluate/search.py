"""Test-time-scaling search over the decoding-backend seam: best-of-N and DVTS, the settings of a search
(:class:`SearchSettings`), what it found per problem (:class:`ProblemResult`), and searches over a dataset
with every decoding method interleaved, their summaries and report.

- **best-of-N**: N samples of each problem in one request (decoded ``max_batch`` rows at a time by
  the backend), final answer by majority vote.
- **DVTS**, Diverse Verifier Tree Search (Beeching, Tunstall, Rush 2024, "Scaling test-time compute
  with open models"; HF ``search-and-learn``): N beams split into ``subtrees`` independent subtrees of
  M = N / subtrees candidates. Each round, every unfinished subtree's current path is extended by M
  candidate steps (a step ends at ``"\\n\\n"`` or EOS, or at the step budget), the verifier scores
  them, and the best continues; until every subtree ends or the round/token budget runs out. Final
  answer by majority vote over the subtrees' answers.

A round's candidates go to the backend as one batch of requests (one per subtree, n = M, each prompt
the problem plus the subtree's chosen steps as token ids); every request of a problem names it as its
memory ``group``, so STAND's store is shared by the problem's whole search. :func:`search_window`
searches ``SearchSettings.in_flight`` problems together: their requests (DVTS: each round's, in
lockstep) go to the backend in one call, whose batch refills a finished row's place from any of them.
Seeds depend only on a problem's index, so plain decoding's texts repeat however many are in flight;
with drafts they may differ (rows start at other steps and feed the shared store in another order, a
value-sized tree's batch allocation depends on the other rows), from the same law. The drivers see
only :class:`stand_runtime.DecodingBackend`, so any engine behind the seam serves them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from stand_runtime import DecodeRequest, DecodingBackend, SamplingParams, StandError
from stand_runtime.checks import check_callable, check_int
from stand_runtime.engine.metrics import acceptance_by_depth
from stand_runtime.errors import counted
from stand_runtime.limits import MAX_SAMPLES
from stand_runtime.randomness import check_seed, check_seed_span
from stand_runtime.target.prompts import encode_prompt

from ..data.datasets import Prompt, check_prompt_list
from .answers import extract_answer, majority_vote, normalise
from .ceiling import ceiling, depth_rates, merge_depths
from .verifiers import Candidate, Verifier, check_scores, make_verifier

__all__ = ["STEP_DELIMITER", "STRATEGIES", "ProblemResult", "SearchSettings", "best_of_n", "compare_methods", "dvts",
           "method_backends", "parse_search_methods", "run_search", "search_problem", "search_report", "summarize"]


def _seed(settings: SearchSettings, offset: int) -> int | None:
    return None if settings.seed is None else settings.seed + offset


def best_of_n(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, index: int = 0,
              on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """N samples of ``problem`` and their majority answer (module docstring).

    Raises:
        StandError: settings that are not a best-of-N SearchSettings, and what :func:`search_problem` raises.
    """
    return _search_one("best-of-n", backend, tokenizer, problem, settings, None, None, index, on_tokens)


def dvts(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, verifier: Verifier,
         vocab: int, index: int = 0, on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """DVTS on ``problem`` (module docstring); ``verifier`` scores candidate steps (a Verifier, or what
    :func:`make_verifier` takes), ``vocab`` is the target's vocabulary size.

    Raises:
        StandError: settings that are not a DVTS SearchSettings, and what :func:`search_problem` raises.
    """
    return _search_one("dvts", backend, tokenizer, problem, settings, verifier, vocab, index, on_tokens)


def search_problem(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings,
                   verifier: Verifier | None, vocab: int | None, index: int = 0,
                   on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """One problem by ``settings.strategy``: :func:`dvts` (needs ``verifier`` and ``vocab``) or :func:`best_of_n`.

    Raises:
        StandError: not a SearchSettings or a Prompt, a bad index or callback, DVTS without a verifier,
            a seed that runs past 2**64 - 1 for this problem, and what :func:`search_window` raises.
    """
    return _search_one(None, backend, tokenizer, problem, settings, verifier, vocab, index, on_tokens)


def _search_one(strategy, backend, tokenizer, problem, settings, verifier, vocab, index, on_tokens) -> ProblemResult:
    index = check_single_search(strategy, problem, settings, index, on_tokens)
    return search_window(backend, tokenizer, [problem], settings, _verifier(settings, verifier), vocab, index,
                         on_tokens)[0]


def check_single_search(strategy: str | None, problem, settings, index, on_tokens=None) -> int:
    """Check one problem's search by ``strategy`` (None: either) before it decodes; returns ``index`` as an int.

    Raises:
        StandError: settings that are not a SearchSettings of ``strategy`` (the functions for one
            strategy do not take the other's), a problem that is not a Prompt, an index that is not an
            int >= 0, seeds past 2**64 - 1 for it, or an ``on_tokens`` that is not callable.
    """
    _check_settings(settings)
    if strategy is not None and settings.strategy != strategy:
        raise StandError(f"these settings are for {settings.strategy!r}, not {strategy!r} "
                         f"(search_problem picks the strategy from the settings)")
    if not isinstance(problem, Prompt):
        raise StandError(f"problem must be a Prompt (treeopt.data.datasets.Prompt), got {type(problem).__name__}")
    index = check_int("index (the problem's number)", index, 0)
    check_callable("on_tokens", on_tokens)
    settings.check_seeds(index + 1)
    return index


def _check_settings(settings) -> None:
    if not isinstance(settings, SearchSettings):
        raise StandError(f"settings must be a SearchSettings, got {type(settings).__name__}")


def _verifier(settings: SearchSettings, verifier) -> Verifier | None:
    """The verifier DVTS scores with (``verifier`` as given for best-of-N, which scores nothing).

    Raises:
        StandError: DVTS without a verifier, or one :func:`make_verifier` refuses.
    """
    if settings.strategy != "dvts":
        return verifier
    if verifier is None:
        raise StandError("DVTS needs a verifier")
    return make_verifier(verifier)


def _start(problems, settings: SearchSettings, verifier, **callbacks) -> tuple[list[Prompt], Verifier | None]:
    """A search over ``problems`` checked before its first problem decodes; (the problems as a list, the
    verifier DVTS scores with).

    Raises:
        StandError: no problems, or what :func:`treeopt.data.datasets.check_prompt_list` raises (distinct
            ids: a drafter memory and results are keyed by id), a bad setting or callback, seeds past
            2**64 - 1, DVTS without a verifier.
    """
    if isinstance(problems, (list, tuple)) and not problems:
        raise StandError("the search needs at least one problem (the dataset is empty)")
    problems = check_prompt_list(problems, "problems")
    _check_settings(settings)
    for name, callback in callbacks.items():
        check_callable(name, callback)
    settings.check_seeds(len(problems))
    return problems, _verifier(settings, verifier)


def _windows(problems: Sequence[Prompt], size: int):
    """``(index of the first, problems)`` for consecutive windows of ``size`` problems."""
    for first in range(0, len(problems), size):
        yield first, list(problems[first: first + size])


def search_window(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                  verifier: Verifier | None, vocab: int | None, first: int = 0,
                  on_tokens: Callable[[int], None] | None = None,
                  prompt_ids: Sequence[list[int]] | None = None) -> list[ProblemResult]:
    """``problems`` (indices ``first``, ``first + 1``, ...) searched together by ``settings.strategy`` (module
    docstring); one result each, their wall time shared by tokens. ``prompt_ids``: each problem's ids as
    :func:`encode_problems` gave them (None: encoded and checked here).

    Raises:
        StandError: a prompt that cannot be encoded or does not fit the context with its budget (before
            any decoding), a verifier's bad scores, and what the backend raises.
    """
    start = time.perf_counter()
    check_backend(backend)
    ids = encode_problems(backend, tokenizer, problems, settings, vocab) if prompt_ids is None else prompt_ids
    if settings.strategy == "dvts":
        searches = [_Dvts(problem, prompt, settings, first + i) for i, (problem, prompt) in enumerate(zip(problems, ids))]
        _rounds(backend, searches, verifier, on_tokens)
        found = [(search.texts(tokenizer), search.completions, search.rounds) for search in searches]
    else:
        requests = [DecodeRequest(prompt, n=settings.n, max_new_tokens=settings.max_new_tokens, sampling=settings.sampling,
                                  seed=_seed(settings, (first + i) * settings.n), group=problem.id)
                    for i, (problem, prompt) in enumerate(zip(problems, ids))]
        found = [([c.text for c in completions], completions, 1)
                 for completions in backend.generate(requests, on_tokens=on_tokens)]
    seconds = time.perf_counter() - start
    tokens = [sum(len(c.tokens) for c in completions) for _, completions, _ in found]
    total = sum(tokens)
    return [_finish(problem, texts, completions, rounds, seconds * (share / total if total else 1 / len(problems)))
            for problem, (texts, completions, rounds), share in zip(problems, found, tokens)]


def encode_problems(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                    vocab: int | None) -> list[list[int]]:
    """Each problem's prompt as token ids (chat template applied), encoded once and checked before any
    problem decodes: a prompt that cannot be encoded, or that with ``settings.max_new_tokens`` exceeds the
    context (where the backend has a ``check_request``), is refused now, not hours into a run.

    Raises:
        StandError: ``problem <id>: <why>``, the first offending problem.
    """
    check_backend(backend)
    vocab = None if vocab is None else check_int("vocab", vocab, 1)
    check = getattr(backend, "check_request", None)
    encoded = []
    for problem in problems:
        try:
            ids = encode_prompt(tokenizer, problem.text, vocab)
            if check is not None:
                check(DecodeRequest(ids, max_new_tokens=settings.max_new_tokens, sampling=settings.sampling))
        except StandError as error:
            raise StandError(f"problem {problem.id}: {error}") from None
        encoded.append(ids)
    return encoded


def check_backend(backend) -> None:
    """Raises StandError unless ``backend`` has a ``generate`` (a :class:`stand_runtime.DecodingBackend`)."""
    if not callable(getattr(backend, "generate", None)):
        raise StandError(f"backend must be a DecodingBackend (e.g. HFBackend), not {type(backend).__name__}")


class _Dvts:
    """One problem's DVTS between rounds: each subtree's path (token ids) and chosen step texts."""

    def __init__(self, problem: Prompt, prompt: list[int], settings: SearchSettings, index: int) -> None:
        # prompt: its ids, checked to hold the whole path's budget (encode_problems), not in a late round
        self.problem, self.prompt, self.settings, self.index = problem, prompt, settings, index
        self.paths: list[list[int]] = [[] for _ in range(settings.subtrees)]
        self.steps: list[list[str]] = [[] for _ in range(settings.subtrees)]
        self.done = [False] * settings.subtrees
        self.completions: list = []
        self.rounds = 0

    @property
    def running(self) -> bool:
        return not all(self.done) and self.rounds < self.settings.max_rounds

    def requests(self) -> list[tuple[int, DecodeRequest]]:
        """This round's ``(subtree, request)`` for every unfinished subtree."""
        s = self.settings
        return [(t, DecodeRequest(self.prompt + self.paths[t], n=s.candidates,
                                  max_new_tokens=min(s.step_tokens, s.max_new_tokens - len(self.paths[t])),
                                  sampling=s.sampling, stop=(STEP_DELIMITER,), logprobs=True, group=self.problem.id,
                                  seed=_seed(s, (self.index * s.max_rounds + self.rounds) * s.n + t * s.candidates)))
                for t in range(s.subtrees) if not self.done[t]]

    def advance(self, outputs: Sequence[tuple[int, list]], verifier: Verifier) -> None:
        """Score each subtree's candidates (``(subtree, completions)``), keep the best; one round done."""
        for t, completions in outputs:
            self.completions.extend(completions)
            candidates = [Candidate(c.text, c.tokens, c.logprobs) for c in completions]
            scores = check_scores(verifier, verifier.score(self.problem.text, self.steps[t], candidates), len(candidates))
            best = max(range(len(candidates)), key=lambda i: scores[i])
            self.paths[t] += completions[best].tokens
            self.steps[t].append(completions[best].text)
            if completions[best].finish_reason == "eos" or len(self.paths[t]) >= self.settings.max_new_tokens:
                self.done[t] = True
        self.rounds += 1

    def texts(self, tokenizer) -> list[str]:
        return [tokenizer.decode(path, skip_special_tokens=True) if tokenizer is not None else "" for path in self.paths]


def _rounds(backend: DecodingBackend, searches: list[_Dvts], verifier: Verifier, on_tokens) -> None:
    """Run every search's rounds in lockstep, each round's requests of all of them in one call."""
    while True:
        running = [search for search in searches if search.running]
        if not running:
            return
        asked = [(search, t, request) for search in running for t, request in search.requests()]
        outputs = backend.generate([request for _, _, request in asked], on_tokens=on_tokens)
        for search in running:
            search.advance([(t, out) for (owner, t, _), out in zip(asked, outputs) if owner is search], verifier)


def _finish(problem: Prompt, texts: list[str], completions, rounds: int, seconds: float) -> ProblemResult:
    answers = [extract_answer(t) for t in texts]
    answer = majority_vote(answers)
    reference = None if problem.answer is None else normalise(str(problem.answer))
    correct = None if reference is None else answer == reference
    tokens = sum(len(c.tokens) for c in completions)
    forwards = sum(c.stats.target_forwards for c in completions)
    depths = merge_depths([acceptance_by_depth(c.stats.accepted_per_step, c.stats.bonus_per_step) for c in completions])
    drafted = sum(sum(c.stats.drafted_per_step) for c in completions)
    steps = sum(len(c.stats.drafted_per_step) for c in completions)
    return ProblemResult(problem.id, reference, answers, texts, answer, correct, tokens, forwards, seconds, rounds,
                         depths, drafted, steps)


STRATEGIES = ("best-of-n", "dvts")
STEP_DELIMITER = "\n\n"
"""A reasoning step ends with a blank line (search-and-learn's convention)."""


@dataclass
class SearchSettings:
    """What a search does per problem (module docstring).

    Attributes:
        strategy: ``"best-of-n"`` or ``"dvts"``.
        n: samples (best-of-N) or beams (DVTS).
        subtrees: DVTS subtrees (divides n; M = n / subtrees candidates per subtree and round).
        max_new_tokens: token budget per sample (best-of-N) or per subtree path (DVTS); step_tokens:
            DVTS's per step; max_rounds: DVTS's rounds at most.
        seed: base seed (None = nondeterministic).
        in_flight: problems searched together, their wall time shared by tokens (:func:`search_window`).

    Raises:
        StandError: n < 1, subtrees < 1 or not dividing n, budgets < 1, an unknown strategy.
    """

    strategy: str = "best-of-n"
    n: int = 4
    subtrees: int = 1
    max_new_tokens: int = 256
    step_tokens: int = 128
    max_rounds: int = 32
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = 0
    in_flight: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise StandError(f"unknown strategy {self.strategy!r} (valid: {', '.join(STRATEGIES)})")
        for name in ("n", "subtrees", "max_new_tokens", "step_tokens", "max_rounds", "in_flight"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), 1, MAX_SAMPLES if name == "n" else None))
        if self.strategy == "dvts" and self.n % self.subtrees:
            raise StandError(f"subtrees ({self.subtrees}) must divide n ({self.n}) for DVTS")
        if self.strategy != "dvts" and self.subtrees != 1:
            raise StandError(f"subtrees applies to dvts, not {self.strategy}")
        if not isinstance(self.sampling, SamplingParams):
            raise StandError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__} {self.sampling!r}")
        check_seed(self.seed)
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))

    def check_problems(self, problems: int) -> None:
        """:meth:`check_seeds`, and raises StandError when ``in_flight`` exceeds a run's ``problems``
        (the setting would never take effect)."""
        if self.in_flight > problems:
            raise StandError(f"--in-flight {self.in_flight} is more than the {counted(problems, 'problem')} searched: "
                             "at most that many can share the batch")
        self.check_seeds(problems)

    def check_seeds(self, problems: int) -> None:
        """Raises StandError when a search of ``problems`` problems would seed a sample past 2**64 - 1."""
        per_problem = self.n if self.strategy == "best-of-n" else self.max_rounds * self.n
        check_seed_span(self.seed, problems * per_problem, f"samples ({counted(problems, 'problem')} x {per_problem})")

    @property
    def candidates(self) -> int:
        """M: candidates per subtree and round (DVTS)."""
        return self.n // self.subtrees


@dataclass
class ProblemResult:
    """One problem's search.

    Attributes:
        reference: the reference answer (None when it has none).
        answers, texts: the final answer and text of every sample (best-of-N) or subtree (DVTS).
        answer: the majority answer; correct: whether it matches the reference (None: no reference).
        tokens: tokens generated, every candidate included; forwards: target forwards summed over rows.
        seconds: wall time of the search (with ``in_flight`` > 1, its share of the window's, by tokens).
        rounds: DVTS rounds run (1 for best-of-N).
        depths: :func:`stand_runtime.engine.metrics.acceptance_by_depth` rows over every candidate's steps.
        drafted: drafted nodes over every step of every row; steps: those steps.
    """

    id: str
    reference: str | None
    answers: list[str | None]
    texts: list[str]
    answer: str | None
    correct: bool | None
    tokens: int
    forwards: int
    seconds: float
    rounds: int
    depths: list = field(default_factory=list)
    drafted: int = 0
    steps: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(results: Sequence[ProblemResult]) -> dict:
    """Totals over problems: accuracy (with counts), tokens, forwards, acceptance length, tokens/s, the
    acceptance per depth and the drafted tokens per row and step."""
    graded = [r for r in results if r.correct is not None]
    tokens = sum(r.tokens for r in results)
    forwards = sum(r.forwards for r in results)
    seconds = sum(r.seconds for r in results)
    return {
        "problems": len(results),
        "graded": len(graded),
        "correct": sum(bool(r.correct) for r in graded),
        "accuracy": (sum(bool(r.correct) for r in graded) / len(graded)) if graded else None,
        "tokens": tokens,
        "forwards": forwards,
        "acceptance_length": tokens / forwards if forwards else 0.0,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "acceptance_by_depth": merge_depths([r.depths for r in results]),
        "drafted_per_row_step": sum(r.drafted for r in results) / max(1, sum(r.steps for r in results)),
    }


def parse_search_methods(methods: str, tree: str | None = None) -> list[str]:
    """Method names of ``search --methods``, with ``tree`` checked against the methods that take it.

    Raises:
        StandError: what :func:`.method_lists.split_methods` raises, or a tree no listed method takes (or a bad one).
    """
    from stand_runtime import METHODS
    from stand_runtime.drafters import takes_tree
    from stand_runtime.method import check_tree_spec

    from .method_lists import split_methods

    names = split_methods(methods, METHODS)
    if tree is not None and not any(takes_tree(name, tree) for name in names):
        raise StandError(f"--tree {tree} applies to none of {methods!r}")
    for name in names:
        check_tree_spec(name, tree if takes_tree(name, tree) else None)
    return names


def method_backends(target, tokenizer, names: Sequence[str], tree: str | None, max_batch: int,
                    prior=None, verification: str = "invariant", cross_prompt: bool = False) -> dict:
    """One :class:`stand_runtime.HFBackend` per method (``tree`` only for the methods that take it;
    ``prior``: the successor prior STAND drafts with, :mod:`stand_runtime.drafters.prior`;
    ``verification``: :data:`stand_runtime.verify.VERIFICATION_RULES`; ``cross_prompt``: each problem's
    store over one cross-prompt memory, docs/algorithms.md §2.6)."""
    from stand_runtime import HFBackend, Method
    from stand_runtime.drafters import STORE_METHODS, takes_tree

    return {name: HFBackend(target, tokenizer, Method.parse(name, tree if takes_tree(name, tree) else None, target,
                                                            max_batch, prior=prior if name in STORE_METHODS else None,
                                                            verification=verification),
                            max_batch=max_batch, cross_prompt=cross_prompt)
            for name in names}


def compare_methods(backends: dict, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                    verifier: Verifier | None, vocab: int | None,
                    on_search: Callable[[str], None] | None = None,
                    on_problem: Callable[[dict], None] | None = None,
                    on_tokens: Callable[[int], None] | None = None) -> dict[str, list[ProblemResult]]:
    """Every problem searched by every backend (label → backend), interleaved window by window of
    ``settings.in_flight`` problems (machine drift hits all methods alike); label → one
    :class:`ProblemResult` per problem. ``on_search(label)`` after each (window, method) search,
    ``on_problem(results so far)`` after each window, ``on_tokens(count)`` after every decoding step.

    Raises:
        StandError: as :func:`run_search`, or no backends, before any decoding.
    """
    problems, verifier = _start(problems, settings, verifier, on_search=on_search, on_problem=on_problem,
                                on_tokens=on_tokens)
    if not isinstance(backends, dict) or not backends:
        raise StandError("backends must be a non-empty dict of label -> DecodingBackend")
    # one target: the first backend's context is every one's; every prompt before the first decodes
    ids = encode_problems(next(iter(backends.values())), tokenizer, problems, settings, vocab)
    results: dict[str, list[ProblemResult]] = {name: [] for name in backends}
    for first, window in _windows(problems, settings.in_flight):
        for name, backend in backends.items():
            results[name].extend(search_window(backend, tokenizer, window, settings, verifier, vocab, first, on_tokens,
                                               ids[first: first + len(window)]))
            if on_search is not None:
                on_search(name)
        if on_problem is not None:
            on_problem(results)
    return results


def search_report(settings: dict, results: dict[str, list[ProblemResult]], profile=None, batch: int = 1,
                  forwards: dict | None = None) -> dict:
    """The ``search --json`` document: the settings (with ``problems_done``: problems every method has
    finished), a summary per method, every problem's result and, given the run's latency ``profile``, that
    profile and per method its :func:`.ceiling.ceiling` at ``batch`` rows per forward (``{"speedup",
    "chain", "batch"}``); ``forwards``: per value-sized method its :class:`.reliability.ForwardLog`,
    summarised as ``"batched_sizing"``."""
    done = min((len(rows) for rows in results.values()), default=0)
    summary = {name: summarize(rows) for name, rows in results.items() if rows}
    for name, log in (forwards or {}).items():
        if name in summary and log.widths:
            summary[name]["batched_sizing"] = log.summary()
    if profile is not None:
        for row in summary.values():
            rates = depth_rates(row["acceptance_by_depth"])
            if rates:
                speedup, chain = ceiling(rates, profile, batch)
                row["ceiling"] = {"speedup": speedup, "chain": chain, "batch": batch}
    return {"settings": {**settings, "problems_done": done}, "summary": summary,
            "latency_profile": None if profile is None else profile.as_dict(),
            "problems": {name: [r.as_dict() for r in rows] for name, rows in results.items()}}


def run_search(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
               verifier: Verifier | None = None, vocab: int | None = None,
               on_tokens: Callable[[int], None] | None = None,
               on_problem: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
    """Run the search on every problem, in order (``settings.in_flight`` at a time).

    Raises:
        StandError: what :func:`_start` raises, or a problem whose prompt cannot be encoded or does not
            fit the context with its budget (before any decoding).
    """
    problems, verifier = _start(problems, settings, verifier, on_tokens=on_tokens, on_problem=on_problem)
    ids = encode_problems(backend, tokenizer, problems, settings, vocab)  # every one before the first decodes
    results = []
    for first, window in _windows(problems, settings.in_flight):
        for result in search_window(backend, tokenizer, window, settings, verifier, vocab, first, on_tokens,
                                    ids[first: first + len(window)]):
            results.append(result)
            if on_problem is not None:
                on_problem(result)
    return results
