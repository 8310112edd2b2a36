"""Test-time-scaling searches over a dataset: each problem (or window of ``in_flight`` problems) by
best-of-N or DVTS (:mod:`treeopt.evaluate.strategies`), every decoding method interleaved, and their
summaries and report."""

from __future__ import annotations

from typing import Callable, Sequence

from stand_runtime import DecodingBackend, StandError
from stand_runtime.checks import check_callable

from ..data.datasets import Prompt, check_prompt_list
from .ceiling import ceiling, depth_rates, merge_depths
from .strategies import STEP_DELIMITER, STRATEGIES, ProblemResult, SearchSettings
from .strategies import best_of_n, check_single_search, dvts, encode_problems, search_window
from .verifiers import Verifier, make_verifier

__all__ = ["STEP_DELIMITER", "STRATEGIES", "ProblemResult", "SearchSettings", "best_of_n", "compare_methods", "dvts",
           "method_backends", "parse_search_methods", "run_search", "search_problem", "search_report", "summarize"]


def search_problem(backend: DecodingBackend, tokenizer, problem: Prompt, settings: SearchSettings,
                   verifier: Verifier | None, vocab: int | None, index: int = 0,
                   on_tokens: Callable[[int], None] | None = None) -> ProblemResult:
    """One problem by ``settings.strategy``: :func:`dvts` (needs ``verifier`` and ``vocab``) or :func:`best_of_n`.

    Raises:
        StandError: not a SearchSettings or a Prompt, DVTS without a verifier, a seed that runs past
            2**64 - 1 for this problem.
    """
    index = check_single_search(None, problem, settings, index, on_tokens)
    verifier = _start(settings, [problem], verifier, index + 1, on_tokens=on_tokens)
    return search_window(backend, tokenizer, [problem], settings, verifier, vocab, index, on_tokens)[0]


def run_search(backend: DecodingBackend, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
               verifier: Verifier | None = None, vocab: int | None = None,
               on_tokens: Callable[[int], None] | None = None,
               on_problem: Callable[[ProblemResult], None] | None = None) -> list[ProblemResult]:
    """Run the search on every problem, in order (``settings.in_flight`` at a time).

    Raises:
        StandError: no problems, DVTS without a verifier, or a problem whose prompt cannot be encoded
            or does not fit the context with its budget (before any decoding).
    """
    problems = _check_problems(problems)
    verifier = _start(settings, problems, verifier, on_tokens=on_tokens, on_problem=on_problem)
    ids = encode_problems(backend, tokenizer, problems, settings, vocab)  # every one before the first decodes
    results = []
    for first, window in _windows(problems, settings.in_flight):
        for result in search_window(backend, tokenizer, window, settings, verifier, vocab, first, on_tokens,
                                    ids[first: first + len(window)]):
            results.append(result)
            if on_problem is not None:
                on_problem(result)
    return results


def _check_problems(problems) -> list[Prompt]:
    """``problems`` as a list: non-empty, of :class:`Prompt`, with distinct ids (a search shares a drafter
    memory per id and keys results by it).

    Raises:
        StandError: anything else.
    """
    if isinstance(problems, (list, tuple)) and not problems:
        raise StandError("the search needs at least one problem (the dataset is empty)")
    return check_prompt_list(problems, "problems")


def _start(settings: SearchSettings, problems, verifier, seeded: int | None = None, **callbacks) -> Verifier | None:
    """Check a search before its first problem (settings, problems, callbacks, the seeds of the first
    ``seeded`` problems, None = all); the verifier DVTS scores with.

    Raises:
        StandError: a bad setting, problem or callback, seeds past 2**64 - 1, DVTS without a verifier.
    """
    _check_search(settings, problems, **callbacks)
    settings.check_seeds(len(problems) if seeded is None else seeded)
    if settings.strategy != "dvts":
        return verifier
    if verifier is None:
        raise StandError("DVTS needs a verifier")
    return make_verifier(verifier)


def _windows(problems: Sequence[Prompt], size: int):
    """``(index of the first, problems)`` for consecutive windows of ``size`` problems."""
    for first in range(0, len(problems), size):
        yield first, list(problems[first: first + size])


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
                    prior=None, verification: str = "invariant") -> dict:
    """One :class:`stand_runtime.HFBackend` per method (``tree`` only for the methods that take it;
    ``prior``: the successor prior STAND drafts with, :mod:`stand_runtime.drafters.prior`;
    ``verification``: :data:`stand_runtime.verify.VERIFICATION_RULES`)."""
    from stand_runtime import HFBackend, Method
    from stand_runtime.drafters import STORE_METHODS, takes_tree

    return {name: HFBackend(target, tokenizer, Method.parse(name, tree if takes_tree(name, tree) else None, target,
                                                            max_batch, prior=prior if name in STORE_METHODS else None,
                                                            verification=verification),
                            max_batch=max_batch)
            for name in names}


def compare_methods(backends: dict, tokenizer, problems: Sequence[Prompt], settings: SearchSettings,
                    verifier: Verifier | None, vocab: int | None,
                    on_search: Callable[[str], None] | None = None,
                    on_problem: Callable[[dict], None] | None = None,
                    on_tokens: Callable[[int], None] | None = None) -> dict[str, list[ProblemResult]]:
    """Every problem searched by every backend (label → backend), interleaved problem by problem (window
    by window of ``settings.in_flight`` problems) so machine drift hits all methods alike.

    Args:
        on_search: called with the label after each (window, method) search.
        on_problem: called with the results so far (label → results) after each window.
        on_tokens: called with the count of tokens each decoding step of any method commits.

    Returns:
        label → one :class:`ProblemResult` per problem.

    Raises:
        StandError: as :func:`run_search`, or no backends, before any decoding.
    """
    problems = _check_problems(problems)
    if not isinstance(backends, dict) or not backends:
        raise StandError("backends must be a non-empty dict of label -> DecodingBackend")
    verifier = _start(settings, problems, verifier, on_search=on_search, on_problem=on_problem, on_tokens=on_tokens)
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
    finished, as a run saves after each), a summary per method, every problem's result and, given the
    run's latency profile (a :class:`stand_runtime.target.latency.LatencyProfile`), that profile and
    per drafting method its ceiling at ``batch`` rows per forward (:func:`.ceiling.ceiling` of its
    measured acceptance per depth: ``{"speedup", "chain", "batch"}``); ``forwards``: per value-sized
    method its :class:`.reliability.ForwardLog`, summarised as ``"batched_sizing"`` (predicted against
    observed tokens per second by the width the rule chose)."""
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
