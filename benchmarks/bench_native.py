"""STAND drafted over the Python store vs the native one (stand_runtime._native), on recorded traces.

The trace bench's replay (``treeopt bench-traces``: greedy, no model, each group's traces sharing one
store) of STAND's methods, run group by group with the Python and the native store interleaved (the
order alternating from group to group), so both see the same machine state: ``stand`` on
``dynamic-80`` (the dynamic tree in C++, docs/algorithms.md §3.8) and ``stand-static`` on the bundled
80-node static tree (the static fill and the copy index in C++), both with the copy path. Prints, per
trace file and method, drafting and feeding µs per step for each store, their ratios, and checks that
both took the same steps. ``--profile N`` also profiles the native runs (cProfile, a pass of its own)
and prints the N functions with the largest share of their time (shares travel across machines;
absolute times do not).

Run: ``python benchmarks/bench_native.py /work/shared/data/traces_skythought.jsonl
/work/shared/data/traces_qwen25math_bon8.jsonl --methods stand,stand-static --groups 10 --json out.json``
(both files group by ``sample_group``, their text is ``trace`` and their prompt ``problem``, the defaults).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats

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
            "host_us_per_step": float(1e6 * (np.nansum(r[..., 3]) + np.nansum(r[..., 4])) / steps),
            "drafting_us_per_step_by_group": (1e6 * np.nansum(r[..., 3], axis=1) / np.nansum(r[..., 1], axis=1)).tolist()}


def profile_shares(profile: cProfile.Profile, top: int) -> list[dict]:
    """The ``top`` functions by own time, each with its share of the profiled time and calls."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    return [{"function": f"{os.path.basename(file)}:{line}({name})", "share": own / total, "calls": calls}
            for (file, line, name), (_, calls, own, _, _) in rows]


def compare(groups, spec, stores, profile_top: int) -> dict:
    """One method over ``groups``, the stores interleaved group by group (then an optional profile)."""
    runs = {name: [] for name in stores}
    for g, group in enumerate(groups):
        for name in (stores if g % 2 == 0 else stores[::-1]):
            os.environ[NATIVE_ENV] = "1" if name == "native" else "0"
            runs[name].append(run_trace_bench([group], [spec])[0].runs[0])
    out = {"tree": spec.tree, **{name: summary(runs[name]) for name in stores}}
    if profile_top and "native" in stores:  # a pass of its own: the profiler's overhead stays out of the timed runs
        os.environ[NATIVE_ENV] = "1"
        profile = cProfile.Profile()
        profile.runcall(run_trace_bench, groups, [spec])
        out["native_profile"] = profile_shares(profile, profile_top)
    os.environ.pop(NATIVE_ENV, None)
    if len(stores) == 2:
        out["same_steps"] = bool(all(np.array_equal(a[..., :3], b[..., :3], equal_nan=True)
                                     for a, b in zip(runs["python"], runs["native"])))
        for key in ("drafting_us_per_step", "feeding_us_per_step", "host_us_per_step"):
            out[f"{key}_ratio"] = out["python"][key] / out["native"][key]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="trace JSONL files (each reported on its own)")
    parser.add_argument("--methods", default="stand", help="trace bench methods, e.g. stand,stand-static")
    parser.add_argument("--stores", default="python,native", help="python,native (interleaved) or one of them")
    parser.add_argument("--groups", type=int, default=None, help="first N groups of each file (default: all)")
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--tree", default="dynamic-80", help="the tree of stand / stand-det")
    parser.add_argument("--group-field", default="sample_group")
    parser.add_argument("--text-field", default="trace")
    parser.add_argument("--prompt-field", default="problem")
    parser.add_argument("--profile", type=int, default=0, help="profile the native runs; print the top N functions")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    stores = tuple(s for s in args.stores.split(",") if s in STORES)
    tokenizer = load_tokenizer("smollm2-135m")
    tree = args.tree if any(m in ("stand", "stand-det") for m in args.methods.split(",")) else None
    results = []
    for path in args.traces:
        groups, _ = load_replay_groups(path, tokenizer, group_field=args.group_field, text_field=args.text_field,
                                       prompt_field=args.prompt_field, max_tokens=args.max_tokens, min_group_size=2)
        groups = groups[: args.groups] if args.groups else groups
        out = {"traces": path, "groups": len(groups), "max_tokens": args.max_tokens, "methods": {}}
        for spec in parse_trace_methods(args.methods, tree):
            result = out["methods"][spec.label] = compare(groups, spec, stores, args.profile)
            print(path, spec.label, json.dumps({k: v for k, v in result.items() if k not in (*STORES, "native_profile")}))
            for name in stores:
                print(" ", name, {k: round(v, 2) for k, v in result[name].items() if not isinstance(v, list)})
            for row in result.get("native_profile", []):
                print(f"  {100 * row['share']:5.1f}%  {row['calls']:>8}  {row['function']}")
        results.append(out)
        if args.json:
            write_json_atomic(args.json, {"files": results})


if __name__ == "__main__":
    main()
