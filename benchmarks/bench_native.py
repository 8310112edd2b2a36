"""STAND's dynamic tree on the Python store vs the native one (stand_runtime._native), on recorded traces.

The trace bench's replay (``treeopt bench-traces``: greedy, no model, each group's traces sharing one
store) of ``stand`` on ``dynamic-80`` with the copy path, run group by group with the Python and the
native store interleaved (the order alternating from group to group), so both see the same machine
state. Prints drafting and feeding µs per step for each and checks that both took the same steps.

Run: ``python benchmarks/bench_native.py ../shared/data/traces_skythought.jsonl --groups 10 --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from stand_runtime.store.native_store import NATIVE_ENV
from stand_runtime.target.models import load_tokenizer
from treeopt.evaluate.trace_bench import load_replay_groups, parse_trace_methods, run_trace_bench

STORES = ("python", "native")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces")
    parser.add_argument("--groups", type=int, default=None, help="first N groups (default: all)")
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--tree", default="dynamic-80")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    groups, _ = load_replay_groups(args.traces, load_tokenizer("smollm2-135m"), max_tokens=args.max_tokens,
                                   min_group_size=2)
    groups = groups[: args.groups] if args.groups else groups
    specs = parse_trace_methods("stand", args.tree)
    runs = {name: [] for name in STORES}
    for g, group in enumerate(groups):
        for name in (STORES if g % 2 == 0 else STORES[::-1]):
            os.environ[NATIVE_ENV] = "1" if name == "native" else "0"
            runs[name].append(run_trace_bench([group], specs)[0].runs[0])
    os.environ.pop(NATIVE_ENV, None)
    out = {"traces": args.traces, "groups": len(groups), "tree": args.tree, "max_tokens": args.max_tokens}
    for name in STORES:
        r = np.stack(runs[name])  # [groups, traces, (tokens, steps, drafted, drafting s, feeding s)]
        steps = np.nansum(r[..., 1])
        out[name] = {"steps": float(steps), "tokens": float(np.nansum(r[..., 0])),
                     "tau": float(np.nansum(r[..., 0]) / steps),
                     "drafting_us_per_step": float(1e6 * np.nansum(r[..., 3]) / steps),
                     "feeding_us_per_step": float(1e6 * np.nansum(r[..., 4]) / steps),
                     "drafting_us_per_step_by_group": (1e6 * np.nansum(r[..., 3], axis=1) / np.nansum(r[..., 1], axis=1)).tolist()}
    same = all(np.array_equal(a[..., :3], b[..., :3], equal_nan=True) for a, b in zip(runs["python"], runs["native"]))
    out["same_steps"] = bool(same)
    for key in ("drafting_us_per_step", "feeding_us_per_step"):
        out[f"{key}_ratio"] = out["python"][key] / out["native"][key]
    print(json.dumps({k: v for k, v in out.items() if k not in STORES}, indent=1))
    for name in STORES:
        print(name, {k: round(v, 2) for k, v in out[name].items() if not isinstance(v, list)})
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
