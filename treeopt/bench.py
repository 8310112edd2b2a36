"""Benchmarks: decoding methods side by side on the same prompts, interleaved prompt by prompt.

Each prompt is decoded by every method before the next prompt starts, so machine drift hits all
methods alike; speedups are ratios against ``ar`` measured in the same run. With ``trajectories``
N > 1 each method samples N trajectories per prompt one after another, sharing one drafter memory
per prompt (STAND's n-gram store, Token Recycling's matrix) so later trajectories draft from earlier
ones — the best-of-N setting of the STAND paper. Prompts with reference answers get majority-vote
accuracy over their N trajectories, computed identically for every method. Nothing here is asserted
by tests: speed is reported, not tested.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from stand_runtime import StandError, generate
from stand_runtime.decode import METHODS, STORE_METHODS, resolve_tree
from stand_runtime.drafters import RecyclingMatrix
from stand_runtime.metrics import acceptance_by_depth, summarise_draft_quality
from stand_runtime.ngram_store import NGramStore

from .answers import extract_answer, majority_vote, normalise
from .datasets import Prompt


@dataclass(frozen=True)
class BenchMethod:
    """One decoding configuration: a method and (for tree methods) a tree spec."""

    method: str
    tree: str | None = None
    feed_rejected: bool = False

    @property
    def label(self) -> str:
        label = self.method if self.tree is None or self.method in ("ar", "pld") else f"{self.method}[{self.tree}]"
        return label + REJECTED_SUFFIX if self.feed_rejected else label


REJECTED_SUFFIX = "+rejected"
"""Appended to a STAND method name: feed the store at rejected tree nodes too (DESIGN §3.1 option)."""


def parse_methods(methods: str, trees: list[str] | None) -> list[BenchMethod]:
    """``"ar,stand,stand+rejected"`` and tree specs → configurations (each STAND method once per tree).

    A STAND method name with the ``+rejected`` suffix feeds its store at rejected tree nodes too.

    Raises:
        StandError: an unknown method name (the message lists the valid ones), or a duplicate.
    """
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise StandError("no methods given")
    valid = [*METHODS, *(method + REJECTED_SUFFIX for method in STORE_METHODS)]
    for name in names:
        if name not in valid:
            raise StandError(f"unknown method {name!r} (valid: {', '.join(valid)})")
    if len(set(names)) < len(names):
        raise StandError(f"a method is listed twice in {methods!r}")
    out = []
    for name in names:
        base, rejected = name.removesuffix(REJECTED_SUFFIX), name.endswith(REJECTED_SUFFIX)
        if base in STORE_METHODS:
            out += [BenchMethod(base, tree, rejected) for tree in (trees or [None])]
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
    tokens: int = 0
    steps: int = 0
    decode_s: float = 0.0
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

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.graded if self.graded else None

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


def _memory(method: str, vocab: int):
    if method in STORE_METHODS:
        return NGramStore()
    if method == "recycle":
        return RecyclingMatrix(vocab)
    return None


def run_bench(
    model, tokenizer, prompts: list[Prompt], methods: list[BenchMethod], *, temperature: float, top_p: float,
    max_new_tokens: int, seed: int, trajectories: int = 1, on_run: Callable[[str, str, object], None] | None = None,
    on_prompt: Callable[[int, list[MethodResult]], None] | None = None, share_across_prompts: bool = False,
) -> list[MethodResult]:
    """Decode every prompt with every method (N trajectories each), interleaved; per-method totals.

    Each method's drafter memory (store or matrix) is shared by the trajectories of one prompt, or by
    every prompt with ``share_across_prompts``. ``on_run(prompt_id, label, result)`` is called after every trajectory and
    ``on_prompt(prompts_done, results)`` after every prompt (e.g. to save partial results).

    Raises:
        StandError: a bad tree (before any decoding), or trajectories < 1.
    """
    if trajectories < 1:
        raise StandError(f"trajectories must be >= 1, got {trajectories}")
    results = []
    for spec in methods:
        nodes = 0 if spec.method == "ar" else (10 if spec.method == "pld" else resolve_tree(spec.tree).num_nodes)
        result = MethodResult(spec.label, spec.method, spec.tree, nodes, spec.feed_rejected)
        result.by_trajectory = [[0, 0] for _ in range(trajectories)]
        results.append(result)
    shared = [_memory(spec.method, model.config.vocab_size) if share_across_prompts else None for spec in methods]
    for index, prompt in enumerate(prompts):
        for spec, result, common in zip(methods, results, shared):
            memory = common if share_across_prompts else _memory(spec.method, model.config.vocab_size)
            answers, runs = [], []
            for trajectory in range(trajectories):
                run = generate(
                    model, tokenizer, prompt.text, method=spec.method, tree=spec.tree, temperature=temperature,
                    top_p=top_p, max_new_tokens=max_new_tokens, seed=seed + 1000 * index + trajectory, store=memory,
                    feed_rejected=spec.feed_rejected, diagnose=True,
                )
                stats = run.stats
                result.tokens += stats.new_tokens
                result.steps += stats.target_forwards
                result.decode_s += stats.decode_s
                result.by_trajectory[trajectory][0] += stats.new_tokens
                result.by_trajectory[trajectory][1] += stats.target_forwards
                result.accepted_per_step += stats.accepted_per_step
                result.bonus_per_step += stats.bonus_per_step
                if stats.store is not None and "root" in stats.store:
                    result.root_quality.append(stats.store["root"])
                answers.append(extract_answer(run.text))
                runs.append({"tokens": stats.new_tokens, "steps": stats.target_forwards,
                             "acceptance_length": stats.acceptance_length, "tokens_per_s": stats.tokens_per_s,
                             "answer": answers[-1]})
                if on_run is not None:
                    on_run(prompt.id, spec.label, run)
            if spec.method in STORE_METHODS:  # store counters are cumulative: each store's last
                store_stats = {k: v for k, v in run.stats.store.items() if k != "root"}
                if share_across_prompts:
                    result.final_stores = [store_stats]
                else:
                    result.final_stores.append(store_stats)
            entry = {"prompt": prompt.id, "trajectories": runs}
            if prompt.answer is not None:
                vote = majority_vote(answers)
                entry["majority_answer"] = vote
                entry["correct"] = vote is not None and vote == normalise(prompt.answer)
                result.graded += 1
                result.correct += int(entry["correct"])
                result.trajectories_graded += len(answers)
                result.trajectories_correct += sum(answer == normalise(prompt.answer) for answer in answers)
            result.per_prompt.append(entry)
        if on_prompt is not None:
            on_prompt(index + 1, results)
    return results


def speedups(results: list[MethodResult]) -> dict[str, float | None]:
    """Throughput ratio of each configuration against ``ar`` in the same run (None without ``ar``)."""
    base = next((r for r in results if r.method == "ar"), None)
    return {r.label: (r.tokens_per_s / base.tokens_per_s if base and base.tokens_per_s else None) for r in results}


def results_json(results: list[MethodResult], settings: dict) -> dict:
    """The benchmark as JSON: a ``results`` list plus the settings."""
    ratio = speedups(results)
    return {
        "settings": settings,
        "results": [
            {"method": r.method, "label": r.label, "tree": r.tree, "tree_nodes": r.tree_nodes,
             "feed_rejected": r.feed_rejected,
             "acceptance_length": r.acceptance_length, "tokens_per_s": r.tokens_per_s, "speedup": ratio[r.label],
             "accuracy": r.accuracy, "correct": r.correct, "graded": r.graded,
             "trajectories_correct": r.trajectories_correct, "trajectories_graded": r.trajectories_graded,
             "acceptance_by_trajectory": r.acceptance_by_trajectory(),
             "tokens": r.tokens, "steps": r.steps, "decode_s": r.decode_s, "diagnostics": r.diagnostics(),
             "per_prompt": r.per_prompt}
            for r in results
        ],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
