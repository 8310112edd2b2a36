"""Test-time-scaling search drivers over the decoding-backend seam: best-of-N and DVTS, the settings of a
search (:class:`SearchSettings`) and what it found per problem (:class:`ProblemResult`).

- **best-of-N**: N samples of each problem in one request (decoded ``max_batch`` rows at a time by
  the backend), final answer by majority vote.
- **DVTS**, Diverse Verifier Tree Search (Beeching, Tunstall, Rush 2024, "Scaling test-time compute
  with open models"; HF ``search-and-learn``): N beams split into ``subtrees`` independent subtrees of
  M = N / subtrees candidates. Each round, every unfinished subtree's current path is extended by M
  candidate steps (a step ends at ``"\\n\\n"`` or EOS, or at the step budget), the verifier scores
  them, and the best continues; until every subtree ends or the round/token budget runs out. Final
  answer by majority vote over the subtrees' answers.

All candidates of a round go to the backend as one batch of requests (one per subtree, n = M, each
prompt the problem plus the subtree's chosen steps as token ids, so nothing is re-tokenised); every
request of one problem names the problem as its memory ``group``, so STAND's store is shared by the
whole search of that problem. :func:`search_window` searches several problems together
(``SearchSettings.in_flight``): their requests (DVTS: each round's, the problems in lockstep) go to
the backend in one call, whose batch then refills a finished row's place from any of them. Seeds
depend only on a problem's index, so a problem draws the same seeds however many are in flight: its
texts repeat for plain decoding. With drafts they may not: when the batch has fewer slots than the
problem has rows, its rows start at other steps and feed the problem's shared store in another
order, and a value-sized tree's batch allocation cuts a row's draft by the other rows' drafts; the
texts then differ, from the same law (lossless either way). The drivers only see
:class:`stand_runtime.DecodingBackend`, so any engine behind the seam serves them.
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

from ..data.datasets import Prompt
from .ceiling import merge_depths
from .answers import extract_answer, majority_vote, normalise
from .verifiers import Candidate, Verifier, check_scores, make_verifier


def _seed(settings: SearchSettings, offset: int) -> int | None:
    return None if settings.seed is None else settings.seed + offset


def best_of_n(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, index: int = 0,
              on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """N samples of ``problem`` and their majority answer (see the module docstring).

    Raises:
        StandError: settings that are not a best-of-N SearchSettings, a problem that is not a Prompt,
            a bad index or callback, and what :func:`search_window` raises.
    """
    check_single_search("best-of-n", problem, settings, index, on_tokens)
    return search_window(backend, tokenizer, [problem], settings, None, None, index, on_tokens)[0]


def dvts(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, verifier: Verifier,
         vocab: int, index: int = 0, on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """DVTS on ``problem`` (see the module docstring).

    Args:
        backend: the decoding backend (its method decodes every candidate).
        tokenizer: the target's tokenizer (prompt ids, step texts).
        verifier: scores candidate steps (a Verifier, or what :func:`make_verifier` takes).
        vocab: the target's vocabulary size.

    Raises:
        StandError: settings that are not a DVTS SearchSettings, a problem that is not a Prompt, a bad
            index, callback or verifier, and what :func:`search_window` raises.
    """
    check_single_search("dvts", problem, settings, index, on_tokens)
    if verifier is None:
        raise StandError("DVTS needs a verifier")
    verifier = make_verifier(verifier)
    return search_window(backend, tokenizer, [problem], settings, verifier, vocab, index, on_tokens)[0]


def check_single_search(strategy: str, problem, settings, index, on_tokens=None) -> int:
    """Check one problem's search by ``strategy`` before it decodes; returns ``index`` as an int.

    Raises:
        StandError: settings that are not a SearchSettings of ``strategy`` (the functions for one
            strategy do not take the other's), a problem that is not a Prompt, an index that is not an
            int >= 0, seeds past 2**64 - 1 for it, or an ``on_tokens`` that is not callable.
    """
    if not isinstance(settings, SearchSettings):
        raise StandError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    if strategy is not None and settings.strategy != strategy:
        raise StandError(f"these settings are for {settings.strategy!r}, not {strategy!r} "
                         f"(search_problem picks the strategy from the settings)")
    if not isinstance(problem, Prompt):
        raise StandError(f"problem must be a Prompt (treeopt.data.datasets.Prompt), got {type(problem).__name__}")
    index = check_int("index (the problem's number)", index, 0)
    check_callable("on_tokens", on_tokens)
    settings.check_seeds(index + 1)
    return index


def search_window(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                  verifier: Verifier | None, vocab: int | None, first: int = 0,
                  on_tokens: Callable[[int], None] | None = None,
                  prompt_ids: Sequence[list[int]] | None = None) -> list[ProblemResult]:
    """``problems`` (indices ``first``, ``first + 1``, ...) searched together by ``settings.strategy``
    (module docstring); one result each, their wall time shared by tokens.

    Args:
        prompt_ids: each problem's prompt ids as :func:`encode_problems` gave them (already checked);
            None encodes and checks them here.

    Raises:
        StandError: a problem whose prompt cannot be encoded or whose budget does not fit the model's
            context (before any decoding), a verifier's bad scores, and what the backend raises.
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
    """Each problem's prompt as token ids (chat template applied), encoded once for every check and
    decode of it, and checked before any problem decodes: a prompt that cannot be encoded, or whose
    prompt plus ``settings.max_new_tokens`` (a best-of-N sample's budget, a DVTS path's) exceeds the
    context, is refused now, not at its late turn hours into a run.

    Raises:
        StandError: ``problem <id>: <why>`` (one line), the first offending problem.
    """
    check_backend(backend)
    vocab = None if vocab is None else check_int("vocab", vocab, 1)
    encoded = []
    for problem in problems:
        ids = _prompt_ids(tokenizer, problem, vocab)
        _check_fits(backend, problem, DecodeRequest(ids, max_new_tokens=settings.max_new_tokens,
                                                    sampling=settings.sampling))
        encoded.append(ids)
    return encoded


def check_backend(backend) -> None:
    """Raises StandError unless ``backend`` has a ``generate`` (a :class:`stand_runtime.DecodingBackend`)."""
    if not callable(getattr(backend, "generate", None)):
        raise StandError(f"backend must be a DecodingBackend (e.g. HFBackend), not {type(backend).__name__}")


def _prompt_ids(tokenizer, problem: Prompt, vocab: int | None) -> list[int]:
    """``problem``'s prompt as token ids (chat template applied).

    Raises:
        StandError: ``problem <id>: <why it cannot be encoded>``.
    """
    try:
        return encode_prompt(tokenizer, problem.text, vocab)
    except StandError as error:
        raise StandError(f"problem {problem.id}: {error}") from None


def _check_fits(backend: DecodingBackend, problem: Prompt, request: DecodeRequest) -> None:
    """Refuse ``request`` before any decoding where the backend can say it will not serve it (a
    prompt plus budget beyond the context), naming the problem.

    Raises:
        StandError: ``problem <id>: <the backend's reason>``.
    """
    check = getattr(backend, "check_request", None)
    if check is not None:
        try:
            check(request)
        except StandError as error:
            raise StandError(f"problem {problem.id}: {error}") from None


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
    """What a search does per problem.

    Attributes:
        strategy: ``"best-of-n"`` or ``"dvts"``.
        n: samples (best-of-N) or beams (DVTS), >= 1.
        subtrees: DVTS subtrees (divides n; M = n / subtrees candidates per subtree and round).
        max_new_tokens: token budget per sample (best-of-N) or per subtree path (DVTS).
        step_tokens: DVTS: token budget of one step.
        max_rounds: DVTS: rounds at most.
        sampling: the target sampling distribution.
        seed: base seed (None = nondeterministic).
        in_flight: problems searched together (>= 1): their requests go to the backend in one call
            (DVTS: each round's), so a batch refills a finished row's place from any of them
            (continuous batching) instead of running out at each problem's end; their wall time is
            shared among them by tokens (:func:`treeopt.evaluate.strategies.search_window`).

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
        """:meth:`check_seeds`, and raises StandError when ``in_flight`` exceeds ``problems`` (a whole
        run's count: the setting would be recorded and never take effect)."""
        if self.in_flight > problems:
            raise StandError(f"--in-flight {self.in_flight} is more than the {counted(problems, 'problem')} searched: "
                             "at most that many can share the batch")
        self.check_seeds(problems)

    def check_seeds(self, problems: int) -> None:
        """Raises StandError when a search of ``problems`` problems would seed a sample past 2**64 - 1
        (checked before the first problem, not when the late one is reached)."""
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
        id, reference: the problem's id and reference answer (None when it has none).
        answers: the final answer of every sample (best-of-N) or subtree (DVTS).
        texts: their full texts.
        answer: the majority answer; correct: whether it matches the reference (None: no reference).
        tokens: tokens generated, every candidate included (the compute spent).
        forwards: target forwards summed over rows (tokens / forwards = acceptance length).
        seconds: wall time of the problem's search (searched with others, ``in_flight`` > 1: its
            share of their wall time, by tokens).
        rounds: DVTS rounds run (1 for best-of-N).
        depths: acceptance per draft depth over every step of every candidate
            (:func:`stand_runtime.engine.metrics.acceptance_by_depth` rows, counts summed).
        drafted: drafted nodes over every step of every row; steps: those steps (drafted / steps =
            drafted tokens per row and step).
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
