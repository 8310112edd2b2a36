"""The most drafts of a measured acceptance can gain at batch B on a latency profile
(:mod:`treeopt.evaluate.ceiling`), from a ``treeopt bench --json`` or ``treeopt search --json`` file:
a method's acceptance rate per depth and the latency profile the run recorded.

Run: ``python benchmarks/ceiling.py RESULT.json --method 'stand[dynamic-auto]' --batches 1 4 8 16``
(a search file names methods as ``stand``).
"""

from __future__ import annotations

import argparse
import json

from stand_runtime.target.latency import LatencyProfile
from treeopt.evaluate.ceiling import ceiling, depth_rates


def method_record(result: dict, method: str) -> tuple[list[dict], float, float | None]:
    """(acceptance by depth, measured τ, measured speedup or None) of ``method`` in a bench or search file."""
    if "results" in result:  # treeopt bench
        found = [r for r in result["results"] if r["label"] == method]
        if not found:
            raise SystemExit(f"no method {method!r}: {', '.join(r['label'] for r in result['results'])}")
        return found[0]["diagnostics"]["acceptance_by_depth"], found[0]["acceptance_length"], found[0]["speedup"]
    summary = result["summary"]  # treeopt search
    if method not in summary:
        raise SystemExit(f"no method {method!r}: {', '.join(summary)}")
    base = summary.get("ar", {}).get("tokens_per_s")
    row = summary[method]
    return row["acceptance_by_depth"], row["acceptance_length"], row["tokens_per_s"] / base if base else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a treeopt bench --json or treeopt search --json file")
    parser.add_argument("--method", default="stand[dynamic-auto]", help="the method's label in the file")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--depths", type=int, default=8, help="deepest chain token considered")
    args = parser.parse_args()
    with open(args.result) as handle:
        result = json.load(handle)
    depths, tau, speedup = method_record(result, args.method)
    rates = depth_rates(depths, args.depths)
    profile = LatencyProfile(tuple(result["latency_profile"]["sizes"]), tuple(result["latency_profile"]["seconds"]))
    measured = "" if speedup is None else f", {speedup:.2f}x plain"
    print(f"{args.method}: acceptance per depth {[round(r, 2) for r in rates]} (measured τ {tau:.2f}{measured})")
    for batch in args.batches:
        best, length = ceiling(rates, profile, batch)
        print(f"  B {batch:3d}: ceiling {best:.2f}x plain (chain of {length}, t(B) {1000 * profile.at(float(batch)):.1f} ms)")


if __name__ == "__main__":
    main()
