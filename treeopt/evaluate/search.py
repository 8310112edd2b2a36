"""Test-time-scaling search drivers over the decoding-backend seam: best-of-N and DVTS.

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
whole search of that problem. The drivers only see :class:`stand_runtime.DecodingBackend`, so any
engine behind the seam serves them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from stand_runtime import DecodeRequest, DecodingBackend, SamplingParams, StandError
from stand_runtime.target.prompts import encode_prompt
from stand_runtime.checks import check_callable, check_int
from stand_runtime.limits import MAX_SAMPLES
from stand_runtime.randomness import check_seed, check_seed_span

from .answers import extract_answer, majority_vote, normalise
from ..data.datasets import Prompt
from .verifiers import Candidate, Verifier, check_scores, make_verifier

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

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise StandError(f"unknown strategy {self.strategy!r} (valid: {', '.join(STRATEGIES)})")
        for name in ("n", "subtrees", "max_new_tokens", "step_tokens", "max_rounds"):
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

    def check_seeds(self, problems: int) -> None:
        """Raises StandError when a search of ``problems`` problems would seed a sample past 2**64 - 1
        (checked before the first problem, not when the late one is reached)."""
        per_problem = self.n if self.strategy == "best-of-n" else self.max_rounds * self.n
        check_seed_span(self.seed, problems * per_problem, f"samples ({problems} problems x {per_problem})")

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
        seconds: wall time of the problem's search.
        rounds: DVTS rounds run (1 for best-of-N).
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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _seed(settings: SearchSettings, offset: int) -> int | None:
    return None if settings.seed is None else settings.seed + offset


def best_of_n(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, index: int = 0,
              on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """N samples of ``problem`` and their majority answer (see the module docstring)."""
    start = time.perf_counter()
    request = DecodeRequest(problem.text, n=settings.n, max_new_tokens=settings.max_new_tokens,
                            sampling=settings.sampling, seed=_seed(settings, index * settings.n), group=problem.id)
    completions = backend.generate([request], on_tokens=on_tokens)[0]
    texts = [c.text for c in completions]
    return _finish(problem, texts, completions, 1, start)


def dvts(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings, verifier: Verifier,
         vocab: int, index: int = 0, on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """DVTS on ``problem`` (see the module docstring).

    Args:
        backend: the decoding backend (its method decodes every candidate).
        tokenizer: the target's tokenizer (prompt ids, step texts).
        verifier: scores candidate steps.
        vocab: the target's vocabulary size.
    """
    start = time.perf_counter()
    prompt = encode_prompt(tokenizer, problem.text, vocab)
    check = getattr(backend, "check_request", None)
    if check is not None:  # the whole path's budget fits the context: refuse now, not in a late round
        try:
            check(DecodeRequest(prompt, max_new_tokens=settings.max_new_tokens, sampling=settings.sampling))
        except StandError as error:
            raise StandError(f"problem {problem.id}: {error}") from None
    paths: list[list[int]] = [[] for _ in range(settings.subtrees)]
    steps: list[list[str]] = [[] for _ in range(settings.subtrees)]
    done = [False] * settings.subtrees
    completions_seen = []
    rounds = 0
    while not all(done) and rounds < settings.max_rounds:
        active = [s for s in range(settings.subtrees) if not done[s]]
        requests = [DecodeRequest(prompt + paths[s], n=settings.candidates,
                                  max_new_tokens=min(settings.step_tokens, settings.max_new_tokens - len(paths[s])),
                                  sampling=settings.sampling, stop=(STEP_DELIMITER,), logprobs=True, group=problem.id,
                                  seed=_seed(settings, (index * settings.max_rounds + rounds) * settings.n
                                             + s * settings.candidates))
                    for s in active]
        outputs = backend.generate(requests, on_tokens=on_tokens)
        for s, completions in zip(active, outputs):
            completions_seen.extend(completions)
            candidates = [Candidate(c.text, c.tokens, c.logprobs) for c in completions]
            scores = check_scores(verifier, verifier.score(problem.text, steps[s], candidates), len(candidates))
            best = max(range(len(candidates)), key=lambda i: scores[i])
            paths[s] += completions[best].tokens
            steps[s].append(completions[best].text)
            if completions[best].finish_reason == "eos" or len(paths[s]) >= settings.max_new_tokens:
                done[s] = True
        rounds += 1
    texts = [tokenizer.decode(path, skip_special_tokens=True) if tokenizer is not None else "" for path in paths]
    return _finish(problem, texts, completions_seen, rounds, start)


def _finish(problem: Prompt, texts: list[str], completions, rounds: int, start: float) -> ProblemResult:
    answers = [extract_answer(t) for t in texts]
    answer = majority_vote(answers)
    reference = None if problem.answer is None else normalise(str(problem.answer))
    correct = None if reference is None else answer == reference
    tokens = sum(len(c.tokens) for c in completions)
    forwards = sum(c.stats.target_forwards for c in completions)
    return ProblemResult(problem.id, reference, answers, texts, answer, correct, tokens, forwards,
                         time.perf_counter() - start, rounds)


def search_problem(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings,
                   verifier: Verifier | None, vocab: int | None, index: int = 0,
                   on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """One problem by ``settings.strategy``: :func:`dvts` (needs ``verifier`` and ``vocab``) or :func:`best_of_n`.

    Raises:
        StandError: not a SearchSettings or a Prompt, DVTS without a verifier, a seed that runs past
            2**64 - 1 for this problem.
    """
    _check_search(settings, [problem], on_tokens=on_tokens)
    settings.check_seeds(index + 1)
    if settings.strategy == "dvts":
        if verifier is None:
            raise StandError("DVTS needs a verifier")
        verifier = make_verifier(verifier)
        return dvts(backend, tokenizer, problem, settings, verifier, vocab, index, on_tokens)
    return best_of_n(backend, tokenizer, problem, settings, index, on_tokens)


def run_search(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
               verifier: Verifier | None = None, vocab: int | None = None,
               on_tokens: Callable[[int], None] | None = None,
               on_problem: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
    """Run the search on every problem, in order.

    Raises:
        StandError: no problems, or DVTS without a verifier.
    """
    if isinstance(problems, Prompt) or not isinstance(problems, (list, tuple)):
        raise StandError(f"problems must be a list of Prompt, got {type(problems).__name__}")
    if not problems:
        raise StandError("the search needs at least one problem (the dataset is empty)")
    _check_search(settings, problems, on_tokens=on_tokens, on_problem=on_problem)
    settings.check_seeds(len(problems))
    if settings.strategy == "dvts":
        if verifier is None:
            raise StandError("DVTS needs a verifier")
        verifier = make_verifier(verifier)
    results = []
    for index, problem in enumerate(problems):
        result = search_problem(backend, tokenizer, problem, settings, verifier, vocab, index, on_tokens)
        results.append(result)
        if on_problem is not None:
            on_problem(result)
    return results


def _check_search(settings, problems, **callbacks) -> None:
    if not isinstance(settings, SearchSettings):
        raise StandError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    for i, problem in enumerate(problems):
        if not isinstance(problem, Prompt):
            raise StandError(f"problem {i} must be a Prompt (treeopt.data.datasets.Prompt), got {type(problem).__name__} "
                             f"{problem!r:.60}")
    for name, callback in callbacks.items():
        check_callable(name, callback)


def summarize(results: Sequence[ProblemResult]) -> dict:
    """Totals over problems: accuracy (with counts), tokens, forwards, acceptance length, tokens/s."""
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
    }


def parse_search_methods(methods: str, tree: str | None = None) -> list[str]:
    """Method names of ``search --methods``, with ``tree`` checked against the methods that take it.

    Raises:
        StandError: an empty list, an unknown or repeated method, or a tree no listed method takes
            (or a bad tree spec).
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
                    allocation: str = "batch", prior=None) -> dict:
    """One :class:`stand_runtime.HFBackend` per method (``tree`` only for the methods that take it;
    ``allocation``: how a value-sized tree is sized in a batch, :meth:`stand_runtime.Method.parse`;
    ``prior``: the successor prior STAND drafts with, :mod:`stand_runtime.drafters.prior`)."""
    from stand_runtime import HFBackend, Method
    from stand_runtime.drafters import STORE_METHODS, takes_tree

    return {name: HFBackend(target, tokenizer, Method.parse(name, tree if takes_tree(name, tree) else None, target,
                                                            max_batch, allocation=allocation,
                                                            prior=prior if name in STORE_METHODS else None),
                            max_batch=max_batch)
            for name in names}


def compare_methods(backends: dict, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                    verifier: Verifier | None, vocab: int | None,
                    on_search: Callable[[str], None] | None = None,
                    on_problem: Callable[[dict], None] | None = None) -> dict[str, list[ProblemResult]]:
    """Every problem searched by every backend (label → backend), interleaved problem by problem so
    machine drift hits all methods alike.

    Args:
        on_search: called with the label after each (problem, method) search.
        on_problem: called with the results so far (label → results) after each problem.

    Returns:
        label → one :class:`ProblemResult` per problem.
    """
    results: dict[str, list[ProblemResult]] = {name: [] for name in backends}
    for index, problem in enumerate(problems):
        for name, backend in backends.items():
            results[name].append(search_problem(backend, tokenizer, problem, settings, verifier, vocab, index))
            if on_search is not None:
                on_search(name)
        if on_problem is not None:
            on_problem(results)
    return results


def search_report(settings: dict, results: dict[str, list[ProblemResult]]) -> dict:
    """The ``search --json`` document: the settings (with ``problems_done``: problems every method has
    finished, as a run saves after each), a summary per method, and every problem's result."""
    done = min((len(rows) for rows in results.values()), default=0)
    return {"settings": {**settings, "problems_done": done},
            "summary": {name: summarize(rows) for name, rows in results.items() if rows},
            "problems": {name: [r.as_dict() for r in rows] for name, rows in results.items()}}
