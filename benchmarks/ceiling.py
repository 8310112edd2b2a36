"""The most drafts of a measured acceptance can gain at batch B on a latency profile (issue 23).

Reads a ``treeopt bench --json`` file: a method's acceptance rate per depth (accepted / offered) and
the latency profile the bench ran with. Prints, per batch size B, the best expected speedup over plain
decoding of an idealised draft: every row drafts a chain of L tokens at every step, its depth-d token
accepted with the measured conditional rate α_d, a forward over B rows of 1 + L tokens costing
t(B (1 + L)) (the batch-1 profile over the batch's tokens, as the value rule prices a padded batch),
and no host work:

    speedup(B, L) = (1 + Σ_{d <= L} Π_{j <= d} α_j) · t(B) / t(B (1 + L)),   maximised over L.

It is optimistic three ways (every row has a draft at every step, where the store sometimes has
nothing; a tree's per-depth rates, with several children at a depth, at a chain's cost; no host
work), so a target above it is out of reach for drafts of that acceptance on that machine, however
they are sized; only better acceptance (or a flatter cost curve: a GPU) moves it.

Run: ``python benchmarks/ceiling.py RESULT.json --method 'stand[dynamic-auto]' --batches 1 4 8 16``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from stand_runtime.target.latency import LatencyProfile


def chain_gains(rates: list[float]) -> np.ndarray:
    """``[D + 1]`` expected tokens a step of a chain of 0 .. D drafts emits: 1 + Σ_{d<=L} Π_{j<=d} α_j."""
    return 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(rates))])


def ceiling(rates: list[float], profile: LatencyProfile, batch: int) -> tuple[float, int]:
    """The best ``speedup(B, L)`` (module docstring) over L = 0 .. len(rates), and that L."""
    gains = chain_gains(rates)
    cost = np.array([profile.at(float(batch * (1 + n))) for n in range(len(gains))]) / profile.at(float(batch))
    speedups = gains / cost
    best = int(np.argmax(speedups))
    return float(speedups[best]), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a treeopt bench --json file")
    parser.add_argument("--method", default="stand[dynamic-auto]", help="the method's label in the file")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--depths", type=int, default=8, help="deepest chain token considered")
    args = parser.parse_args()
    with open(args.result) as handle:
        result = json.load(handle)
    found = [r for r in result["results"] if r["label"] == args.method]
    if not found:
        raise SystemExit(f"no method {args.method!r} in {args.result}: "
                         f"{', '.join(r['label'] for r in result['results'])}")
    depths = found[0]["diagnostics"]["acceptance_by_depth"][: args.depths]
    rates = [d["rate"] for d in depths]
    profile = LatencyProfile(tuple(result["latency_profile"]["sizes"]), tuple(result["latency_profile"]["seconds"]))
    print(f"{args.method}: acceptance per depth {[round(r, 2) for r in rates]} "
          f"(measured τ {found[0]['acceptance_length']:.2f}, {found[0]['speedup']:.2f}x plain at batch 1)")
    for batch in args.batches:
        speedup, length = ceiling(rates, profile, batch)
        print(f"  B {batch:3d}: ceiling {speedup:.2f}x plain (chain of {length}, "
              f"t(B) {1000 * profile.at(float(batch)):.1f} ms)")


if __name__ == "__main__":
    main()
