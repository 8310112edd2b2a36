"""The trace bench: drafters replayed on recorded reasoning traces, no model.

Each group's traces run in order as trajectories 1..N sharing one drafter memory per method
(:func:`stand_runtime.engine.trace_replay.replay_trace`, greedy verification on the engine's steps).
Reported per method: acceptance length τ (tokens per step) per trajectory index and pooled, with 95%
percentile-bootstrap intervals over groups, draft nodes per step, µs per step drafting and feeding,
and the drafter memory's size at the end of each group. With budgets (:func:`budget_methods`) each
method is replayed at each budget K of drafted tokens per step (:func:`budget_rows`). With
``cross_prompt`` (``--cross-prompt``) the groups, replayed in order, learn from the ones before them
(:meth:`stand_runtime.Method.problem_memory`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from stand_runtime import Method, SamplingParams, SizingSession, StandError, SuffixSettings, replay_trace
from stand_runtime.checks import check_bool, check_callable, check_int
from stand_runtime.drafters import (MAX_COPY_TOKENS, STORE_METHODS, SUFFIX_TUNED, TREE_METHODS, PromptLookupDrafter,
                                    parse_dynamic, takes_tree)
from stand_runtime.randomness import RandomStream
from stand_runtime.store.drafting import MAX_DYNAMIC_NODES
from stand_runtime.trees.tree import MAX_DEPTH, DraftTree
from stand_runtime.trees.tree_io import resolve_tree

from .method_lists import split_methods
from ..data.traces import TraceGroup

TRACE_METHODS = ("stand", "stand-det", "stand-static", "pld", "recycle", "suffix", "suffix-tuned")
"""Methods the trace bench runs: the engine's, plus STAND on the paper's static tree
(``stand-static``) and SuffixDecoding tuned (:data:`SUFFIX_TUNED`)."""

STATIC_TRACE_TREE = "stand-smollm2-humaneval-80"
"""STAND's static tree in the trace bench: the 80-node calibrated tree (the ``auto`` family's member
at 80 nodes: with no model there is no latency to size it by)."""

DEFAULT_TRACE_TREES = {"stand": "dynamic-80", "stand-det": "dynamic-80", "stand-static": STATIC_TRACE_TREE,
                       "recycle": "heuristic-80"}
"""Trees of the tree methods: STAND's dynamic and static 80-node trees, and Token Recycling's own."""

NODE_BUDGET = 80
"""Nodes per step of every method in the trace bench (SuffixDecoding's budget, the trees' size)."""

RECYCLE_NOTE = ("recycle: a recording has no top-8 rows, so Token Recycling learns the observed successor of each "
                "committed token (most recent first), not the target's top-8: a lower bound on the method")
IDENTICAL_NOTE = "stand = stand-det under greedy replay: greedy decoding drafts q's top-m (no Gumbel noise)"

@dataclass(frozen=True)
class TraceMethod:
    """One drafter configuration of the trace bench: its ``label``, the resolved ``method`` (fixed and dynamic
    trees only: there is no model), the ``tree`` spec as given, a value-sized tree's ``sizing`` session (the
    projected latency profile), and the ``budget`` of drafted tokens per step it was configured for
    (:func:`budget_methods`), else None."""

    label: str
    method: Method
    tree: str | None = None
    sizing: SizingSession | None = None
    budget: int | None = None


def check_tree_spec(spec, latency: bool = False) -> None:
    """Raises StandError unless ``spec`` names a tree the trace bench can draft into without a model:
    a tree file, a bundled tree, ``dynamic[-N]``, or with a ``latency`` profile given ``dynamic-auto[-N]``
    (sized by that profile; ``auto`` and families need a model's latency)."""
    from stand_runtime.method import sized_family
    from stand_runtime.sizing.tree_choice import AUTO

    if not isinstance(spec, str) or not spec:
        raise StandError(f"tree must be a tree file, a bundled tree name or dynamic[-N], got {spec!r}")
    dynamic = parse_dynamic(spec)
    if dynamic is not None and dynamic.sized and not latency:
        raise StandError(f"tree {spec!r} is sized from a latency profile: the trace bench replays without a model; "
                         "give --latency FILE (the hardware to size it for), or dynamic[-N], a tree file or a bundled tree")
    if dynamic is not None:
        return
    if spec == AUTO or sized_family(spec) is not None:
        raise StandError(f"tree {spec!r} is sized from a model's latency: the trace bench replays without a model; "
                         "give a tree file, a bundled tree or dynamic[-N]")
    resolve_tree(spec)


def parse_trace_methods(methods: str, tree: str | None = None, copy_tokens: int | None = None,
                        latency=None) -> list[TraceMethod]:
    """``"stand,pld,suffix-tuned"`` → configurations (tree methods on ``tree`` or their default;
    ``stand-static`` always on :data:`STATIC_TRACE_TREE`, ``recycle`` on its own for a dynamic ``tree``;
    methods without a tree ignore it). ``latency``: the :class:`stand_runtime.LatencyProfile` a
    value-sized ``tree`` (``dynamic-auto[-N]``) is sized by. ``copy_tokens``: STAND's copy path (None:
    :class:`stand_runtime.Method`'s default for the tree).

    Raises:
        StandError: an unknown or repeated method name, a tree none of them takes, a copy path none has.
    """
    names, copy_tokens = _names(methods, copy_tokens)
    if tree is not None:
        check_tree_spec(tree, latency is not None)
        takers = [name for name in names if name in TREE_METHODS and takes_tree(name, tree)]
        if not takers:
            raise StandError(f"tree {tree!r} applies to none of {', '.join(names)} (trees go to "
                             f"{', '.join(m for m in TREE_METHODS if takes_tree(m, tree))}; stand-static keeps its own)")
    if copy_tokens is not None and not any(name in STORE_METHODS or name == "stand-static" for name in names):
        raise StandError(f"copy_tokens is STAND's copy path: none of {', '.join(names)} has one")
    return [_configure(name, tree, copy_tokens, latency) for name in names]


def _configure(name: str, tree: str | None, copy_tokens: int | None, latency, budget: int | None = None) -> TraceMethod:
    """One method of :func:`parse_trace_methods` (``budget`` None) or :func:`budget_methods` (at ``budget``)."""
    nodes = NODE_BUDGET if budget is None else budget
    if name in ("suffix", "suffix-tuned"):
        rule = SUFFIX_TUNED if name == "suffix-tuned" else SuffixSettings()
        settings = SuffixSettings(max_spec_tokens=nodes, max_spec_factor=rule.max_spec_factor,
                                  min_token_prob=rule.min_token_prob)
        return TraceMethod(name, Method.parse("suffix", suffix=settings), budget=budget)
    if name not in TREE_METHODS and name != "stand-static":  # pld: no tree, no copy path of STAND's
        return TraceMethod(name, Method.parse(name), budget=budget)  # (its chain is its own: K tokens at a budget)
    engine = "stand" if name == "stand-static" else name
    copy = copy_tokens if engine in STORE_METHODS else None  # Token Recycling has no copy path
    if budget is not None and name in STORE_METHODS:
        spec = f"dynamic-{budget}"
        return TraceMethod(name, Method.parse(name, spec, copy_tokens=copy), spec, budget=budget)
    if budget is not None:  # a static tree cut to its first K nodes; stand-static's copy path off (beyond the tree)
        spec = f"{DEFAULT_TRACE_TREES[name]}[:{budget}]"
        cut = first_nodes(resolve_tree(DEFAULT_TRACE_TREES[name]), budget)
        return TraceMethod(name, Method.parse(engine, cut, copy_tokens=0 if engine == "stand" else None), spec,
                           budget=budget)
    if name == "stand-static":
        spec = DEFAULT_TRACE_TREES[name]
        return TraceMethod(name, Method.parse("stand", spec, copy_tokens=copy_tokens), spec)
    spec = (tree if takes_tree(name, tree) else None) or DEFAULT_TRACE_TREES[name]  # recycle: static only
    method = Method.parse(name, spec, copy_tokens=copy)
    sizing = SizingSession(latency, measured_here=False) if method.value_sized else None
    return TraceMethod(name, method, spec, sizing)


def _names(methods: str, copy_tokens: int | None) -> tuple[list[str], int | None]:
    """The method names of ``methods`` and ``copy_tokens`` checked (:func:`split_methods`; 0 to 64 tokens)."""
    names = split_methods(methods, TRACE_METHODS, requires={"suffix-tuned": "suffix"})
    return names, None if copy_tokens is None else check_int("copy_tokens", copy_tokens, 0, MAX_COPY_TOKENS)


def first_nodes(tree: DraftTree, count: int) -> DraftTree:
    """``tree``'s first ``count`` nodes in its breadth-first order (parents and elder siblings come
    first, so they form a tree); the whole tree when it has no more."""
    return DraftTree.from_paths(tree.paths[:count])


def parse_budgets(text) -> list[int]:
    """``"2,4,8,16"`` → ``[2, 4, 8, 16]``: budgets of drafted tokens per step, ascending (StandError: not
    text, an empty list or entry, an entry that is not an integer >= 1, or a repeat)."""
    if not isinstance(text, str) or not text.strip():
        raise StandError(f"--budgets must be a comma-separated list of integers >= 1 (drafted tokens per step), "
                         f"got {text!r}")
    budgets = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry.isdigit() or int(entry) < 1:
            raise StandError(f"bad budget {entry!r} in --budgets {text!r}: each is an integer >= 1 "
                             "(drafted tokens per step)")
        budgets.append(int(entry))
    if len(set(budgets)) < len(budgets):
        raise StandError(f"a budget is listed twice in --budgets {text!r}")
    return sorted(budgets)


def budget_limit(name: str) -> tuple[int, str]:
    """The largest budget method ``name`` drafts to, and why: a tree method on its static tree has
    that tree's nodes; prompt lookup's chain is at most a draft's depth; the rest their node cap."""
    if name in ("recycle", "stand-static"):
        nodes = resolve_tree(DEFAULT_TRACE_TREES[name]).num_nodes
        return nodes, f"its tree {DEFAULT_TRACE_TREES[name]} has {nodes} nodes"
    if name == "pld":
        return MAX_DEPTH, f"its chain is at most a draft's depth, {MAX_DEPTH}"
    return MAX_DYNAMIC_NODES, f"it drafts at most {MAX_DYNAMIC_NODES} nodes"


def budget_methods(methods: str, budgets: list[int], copy_tokens: int | None = None) -> list[TraceMethod]:
    """Every method of ``methods`` at every budget K of ``budgets`` (method by method, K ascending), each
    drafting at most K tokens a step: STAND on ``dynamic-K`` (its copy path inside the K), SuffixDecoding
    with its limit at K, prompt lookup's chain at K, Token Recycling and ``stand-static`` on their static
    tree's first K nodes (``stand-static`` without its copy path, whose tokens would come beyond the tree).

    Raises:
        StandError: what :func:`parse_trace_methods` raises, a bad budget, or a budget over what a
            method supports (:func:`budget_limit`), before any replay.
    """
    names, copy_tokens = _names(methods, copy_tokens)
    if copy_tokens is not None and not any(name in STORE_METHODS for name in names):
        raise StandError(f"copy_tokens is STAND's copy path on a dynamic tree: none of {', '.join(names)} has one")
    if not isinstance(budgets, (list, tuple)) or not budgets:
        raise StandError("budget_methods needs a non-empty list of budgets (parse_budgets)")
    budgets = [check_int("budget", k, 1) for k in budgets]
    for name in names:
        limit, why = budget_limit(name)
        if max(budgets) > limit:
            raise StandError(f"budget {max(budgets)} is more than {name} drafts ({why}): give budgets up to "
                             f"{limit}, or leave {name} out of --methods")
    return [_configure(name, None, copy_tokens, None, k) for name in names for k in budgets]


def trace_drafter(spec: TraceMethod, memory, trajectory: int, vocab: int, value=None):
    """The drafter ``spec`` replays trajectory ``trajectory`` (0-based) of a group with, over the group's
    shared ``memory``: the method's own, or at a budget prompt lookup drafting chains of K tokens."""
    if spec.budget is not None and spec.method.name == "pld":
        return PromptLookupDrafter(num_tokens=spec.budget)
    greedy = SamplingParams(temperature=0.0)
    return spec.method.drafter(memory, RandomStream.seeded(trajectory), greedy, vocab, value=value)


RUN_COLUMNS = ("tokens", "steps", "drafted", "drafting_s", "feeding_s", "most_drafted")
"""What :attr:`TraceResult.runs` records per trace."""


@dataclass
class TraceResult:
    """One configuration over every group: ``runs`` ``[groups, N, 6]`` per trace the :data:`RUN_COLUMNS`
    (NaN rows for groups with fewer than N traces), ``memory_bytes`` the drafter memory's estimated size
    at the end of each group (None without one)."""

    spec: TraceMethod
    runs: np.ndarray
    memory_bytes: list[int | None] = field(default_factory=list)

    def _ratio(self, numerator: int, denominator: int, groups: np.ndarray | None = None, index: int | None = None):
        runs = self.runs if groups is None else self.runs[groups]
        runs = runs if index is None else runs[:, index : index + 1]
        denominator = np.nansum(runs[..., denominator])  # 0 where no group has trajectory ``index``
        return float(np.nansum(runs[..., numerator]) / denominator) if denominator > 0 else float("nan")

    def acceptance(self, index: int | None = None) -> float:
        """τ pooled over groups at trajectory ``index`` (0-based), or over everything (None)."""
        return self._ratio(0, 1, index=index)

    def interval(self, index: int | None = None, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
        """95% percentile-bootstrap interval of :meth:`acceptance`, resampling groups."""
        return bootstrap_ratio([self], lambda r, g: r[0]._ratio(0, 1, g, index), resamples, seed)

    @property
    def nodes_per_step(self) -> float:
        return self._ratio(2, 1)

    @property
    def most_drafted(self) -> int:
        """The most nodes drafted in one step of any trace."""
        return int(np.nanmax(self.runs[..., 5]))

    @property
    def drafting_us(self) -> float:
        """µs per step drafting."""
        return 1e6 * self._ratio(3, 1)

    @property
    def feeding_us(self) -> float:
        """µs per step verifying, cutting and feeding the drafter."""
        return 1e6 * self._ratio(4, 1)

    @property
    def memory_mb(self) -> float | None:
        """Mean drafter memory per group at its end (MB), None without one."""
        values = [b for b in self.memory_bytes if b is not None]
        return float(np.mean(values)) / 1e6 if values else None


def bootstrap_ratio(results: list[TraceResult], statistic: Callable, resamples: int = 2000, seed: int = 0,
                    confidence: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic(results, group_indices)``, resampling groups
    (the same resample for every result: paired)."""
    groups = results[0].runs.shape[0]
    rng = np.random.default_rng(seed)
    values = np.array([statistic(results, rng.integers(0, groups, groups)) for _ in range(resamples)])
    values = values[np.isfinite(values)]  # a resample without any group of that trajectory says nothing
    if not len(values):
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def ratio_interval(mine: TraceResult, theirs: TraceResult, index: int | None = None, resamples: int = 2000
                   ) -> tuple[float, tuple[float, float]]:
    """τ ratio ``mine / theirs`` (at trajectory ``index`` or pooled) with its paired 95% interval."""
    def ratio(pair, groups):
        return pair[0]._ratio(0, 1, groups, index) / pair[1]._ratio(0, 1, groups, index)

    return mine.acceptance(index) / theirs.acceptance(index), bootstrap_ratio([mine, theirs], ratio, resamples)


def run_trace_bench(groups: list[TraceGroup], methods: list[TraceMethod], vocab: int | None = None,
                    on_trace: Callable[[str], None] | None = None, cross_prompt: bool = False) -> list[TraceResult]:
    """Replay every group's traces (tokenized: :func:`load_replay_groups`) through every method
    (:func:`parse_trace_methods` or :func:`budget_methods`); ``vocab``: the tokenizer's vocabulary size
    (Token Recycling's matrix rows; None: the largest token id + 1); ``on_trace(label)`` after every trace;
    ``cross_prompt``: each group learns from the groups before it (:meth:`stand_runtime.Method.problem_memory`; False: each alone).

    Raises:
        StandError: a bad tree, a token id outside ``vocab``, or a missing arctic-inference for suffix.
    """
    vocab = _check_bench(groups, methods, vocab, on_trace)
    cross_prompt = check_bool("cross_prompt", cross_prompt)
    width = max(len(g.trace_ids) for g in groups)
    results = []
    for spec in methods:
        method = spec.method
        runs = np.full((len(groups), width, len(RUN_COLUMNS)), np.nan)
        memories = []
        value = None if spec.sizing is None else spec.sizing.rule(method.tree.num_nodes)  # one rule, every trace
        shared = method.new_memory(vocab) if cross_prompt else None
        for g, group in enumerate(groups):
            memory = method.problem_memory(vocab, shared)
            drafter = None
            for t, trace in enumerate(group.trace_ids):
                drafter = trace_drafter(spec, memory, t, vocab, value)
                stats = replay_trace(drafter, group.prompt_ids, trace, value=value).stats
                runs[g, t] = (stats.new_tokens, stats.target_forwards, sum(stats.drafted_per_step), stats.drafting_s,
                              stats.verification_s + stats.bookkeeping_s, max(stats.drafted_per_step, default=0))
                if on_trace is not None:
                    on_trace(spec.label)
            store = drafter.stats() if drafter is not None else None
            memories.append(None if store is None else store.get("approx_bytes"))
        results.append(TraceResult(spec, runs, memories))
    return results


def _check_bench(groups, methods, vocab, on_trace) -> int:
    """:func:`run_trace_bench`'s arguments checked; the vocabulary size (given or the largest id + 1)."""
    if not isinstance(groups, (list, tuple)) or not groups:
        raise StandError("run_trace_bench needs a non-empty list of trace groups")
    for group in groups:
        if not isinstance(group, TraceGroup) or not group.trace_ids or not group.prompt_ids:
            raise StandError(f"trace group {getattr(group, 'name', group)!r} is not tokenized (tokenize_groups first)")
    if isinstance(methods, TraceMethod) or not isinstance(methods, (list, tuple)) or not methods \
            or not all(isinstance(m, TraceMethod) for m in methods):
        raise StandError("run_trace_bench needs a non-empty list of TraceMethod (parse_trace_methods)")
    check_callable("on_trace", on_trace)
    top = max(max(max(ids) for ids in g.trace_ids + [g.prompt_ids]) for g in groups)
    vocab = top + 1 if vocab is None else check_int("vocab", vocab, 1)
    if top >= vocab:
        raise StandError(f"token id {top} is outside the vocabulary ({vocab})")
    return vocab


def trace_results_json(results: list[TraceResult], settings: dict, reference: str | None = "suffix-tuned") -> dict:
    """The trace bench as JSON: per method (and budget) τ per trajectory index and pooled with 95%
    intervals, nodes per step, µs per step, memory; τ ratios against ``reference`` at the same budget
    (when run) with paired intervals; with budgets, the per-budget rows (:func:`budget_rows`) as ``budgets``."""
    width = results[0].runs.shape[1]
    out = []
    for r in results:
        entry = _result_entry(r, width)
        base = next((b for b in results if b.spec.label == reference and b.spec.budget == r.spec.budget), None)
        if base is not None and r is not base:
            entry[f"ratio_vs_{reference}"] = {
                key: dict(zip(("ratio", "interval_95"), ratio_interval(r, base, index)))
                for key, index in (("t1", 0), (f"t{width}", width - 1), ("pooled", None))}
        out.append(entry)
    notes = [IDENTICAL_NOTE] if {"stand", "stand-det"} <= {r.spec.label for r in results} else []
    if any(r.spec.method.name == "recycle" for r in results):
        notes.append(RECYCLE_NOTE)
    data = {"settings": settings, "results": out, "notes": notes}
    if any(r.spec.budget is not None for r in results):
        data["budgets"] = budget_rows(out)
    data["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return data


def _result_entry(r: TraceResult, width: int) -> dict:
    """One configuration's JSON entry (see :func:`trace_results_json`)."""
    tokens, steps, drafted = (int(np.nansum(r.runs[..., c])) for c in range(3))  # whole counts
    return {
        "label": r.spec.label, "method": r.spec.method.name, "tree": r.spec.tree, "budget": r.spec.budget,
        "suffix": None if r.spec.method.suffix is None else vars(r.spec.method.suffix),
        "copy_tokens": r.spec.method.copy_tokens if r.spec.method.name in STORE_METHODS else None,
        "acceptance_by_trajectory": [r.acceptance(t) for t in range(width)],
        "interval_by_trajectory_95": [r.interval(t) for t in range(width)],
        "acceptance_pooled": r.acceptance(), "interval_pooled_95": r.interval(),
        "nodes_per_step": r.nodes_per_step, "most_drafted_per_step": r.most_drafted,
        "drafting_us_per_step": r.drafting_us, "feeding_us_per_step": r.feeding_us, "memory_mb_per_group": r.memory_mb,
        "tokens": tokens, "steps": steps, "drafted": drafted,
    }


def budget_rows(entries: list[dict]) -> dict:
    """τ against budget from :func:`trace_results_json`'s entries: ``budgets`` (K ascending), ``methods``
    (labels), ``rows`` (per method and K: τ pooled with its interval, τ at t1, drafted nodes per step and
    the most in one, tokens and accepted tokens per drafted node) and ``best`` (per K the highest τ's label)."""
    entries = [e for e in entries if e.get("budget") is not None]
    budgets = sorted({e["budget"] for e in entries})
    rows = [{"label": e["label"], "budget": e["budget"], "tau": e["acceptance_pooled"],
             "interval_95": e["interval_pooled_95"], "tau_t1": e["acceptance_by_trajectory"][0],
             "nodes_per_step": e["nodes_per_step"], "most_drafted_per_step": e["most_drafted_per_step"],
             "tau_per_drafted": e["tokens"] / e["drafted"] if e["drafted"] else None,
             "accepted_per_drafted": (e["tokens"] - e["steps"]) / e["drafted"] if e["drafted"] else None}
            for e in entries]
    best = {str(k): max((r for r in rows if r["budget"] == k), key=lambda r: r["tau"])["label"] for k in budgets}
    return {"budgets": budgets, "methods": list(dict.fromkeys(e["label"] for e in entries)), "rows": rows,
            "best": best}


def load_replay_groups(path, tokenizer, *, group_field: str = "sample_group", text_field: str = "trace",
                       prompt_field: str = "problem", max_tokens: int = 3000,
                       min_group_size: int = 2) -> tuple[list[TraceGroup], int]:
    """The trace groups of a JSONL file (:func:`treeopt.data.traces.load_traces`), tokenized (at most
    ``max_tokens`` per trace); (groups, groups left out for having fewer than ``min_group_size`` traces)."""
    from ..data.traces import load_traces, tokenize_groups

    groups, skipped = load_traces(path, group_field=group_field, text_field=text_field, prompt_field=prompt_field,
                                  min_group_size=min_group_size)
    tokenize_groups(groups, tokenizer, max_tokens)
    return groups, skipped
