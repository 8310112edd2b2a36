"""Benchmarks: decoding methods side by side on the same prompts, interleaved prompt by prompt.

Each prompt is decoded by every method before the next prompt starts, so machine drift hits all
methods alike; speedups are ratios against ``ar`` measured in the same run. Nothing here is asserted
by tests: speed is reported, not tested.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from stand_runtime import StandError, generate
from stand_runtime.decode import METHODS, resolve_tree
from stand_runtime.ngram_store import NGramStore

from .datasets import Prompt


@dataclass(frozen=True)
class BenchMethod:
    """One decoding configuration: a method and (for drafting methods) a tree spec."""

    method: str
    tree: str | None = None

    @property
    def label(self) -> str:
        return self.method if self.tree is None or self.method == "ar" else f"{self.method}[{self.tree}]"


def parse_methods(methods: str, trees: list[str] | None) -> list[BenchMethod]:
    """``"ar,stand"`` and tree specs → configurations (each drafting method once per tree).

    Raises:
        StandError: an unknown method name (the message lists the valid ones).
    """
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if not names:
        raise StandError("no methods given")
    for name in names:
        if name not in METHODS:
            raise StandError(f"unknown method {name!r} (valid: {', '.join(METHODS)})")
    out = []
    for name in names:
        if name == "ar":
            out.append(BenchMethod("ar"))
        else:
            out += [BenchMethod(name, tree) for tree in (trees or [None])]
    return out


@dataclass
class MethodResult:
    """Totals of one configuration over the prompts."""

    label: str
    method: str
    tree: str | None
    tree_nodes: int
    tokens: int = 0
    steps: int = 0
    decode_s: float = 0.0
    per_prompt: list[dict] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0


def run_bench(
    model, tokenizer, prompts: list[Prompt], methods: list[BenchMethod], *, temperature: float, top_p: float,
    max_new_tokens: int, seed: int, on_run: Callable[[str, str, object], None] | None = None,
) -> list[MethodResult]:
    """Decode every prompt with every method, interleaved; return per-method totals.

    Raises:
        StandError: a bad tree or prompt (before any decoding starts for trees).
    """
    results = []
    for spec in methods:
        nodes = 0 if spec.method == "ar" else resolve_tree(spec.tree).num_nodes
        results.append(MethodResult(spec.label, spec.method, spec.tree, nodes))
    for index, prompt in enumerate(prompts):
        for spec, result in zip(methods, results):
            run = generate(
                model, tokenizer, prompt.text, method=spec.method, tree=spec.tree, temperature=temperature,
                top_p=top_p, max_new_tokens=max_new_tokens, seed=seed + index, store=None if spec.method == "ar" else NGramStore(),
            )
            stats = run.stats
            result.tokens += stats.new_tokens
            result.steps += stats.target_forwards
            result.decode_s += stats.decode_s
            result.per_prompt.append({"prompt": prompt.id, "tokens": stats.new_tokens, "steps": stats.target_forwards,
                                      "acceptance_length": stats.acceptance_length, "tokens_per_s": stats.tokens_per_s})
            if on_run is not None:
                on_run(prompt.id, spec.label, run)
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
             "acceptance_length": r.acceptance_length, "tokens_per_s": r.tokens_per_s, "speedup": ratio[r.label],
             "tokens": r.tokens, "steps": r.steps, "decode_s": r.decode_s, "per_prompt": r.per_prompt}
            for r in results
        ],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
