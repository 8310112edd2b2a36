"""Merge `treeopt bench --json` files run on disjoint prompts; print acceptance lengths by trajectory,
ratios between methods with bootstrap confidence intervals over prompts, and the diagnostics.

    python benchmarks/summarize_bench.py runs/bench-a.json runs/bench-b.json [--pairs stand/recycle,stand/pld]

Acceptance length (tau) = tokens / target forwards, pooled over prompts. A ratio's 95% interval
resamples prompts with replacement (4000 draws), keeping each prompt's trajectories together, so it
reflects prompt-to-prompt spread, which dominates here.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np


def load(paths: list[str]) -> dict:
    """Per method label: per prompt, [(tokens, steps)] per trajectory; plus summed diagnostics."""
    runs: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(dict)
    depth: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    root: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for path in paths:
        with open(path) as handle:
            data = json.load(handle)
        for result in data["results"]:
            label = result["label"]
            for prompt in result["per_prompt"]:
                runs[label][prompt["prompt"]] = [(t["tokens"], t["steps"]) for t in prompt["trajectories"]]
            diagnostics = result.get("diagnostics", {})
            for row in diagnostics.get("acceptance_by_depth", []):
                depth[label][row["depth"]][0] += row["offered"]
                depth[label][row["depth"]][1] += row["accepted"]
            for n, row in diagnostics.get("root", {}).items():
                if n != "all":
                    root[label][n]["steps"] += row["steps"]
                    for key in ("overlap", "top1", "topm", "sampled_m"):
                        root[label][n][key] += row.get(key, 0.0) * row["steps"]
    return {"runs": runs, "depth": depth, "root": root}


def tau(runs: dict, prompts: list[str], trajectories: list[int]) -> float:
    """Pooled acceptance length over the given prompts and trajectory indices."""
    tokens = sum(runs[p][t][0] for p in prompts for t in trajectories if t < len(runs[p]))
    steps = sum(runs[p][t][1] for p in prompts for t in trajectories if t < len(runs[p]))
    return tokens / steps if steps else float("nan")


def ratio_with_interval(a: dict, b: dict, trajectories: list[int], rng, draws: int = 4000,
                        trajectories_b: list[int] | None = None) -> str:
    """tau(a) / tau(b) on the shared prompts (b over ``trajectories_b`` if given, else the same
    trajectories), with a 95% bootstrap interval over prompts."""
    prompts = sorted(set(a) & set(b))
    other = trajectories if trajectories_b is None else trajectories_b
    point = tau(a, prompts, trajectories) / tau(b, prompts, other)
    boots = []
    for _ in range(draws):
        sample = list(rng.choice(prompts, len(prompts)))
        boots.append(tau(a, sample, trajectories) / tau(b, sample, other))
    low, high = np.percentile(boots, [2.5, 97.5])
    return f"{point:.2f} [{low:.2f}, {high:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--pairs", default="stand/recycle,stand/pld,stand/stand-det,stand+rejected/stand",
                        help="numerator/denominator method labels, comma-separated")
    args = parser.parse_args()
    data = load(args.files)
    runs = data["runs"]
    rng = np.random.default_rng(0)
    count = max(len(trajs) for method in runs.values() for trajs in method.values())
    print(f"prompts per method: {', '.join(f'{m} {len(p)}' for m, p in runs.items())}; trajectories {count}")
    print(f"\n{'method':28s} {'tau':>6s}  tau of trajectory 1..{count}")
    for label, method in runs.items():
        prompts = sorted(method)
        per = " ".join(f"{tau(method, prompts, [t]):.2f}" for t in range(count))
        print(f"{label:28s} {tau(method, prompts, list(range(count))):6.3f}  {per}")
    last, every = [count - 1], list(range(count))
    print(f"\nratios [95% CI over prompts]: trajectory 1 | all {count} pooled | trajectory {count}")
    for pair in args.pairs.split(","):
        a, b = pair.split("/")
        if a in runs and b in runs:
            print(f"  {pair:28s} {ratio_with_interval(runs[a], runs[b], [0], rng)} | "
                  f"{ratio_with_interval(runs[a], runs[b], every, rng)} | {ratio_with_interval(runs[a], runs[b], last, rng)}")
    if count > 1:
        print(f"\ngrowth tau(trajectory {count}) / tau(trajectory 1) [95% CI]")
        for label, method in runs.items():
            print(f"  {label:28s} {ratio_with_interval(method, method, last, rng, trajectories_b=[0])}")
    print("\nacceptance rate per depth (accepted / offered), depths 1-8")
    for label, rows in data["depth"].items():
        rates = [f"{rows[d][1] / rows[d][0]:.2f}" if rows[d][0] else "  - " for d in range(1, 9)]
        print(f"  {label:28s} " + " ".join(rates))
    print("\nSTAND roots by matched context length n (0 = miss): share, then the chance that depth 1 is accepted:")
    print("  overlap = sum min(p,q) (one sampled draft), top1 = p(argmax q) (one deterministic draft),")
    print("  topm / sampled_m = all root children deterministic / sampled without replacement")
    for label, by_n in data["root"].items():
        total = sum(row["steps"] for row in by_n.values())
        print(f"  {label}")
        for n in sorted(by_n, reverse=True):
            row = by_n[n]
            line = f"    n={n} share {row['steps'] / total:.3f}"
            if n != "0" and row["steps"]:
                line += " " + " ".join(f"{k} {row[k] / row['steps']:.3f}" for k in ("overlap", "top1", "topm", "sampled_m"))
            print(line)


if __name__ == "__main__":
    main()
