"""What a test-time-scaling search is asked to do and what it returns per problem: :class:`SearchSettings`
and :class:`ProblemResult` (the drivers: :mod:`treeopt.evaluate.strategies`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stand_runtime import SamplingParams, StandError
from stand_runtime.checks import check_int
from stand_runtime.errors import counted
from stand_runtime.limits import MAX_SAMPLES
from stand_runtime.randomness import check_seed, check_seed_span

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
