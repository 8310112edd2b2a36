"""Benchmarks: decoding methods side by side on the same prompts, interleaved prompt by prompt.

Each prompt is decoded by every method before the next starts, so machine drift hits all methods
alike; speedups are ratios against ``ar`` in the same run. With N > 1 ``trajectories`` per prompt, a
method's N trajectories share one drafter memory (the STAND paper's best-of-N setting), and prompts
with reference answers get majority-vote accuracy over them. Speed is reported, never asserted by tests.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from stand_runtime import DecodeRequest, HFBackend, METHODS, Method, SamplingParams, SizingSession, StandError
from stand_runtime.drafters import STORE_METHODS, TREE_METHODS
from stand_runtime.drafters.diagnostics import summarise_draft_quality
from stand_runtime.engine.metrics import acceptance_by_depth
from stand_runtime.method import DEFAULT_TREES
from stand_runtime.checks import check_callable, check_int
from stand_runtime.errors import counted
from stand_runtime.engine.row import check_budget
from stand_runtime.randomness import check_seed
from stand_runtime.drafters.prior import method_prior
from stand_runtime.target.model_facts import vocab_size
from stand_runtime.drafters import takes_tree

from .answers import extract_answer, majority_vote, normalise
from ..data.datasets import Prompt, check_prompt_list, check_prompts_fit
from ..optimize.calibrate import MAX_TRAJECTORIES
from .method_lists import split_methods
from .reliability import ReliabilityLog


@dataclass(frozen=True)
class BenchMethod:
    """One decoding configuration: a method of :data:`stand_runtime.METHODS`, the ``tree`` spec as given
    (None: the method's default), STAND fed at rejected nodes too (``feed_rejected``), and ``prior``:
    STAND drafts with the successor prior where :func:`run_bench` gives one (False: ``+noprior``)."""

    method: str
    tree: str | None = None
    feed_rejected: bool = False
    prior: bool = True

    @property
    def tree_name(self) -> str | None:
        """The tree this configuration runs on (the method's default when none was given)."""
        if self.method not in TREE_METHODS:
            return None
        return self.tree if self.tree is not None else DEFAULT_TREES[self.method]

    @property
    def label(self) -> str:
        label = self.method if self.tree is None else f"{self.method}[{self.tree}]"
        return label + (REJECTED_SUFFIX if self.feed_rejected else "") + ("" if self.prior else NOPRIOR_SUFFIX)


REJECTED_SUFFIX = "+rejected"
"""Appended to a STAND method name: feed the store at rejected tree nodes too (docs/algorithms.md §2.4 option)."""

NOPRIOR_SUFFIX = "+noprior"
"""Appended to a STAND method name: it drafts without the successor prior (docs/algorithms.md §2.8)."""


def parse_methods(methods: str, trees: list[str] | None) -> list[BenchMethod]:
    """``"ar,stand,stand+rejected"`` and tree specs → configurations: each tree method once per tree it
    takes (:func:`stand_runtime.drafters.takes_tree`: a dynamic tree goes to STAND only), or on its
    default tree (:data:`stand_runtime.method.DEFAULT_TREES`); the suffixes are :data:`REJECTED_SUFFIX`
    and :data:`NOPRIOR_SUFFIX` (after ``+rejected`` when both).

    Raises:
        StandError: an unknown method name (the message lists the valid ones), or a duplicate.
    """
    valid = [*METHODS, *(method + suffix for suffix in (REJECTED_SUFFIX, NOPRIOR_SUFFIX, REJECTED_SUFFIX + NOPRIOR_SUFFIX)
                         for method in STORE_METHODS)]
    names = split_methods(methods, valid)
    if isinstance(trees, (str, os.PathLike)):  # one tree given alone, not its characters
        trees = [trees]
    trees = [str(tree) for tree in trees or []]
    if len(set(trees)) < len(trees):
        raise StandError(f"a tree is listed twice in {trees!r}")
    bases = [name.removesuffix(NOPRIOR_SUFFIX).removesuffix(REJECTED_SUFFIX) for name in names]
    if trees and not any(base in TREE_METHODS for base in bases):
        raise StandError(f"--tree applies to {', '.join(TREE_METHODS)}; none of {methods!r} drafts into a tree")
    for tree in trees:
        if not any(takes_tree(base, tree) for base in bases):
            raise StandError(f"tree {tree!r} applies to none of {methods!r} (a dynamic tree applies to "
                             f"{', '.join(m for m in TREE_METHODS if takes_tree(m, 'dynamic'))})")
    out = []
    for name in names:
        prior = not name.endswith(NOPRIOR_SUFFIX)
        rejected = name.removesuffix(NOPRIOR_SUFFIX).endswith(REJECTED_SUFFIX)
        base = name.removesuffix(NOPRIOR_SUFFIX).removesuffix(REJECTED_SUFFIX)
        if base in TREE_METHODS:
            usable = [tree for tree in trees if takes_tree(base, tree)]
            out += [BenchMethod(base, tree, rejected, prior) for tree in (usable or [None])]
        else:
            out.append(BenchMethod(name))
    return out


@dataclass
class MethodResult:
    """Totals of one configuration over the prompts."""

    label: str
    method: str
    tree: str | None
    tree_nodes: int
    feed_rejected: bool = False
    prior: bool = False  # drafted with the target's successor prior
    tokens: int = 0
    steps: int = 0
    decode_s: float = 0.0
    forward_s: float = 0.0  # target forwards (the rest of decode_s is host work: drafting, verification, ...)
    drafted: int = 0  # draft nodes forwarded, over all steps
    correct: int = 0  # prompts whose majority-vote answer is right
    graded: int = 0  # prompts with a reference answer
    trajectories_correct: int = 0  # single trajectories whose answer is right (more draws, same law)
    trajectories_graded: int = 0
    by_trajectory: list[list[int]] = field(default_factory=list)  # [tokens, steps] per trajectory index
    per_prompt: list[dict] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    bonus_per_step: list[bool] = field(default_factory=list)
    root_quality: list[dict] = field(default_factory=list)  # DraftQuality sums, one per run
    final_stores: list[dict] = field(default_factory=list)  # statistics of each store at its last use
    reliability: ReliabilityLog | None = None  # value-sized trees: predicted vs observed acceptance per node

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.graded if self.graded else None

    @property
    def host_fraction(self) -> float:
        """Share of decoding time spent outside the target forward (drafting, verification, bookkeeping)."""
        return 1.0 - self.forward_s / self.decode_s if self.decode_s else 0.0

    @property
    def mean_drafted(self) -> float:
        """Draft nodes forwarded per step."""
        return self.drafted / self.steps if self.steps else 0.0

    def prompt_totals(self) -> np.ndarray:
        """``[prompts, 2]`` tokens and decoding seconds per prompt (all its trajectories)."""
        return np.array([[sum(t["tokens"] for t in p["trajectories"]), sum(t["decode_s"] for t in p["trajectories"])]
                         for p in self.per_prompt], dtype=np.float64).reshape(-1, 2)

    def diagnostics(self) -> dict:
        """Why the acceptance length is what it is: acceptance per depth, and for STAND the store's
        hit rate by context length n (all lookups, and the step roots) and q-versus-p at the roots."""
        out: dict = {"acceptance_by_depth": acceptance_by_depth(self.accepted_per_step, self.bonus_per_step)}
        if self.final_stores:
            lookups = sum(s["lookups"] for s in self.final_stores)
            rates: dict[str, float] = {}
            for store in self.final_stores:
                for n, rate in store["hit_rate_by_n"].items():
                    rates[n] = rates.get(n, 0.0) + rate * store["lookups"]
            out["lookup_hit_rate_by_n"] = {n: v / lookups if lookups else 0.0 for n, v in rates.items()}
            out["lookups"] = lookups
        if self.root_quality:
            out["root"] = summarise_draft_quality(self.root_quality)
        return out

    def acceptance_by_trajectory(self) -> list[float]:
        """Acceptance length of the t-th trajectory of every prompt, t = 1 .. N."""
        return [tokens / steps if steps else 0.0 for tokens, steps in self.by_trajectory]


def check_bench_settings(prompts: int, trajectories: int, seed: int) -> None:
    """Check the run's size and seeds before any model work: prompt i's trajectory t is seeded with
    ``seed + 1000 i + t``.

    Raises:
        StandError: trajectories out of [1, 4096], or seeds that would run past 2**64.
    """
    check_int("trajectories", trajectories, 1, MAX_TRAJECTORIES)
    check_seed(seed)
    if seed + 1000 * max(prompts - 1, 0) + trajectories - 1 >= 2**64:
        raise StandError(f"seed {seed} with {counted(prompts, 'prompt')} x {counted(trajectories, 'trajectory', 'trajectories')}"
                         f": the seeds would run past 2**64 (seed + 1000 x "
                         "prompt + trajectory); give fewer samples or a smaller seed")


def default_offset(dataset: str, offset: int | None = None) -> int:
    """``--offset`` as given, else its default: 30 for humaneval (past the 30 calibration prompts), 0 for
    any other dataset."""
    if offset is not None:
        return offset
    return 30 if dataset == "humaneval" else 0


def run_bench(
    model, tokenizer, prompts: list[Prompt], methods: list[BenchMethod], *, sampling: SamplingParams,
    max_new_tokens: int, seed: int, trajectories: int = 1, on_run: Callable[[str, str, object], None] | None = None,
    on_prompt: Callable[[int, list[MethodResult]], None] | None = None, share_across_prompts: bool = False,
    ignore_eos: bool = False, priors: bool = False, verification: str = "invariant", cross_prompt: bool = False,
) -> list[MethodResult]:
    """Decode every prompt with every method (N trajectories each), interleaved; per-method totals.

    Each method is one :class:`stand_runtime.HFBackend`; a prompt is one request of n = N samples sharing
    one drafter memory (one for every prompt with ``share_across_prompts``; with ``cross_prompt`` each
    prompt's over one cross-prompt memory, :class:`stand_runtime.HFBackend`). ``on_run(prompt_id, label,
    completion)`` is called after every trajectory, ``on_prompt(prompts_done, results)`` after every
    prompt. ``ignore_eos``: every trajectory decodes to ``max_new_tokens`` (answers are read before the
    first EOS). ``priors``: STAND configurations without ``+noprior`` draft with the target's successor
    prior (:mod:`stand_runtime.drafters.prior`). ``verification``: :data:`stand_runtime.verify.VERIFICATION_RULES`.

    Raises:
        StandError: before any decoding: prompts that are not a non-empty list of Prompt with distinct
            ids, no methods or one that is not a BenchMethod, callbacks that are not callable, a bad
            tree, trajectories < 1, or a prompt that does not fit the context with its budget.
    """
    prompts = check_prompt_list(prompts, "bench prompts")
    if isinstance(methods, BenchMethod) or not isinstance(methods, (list, tuple)) or not methods:
        raise StandError("methods must be a non-empty list of BenchMethod (parse_methods)")
    for spec in methods:
        if not isinstance(spec, BenchMethod):
            raise StandError(f"methods must be BenchMethod objects (parse_methods), got {type(spec).__name__}")
    check_callable("on_run", on_run)
    check_callable("on_prompt", on_prompt)
    check_bench_settings(len(prompts), trajectories, seed)
    check_prompts_fit(model, tokenizer, prompts, check_budget(max_new_tokens))
    backends, results = [], []
    for spec in methods:
        prior = method_prior(spec.method, model, tokenizer, sampling, vocab_size(model), priors and spec.prior)
        method = Method.parse(spec.method, spec.tree, model, feed_rejected=spec.feed_rejected, prior=prior,
                              verification=verification)  # STAND's diagnostics tables: q against p at roots
        method = method.ablated(diagnose=True) if spec.method in STORE_METHODS else method
        nodes = {"ar": 0, "pld": 10, "suffix": 64}.get(spec.method) if method.tree is None else method.tree.num_nodes
        result = MethodResult(spec.label, spec.method, spec.tree_name, nodes, spec.feed_rejected, prior is not None)
        sizing = None
        if method.value_sized:  # a value-sized tree reports each step's predictions (others: nothing)
            result.reliability = ReliabilityLog()
            sizing = SizingSession.for_model(model)
            sizing.on_outcome = result.reliability.add
        backend = HFBackend(model, tokenizer, method, share_memory=share_across_prompts, sizing=sizing,
                            cross_prompt=cross_prompt)
        result.by_trajectory = [[0, 0] for _ in range(trajectories)]
        backends.append(backend)
        results.append(result)
    for index, prompt in enumerate(prompts):
        request = DecodeRequest(prompt.text, n=trajectories, max_new_tokens=max_new_tokens, sampling=sampling,
                                seed=seed + 1000 * index, ignore_eos=ignore_eos)
        for spec, backend, result in zip(methods, backends, results):
            notify = None if on_run is None else (lambda _r, _s, done, label=spec.label: on_run(prompt.id, label, done))
            completions = backend.generate([request], on_completion=notify)[0]
            _add_prompt(result, spec, prompt, completions, share_across_prompts)
        if on_prompt is not None:
            on_prompt(index + 1, results)
    return results


def _add_prompt(result: MethodResult, spec: BenchMethod, prompt: Prompt, completions: list, shared: bool) -> None:
    """Add one prompt's N trajectories to a method's totals."""
    answers, runs = [], []
    for trajectory, completion in enumerate(completions):
        stats = completion.stats
        result.tokens += stats.new_tokens
        result.steps += stats.target_forwards
        result.decode_s += stats.decode_s
        result.forward_s += stats.forward_s
        result.drafted += sum(stats.drafted_per_step)
        result.by_trajectory[trajectory][0] += stats.new_tokens
        result.by_trajectory[trajectory][1] += stats.target_forwards
        result.accepted_per_step += stats.accepted_per_step
        result.bonus_per_step += stats.bonus_per_step
        if stats.store is not None and "root" in stats.store:
            result.root_quality.append(stats.store["root"])
        answers.append(extract_answer(completion.text))
        runs.append({"tokens": stats.new_tokens, "steps": stats.target_forwards, "decode_s": stats.decode_s,
                     "acceptance_length": stats.acceptance_length, "tokens_per_s": stats.tokens_per_s,
                     "answer": answers[-1]})
    if spec.method in STORE_METHODS:  # store counters are cumulative: keep each store's last
        store_stats = {k: v for k, v in completions[-1].stats.store.items() if k != "root"}
        result.final_stores = [store_stats] if shared else result.final_stores + [store_stats]
    entry = {"prompt": prompt.id, "trajectories": runs}
    if prompt.answer is not None:
        vote, reference = majority_vote(answers), normalise(str(prompt.answer))
        entry["majority_answer"] = vote
        entry["correct"] = vote is not None and vote == reference
        result.graded += 1
        result.correct += int(entry["correct"])
        result.trajectories_graded += len(answers)
        result.trajectories_correct += sum(answer == reference for answer in answers)
    result.per_prompt.append(entry)


def speedups(results: list[MethodResult]) -> dict[str, float | None]:
    """Throughput ratio of each configuration against ``ar`` in the same run (None without ``ar``)."""
    base = next((r for r in results if r.method == "ar"), None)
    return {r.label: (r.tokens_per_s / base.tokens_per_s if base and base.tokens_per_s else None) for r in results}


def speedup_intervals(results: list[MethodResult], confidence: float = 0.95, resamples: int = 2000,
                      seed: int = 0) -> dict[str, tuple[float, float] | None]:
    """Paired bootstrap interval of each configuration's speedup over ``ar`` (the ratio of pooled tokens/s),
    resampling prompts, each with all its methods (decoded back to back); None without ``ar`` or with
    fewer than 3 prompts."""
    from scipy.stats import bootstrap

    base = next((r for r in results if r.method == "ar"), None)
    if base is None or len(base.per_prompt) < 3:
        return {r.label: None for r in results}
    reference = base.prompt_totals()
    out = {}
    for result in results:
        totals = result.prompt_totals()

        def ratio(index, totals=totals):
            index = np.asarray(index, dtype=int)
            mine, theirs = totals[index].sum(axis=0), reference[index].sum(axis=0)
            return (mine[0] / mine[1]) / (theirs[0] / theirs[1])

        interval = bootstrap((np.arange(len(totals)),), ratio, vectorized=False, n_resamples=resamples,
                             confidence_level=confidence, method="percentile", random_state=seed).confidence_interval
        out[result.label] = (float(interval.low), float(interval.high))
    return out


def latency_bounds(results: list[MethodResult], profile) -> dict[str, float]:
    """Each configuration's speedup bound from the latency profile: ``tau t(1) / t(K + 1)`` with K its
    mean draft nodes per step (what the measured acceptance length would give with zero host work)."""
    return {r.label: r.acceptance_length * profile.at(1) / profile.at(r.mean_drafted + 1) for r in results}


def results_json(results: list[MethodResult], settings: dict, profile=None) -> dict:
    """The benchmark as JSON: a ``results`` list plus the settings (and the latency bounds when the
    machine's latency ``profile`` is given)."""
    ratio = speedups(results)
    intervals = speedup_intervals(results)
    bounds = latency_bounds(results, profile) if profile is not None else {}
    return {
        "settings": settings,
        "results": [
            {"method": r.method, "label": r.label, "tree": r.tree, "tree_nodes": r.tree_nodes,
             "feed_rejected": r.feed_rejected, "prior": r.prior,
             "acceptance_length": r.acceptance_length, "tokens_per_s": r.tokens_per_s, "speedup": ratio[r.label],
             "speedup_interval_95": intervals[r.label], "latency_bound": bounds.get(r.label),
             # None where forwards were not timed apart (a vLLM engine times whole steps)
             "forward_s": r.forward_s or None, "host_fraction": r.host_fraction if r.forward_s else None,
             "mean_drafted": r.mean_drafted,
             "accuracy": r.accuracy, "correct": r.correct, "graded": r.graded,
             "trajectories_correct": r.trajectories_correct, "trajectories_graded": r.trajectories_graded,
             "acceptance_by_trajectory": r.acceptance_by_trajectory(),
             "tokens": r.tokens, "steps": r.steps, "decode_s": r.decode_s, "diagnostics": r.diagnostics(),
             "reliability": r.reliability.summary() if r.reliability is not None else None,
             "per_prompt": r.per_prompt}
            for r in results
        ],
        "latency_profile": profile.as_dict() if profile is not None else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
