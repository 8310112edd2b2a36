"""STAND drafted over the Python store vs the native one (stand_runtime._native), on recorded traces.

The trace bench's replay (``treeopt bench-traces``: greedy, no model, each group's traces sharing one
store) of STAND's methods, run group by group with the Python and the native store interleaved (the
order alternating from group to group), so both see the same machine state: ``stand`` on
``dynamic-80`` (the dynamic tree in C++, docs/design.md §3.8) and ``stand-static`` on the bundled
80-node static tree (the static fill and the copy index in C++), both with the copy path. Prints
drafting and feeding µs per step for each, their ratios, and checks that both took the same steps.

Run: ``python benchmarks/bench_native.py ../shared/data/traces_skythought.jsonl --methods stand,stand-static
--groups 10 --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from stand_runtime.files import write_json_atomic
from stand_runtime.store.native_store import NATIVE_ENV
from stand_runtime.target.models import load_tokenizer
from treeopt.evaluate.trace_bench import load_replay_groups, parse_trace_methods, run_trace_bench

STORES = ("python", "native")


def summary(runs: list[np.ndarray]) -> dict:
    """Steps, tokens, τ and µs per step of one method on one store (``runs``: per group
    ``[traces, (tokens, steps, drafted, drafting s, feeding s)]``)."""
    r = np.stack(runs)
    steps = np.nansum(r[..., 1])
    return {"steps": float(steps), "tokens": float(np.nansum(r[..., 0])), "tau": float(np.nansum(r[..., 0]) / steps),
            "drafting_us_per_step": float(1e6 * np.nansum(r[..., 3]) / steps),
            "feeding_us_per_step": float(1e6 * np.nansum(r[..., 4]) / steps),
            "drafting_us_per_step_by_group": (1e6 * np.nansum(r[..., 3], axis=1) / np.nansum(r[..., 1], axis=1)).tolist()}


def compare(groups, spec) -> dict:
    """One method, the Python and the native store interleaved group by group."""
    runs = {name: [] for name in STORES}
    for g, group in enumerate(groups):
        for name in (STORES if g % 2 == 0 else STORES[::-1]):
            os.environ[NATIVE_ENV] = "1" if name == "native" else "0"
            runs[name].append(run_trace_bench([group], [spec])[0].runs[0])
    os.environ.pop(NATIVE_ENV, None)
    out = {"tree": spec.tree, **{name: summary(runs[name]) for name in STORES}}
    out["same_steps"] = bool(all(np.array_equal(a[..., :3], b[..., :3], equal_nan=True)
                                 for a, b in zip(runs["python"], runs["native"])))
    for key in ("drafting_us_per_step", "feeding_us_per_step"):
        out[f"{key}_ratio"] = out["python"][key] / out["native"][key]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces")
    parser.add_argument("--methods", default="stand", help="trace bench methods, e.g. stand,stand-static")
    parser.add_argument("--groups", type=int, default=None, help="first N groups (default: all)")
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--tree", default="dynamic-80", help="the tree of stand / stand-det")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    groups, _ = load_replay_groups(args.traces, load_tokenizer("smollm2-135m"), max_tokens=args.max_tokens,
                                   min_group_size=2)
    groups = groups[: args.groups] if args.groups else groups
    tree = args.tree if any(m in ("stand", "stand-det") for m in args.methods.split(",")) else None
    out = {"traces": args.traces, "groups": len(groups), "max_tokens": args.max_tokens, "methods": {}}
    for spec in parse_trace_methods(args.methods, tree):
        result = out["methods"][spec.label] = compare(groups, spec)
        print(spec.label, json.dumps({k: v for k, v in result.items() if k not in STORES}))
        for name in STORES:
            print(" ", name, {k: round(v, 2) for k, v in result[name].items() if not isinstance(v, list)})
    if args.json:
        write_json_atomic(args.json, out)


if __name__ == "__main__":
    main()
