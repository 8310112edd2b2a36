"""The trace bench: drafters replayed on recorded reasoning traces, no model (issue 13).

Each group's traces run in order as trajectories 1..N sharing one drafter memory per method
(:func:`stand_runtime.engine.trace_replay.replay_trace`, greedy verification on the engine's steps).
Reported per method: acceptance length τ (tokens per step) at each trajectory index and pooled, with
95% percentile-bootstrap intervals over groups (a group is resampled with all its trajectories),
draft nodes per step, µs per step drafting and feeding (verification, stop cut and drafter
feeding), and the drafter memory's size at the end of each group.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from stand_runtime import SamplingParams, StandError, SuffixSettings
from stand_runtime.drafters import STORE_METHODS, SUFFIX_TUNED, TREE_METHODS
from stand_runtime.randomness import RandomStream
from stand_runtime import Method, SizingSession, replay_trace
from stand_runtime.checks import check_callable, check_int
from stand_runtime.drafters import MAX_COPY_TOKENS, takes_tree

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
"""Trees of the tree methods: STAND's dynamic tree of 80 nodes (the same budget as SuffixDecoding's),
STAND's static 80-node tree, and Token Recycling's own."""

NODE_BUDGET = 80
"""SuffixDecoding's node budget per step in the trace bench: the tree methods' 80 nodes."""

RECYCLE_NOTE = ("recycle: a recording has no top-8 rows, so Token Recycling learns the observed successor of each "
                "committed token (most recent first), not the target's top-8: a lower bound on the method")
IDENTICAL_NOTE = "stand = stand-det under greedy replay: greedy decoding drafts q's top-m (no Gumbel noise)"

@dataclass(frozen=True)
class TraceMethod:
    """One drafter configuration of the trace bench.

    Attributes:
        label: its name in the output.
        method: the decoding method, resolved (the trace bench drafts without a model, so only fixed
            and dynamic trees).
        tree: the tree spec as given (tree methods), for the output.
        sizing: a value-sized tree's sizing session (the projected latency profile), else None.
    """

    label: str
    method: Method
    tree: str | None = None
    sizing: SizingSession | None = None


def check_tree_spec(spec, latency: bool = False) -> None:
    """Raises StandError unless ``spec`` names a tree the trace bench can draft into without a model:
    a tree file, a bundled tree, ``dynamic[-N]``, or with a ``latency`` profile given ``dynamic-auto[-N]``
    (sized by that profile; ``auto`` and families need a model's latency)."""
    from stand_runtime.method import sized_family
    from stand_runtime.sizing.tree_choice import AUTO
    from stand_runtime.trees.tree_io import resolve_tree
    from stand_runtime.drafters import parse_dynamic

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
    value-sized ``tree`` (``dynamic-auto[-N]``) is sized by (the replay observes no forward).
    ``copy_tokens``: STAND's copy path (None: each tree's default, the ``copy_tokens`` of :class:`stand_runtime.Method`).

    Raises:
        StandError: an unknown or repeated method name.
    """
    names = split_methods(methods, TRACE_METHODS, requires={"suffix-tuned": "suffix"})
    copy_tokens = None if copy_tokens is None else check_int("copy_tokens", copy_tokens, 0, MAX_COPY_TOKENS)
    if tree is not None:
        check_tree_spec(tree, latency is not None)
        takers = [name for name in names if name in TREE_METHODS and takes_tree(name, tree)]
        if not takers:
            raise StandError(f"tree {tree!r} applies to none of {', '.join(names)} (trees go to "
                             f"{', '.join(m for m in TREE_METHODS if takes_tree(m, tree))}; stand-static keeps its own)")
    if copy_tokens is not None and not any(name in STORE_METHODS or name == "stand-static" for name in names):
        raise StandError(f"copy_tokens is STAND's copy path: none of {', '.join(names)} has one")
    out = []
    for name in names:
        if name == "suffix":
            settings = SuffixSettings(max_spec_tokens=NODE_BUDGET)
            out.append(TraceMethod(name, Method.parse("suffix", suffix=settings)))
        elif name == "suffix-tuned":
            settings = SuffixSettings(max_spec_tokens=NODE_BUDGET, max_spec_factor=SUFFIX_TUNED.max_spec_factor,
                                      min_token_prob=SUFFIX_TUNED.min_token_prob)
            out.append(TraceMethod(name, Method.parse("suffix", suffix=settings)))
        elif name == "stand-static":
            spec = DEFAULT_TRACE_TREES[name]
            out.append(TraceMethod(name, Method.parse("stand", spec, copy_tokens=copy_tokens), spec))
        elif name in TREE_METHODS:
            spec = (tree if takes_tree(name, tree) else None) or DEFAULT_TRACE_TREES[name]  # recycle: static only
            copy = copy_tokens if name in STORE_METHODS else None  # Token Recycling has no copy path
            method = Method.parse(name, spec, copy_tokens=copy)
            sizing = SizingSession(latency, measured_here=False) if method.value_sized else None
            out.append(TraceMethod(name, method, spec, sizing))
        else:  # pld: no tree, no copy path of STAND's (its chain is its own)
            out.append(TraceMethod(name, Method.parse(name)))
    return out


@dataclass
class TraceResult:
    """One configuration over every group.

    Attributes:
        runs: ``[groups, N, 5]`` per trace: tokens, steps, drafted nodes, drafting s, feeding s
            (NaN rows for groups with fewer than N traces).
        memory_bytes: the drafter memory's estimated size at the end of each group (None without one).
    """

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
                    on_trace: Callable[[str], None] | None = None) -> list[TraceResult]:
    """Replay every group's traces through every method (groups tokenized, :func:`tokenize_groups`).

    Args:
        groups: the trace groups with token ids.
        methods: the configurations.
        vocab: the tokenizer's vocabulary size (Token Recycling's matrix rows); None = the largest
            token id + 1.
        on_trace: called with the method's label after every replayed trace.

    Raises:
        StandError: a bad tree, a token id outside ``vocab``, or a missing arctic-inference for suffix.
    """
    if not isinstance(groups, (list, tuple)) or not groups:
        raise StandError("run_trace_bench needs a non-empty list of trace groups")
    for group in groups:
        if not isinstance(group, TraceGroup) or not group.trace_ids or not group.prompt_ids:
            raise StandError(f"trace group {getattr(group, 'name', group)!r} is not tokenized (tokenize_groups first)")
    if isinstance(methods, TraceMethod) or not isinstance(methods, (list, tuple)) or not methods \
            or not all(isinstance(m, TraceMethod) for m in methods):
        raise StandError("run_trace_bench needs a non-empty list of TraceMethod (parse_trace_methods)")
    check_callable("on_trace", on_trace)
    width = max(len(g.trace_ids) for g in groups)
    top = max(max(max(ids) for ids in g.trace_ids + [g.prompt_ids]) for g in groups)
    vocab = top + 1 if vocab is None else check_int("vocab", vocab, 1)
    if top >= vocab:
        raise StandError(f"token id {top} is outside the vocabulary ({vocab})")
    greedy = SamplingParams(temperature=0.0)
    results = []
    for spec in methods:
        method = spec.method
        runs = np.full((len(groups), width, 5), np.nan)
        memories = []
        value = None if spec.sizing is None else spec.sizing.rule(method.tree.num_nodes)  # one rule, every trace
        for g, group in enumerate(groups):
            memory = method.new_memory(vocab)
            drafter = None
            for t, trace in enumerate(group.trace_ids):
                drafter = method.drafter(memory, RandomStream.seeded(t), greedy, vocab, value=value)
                stats = replay_trace(drafter, group.prompt_ids, trace, value=value).stats
                runs[g, t] = (stats.new_tokens, stats.target_forwards, sum(stats.drafted_per_step), stats.drafting_s,
                              stats.verification_s + stats.bookkeeping_s)
                if on_trace is not None:
                    on_trace(spec.label)
            store = drafter.stats() if drafter is not None else None
            memories.append(None if store is None else store.get("approx_bytes"))
        results.append(TraceResult(spec, runs, memories))
    return results


def trace_results_json(results: list[TraceResult], settings: dict, reference: str | None = "suffix-tuned") -> dict:
    """The trace bench as JSON: per method τ per trajectory index and pooled with 95% intervals,
    nodes per step, µs per step, memory; τ ratios against ``reference`` (when run) with paired intervals."""
    base = next((r for r in results if r.spec.label == reference), None)
    width = results[0].runs.shape[1]
    out = []
    for r in results:
        entry = {
            "label": r.spec.label, "method": r.spec.method.name, "tree": r.spec.tree,
            "suffix": None if r.spec.method.suffix is None else vars(r.spec.method.suffix),
            "copy_tokens": r.spec.method.copy_tokens if r.spec.method.name in STORE_METHODS else None,
            "acceptance_by_trajectory": [r.acceptance(t) for t in range(width)],
            "interval_by_trajectory_95": [r.interval(t) for t in range(width)],
            "acceptance_pooled": r.acceptance(), "interval_pooled_95": r.interval(),
            "nodes_per_step": r.nodes_per_step, "drafting_us_per_step": r.drafting_us,
            "feeding_us_per_step": r.feeding_us, "memory_mb_per_group": r.memory_mb,
            "tokens": int(np.nansum(r.runs[..., 0])), "steps": int(np.nansum(r.runs[..., 1])),  # whole counts
        }
        if base is not None and r is not base:
            entry[f"ratio_vs_{reference}"] = {
                key: dict(zip(("ratio", "interval_95"), ratio_interval(r, base, index)))
                for key, index in (("t1", 0), (f"t{width}", width - 1), ("pooled", None))}
        out.append(entry)
    notes = [IDENTICAL_NOTE] if {"stand", "stand-det"} <= {r.spec.label for r in results} else []
    if any(r.spec.method.name == "recycle" for r in results):
        notes.append(RECYCLE_NOTE)
    return {"settings": settings, "results": out, "notes": notes,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def load_replay_groups(path, tokenizer, *, group_field: str = "sample_group", text_field: str = "trace",
                       prompt_field: str = "problem", max_tokens: int = 3000,
                       min_group_size: int = 2) -> tuple[list[TraceGroup], int]:
    """The trace groups of a JSONL file, tokenized (at most ``max_tokens`` per trace) for
    :func:`run_trace_bench`; (groups, groups left out for having fewer than ``min_group_size`` traces).

    Raises:
        StandError: an unreadable file, missing fields, or no group left.
    """
    from ..data.traces import load_traces, tokenize_groups

    groups, skipped = load_traces(path, group_field=group_field, text_field=text_field, prompt_field=prompt_field,
                                  min_group_size=min_group_size)
    tokenize_groups(groups, tokenizer, max_tokens)
    return groups, skipped
