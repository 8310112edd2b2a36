"""STAND's dynamic tree on the Python store vs the native one (stand_runtime._native), on recorded traces.

The trace bench's replay (``treeopt bench-traces``: greedy, no model, each group's traces sharing one
store) of ``stand`` on ``dynamic-80`` with the copy path, run group by group with the Python and the
native store interleaved (the order alternating from group to group), so both see the same machine
state. Prints, per trace file, drafting and feeding µs per step for each store and checks that both
took the same steps. ``--profile N`` also profiles the native runs (cProfile) and prints the N
functions with the largest share of their time (shares travel across machines; absolute times do not).

Run: ``python benchmarks/bench_native.py /work/shared/data/traces_skythought.jsonl
/work/shared/data/traces_qwen25math_bon8.jsonl --groups 10 --json out.json`` (both files group by
``sample_group``, their text is ``trace`` and their prompt ``problem``, the defaults).
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


def bench_file(path: str, args, tokenizer) -> dict:
    """Both stores over the first ``args.groups`` groups of one trace file, interleaved group by group."""
    groups, _ = load_replay_groups(path, tokenizer, group_field=args.group_field, text_field=args.text_field,
                                   prompt_field=args.prompt_field, max_tokens=args.max_tokens, min_group_size=2)
    groups = groups[: args.groups] if args.groups else groups
    specs = parse_trace_methods("stand", args.tree)
    runs = {name: [] for name in STORES}
    for g, group in enumerate(groups):
        for name in (STORES if g % 2 == 0 else STORES[::-1]):
            os.environ[NATIVE_ENV] = "1" if name == "native" else "0"
            runs[name].append(run_trace_bench([group], specs)[0].runs[0])
    profile = None
    if args.profile:  # a pass of its own: the profiler's overhead stays out of the timed runs
        os.environ[NATIVE_ENV] = "1"
        profile = cProfile.Profile()
        profile.runcall(run_trace_bench, groups, specs)
    os.environ.pop(NATIVE_ENV, None)
    out = {"traces": path, "groups": len(groups), "tree": args.tree, "max_tokens": args.max_tokens}
    for name in STORES:
        r = np.stack(runs[name])  # [groups, traces, (tokens, steps, drafted, drafting s, feeding s)]
        steps = np.nansum(r[..., 1])
        out[name] = {"steps": float(steps), "tokens": float(np.nansum(r[..., 0])),
                     "tau": float(np.nansum(r[..., 0]) / steps),
                     "drafting_us_per_step": float(1e6 * np.nansum(r[..., 3]) / steps),
                     "feeding_us_per_step": float(1e6 * np.nansum(r[..., 4]) / steps),
                     "drafting_us_per_step_by_group": (1e6 * np.nansum(r[..., 3], axis=1) / np.nansum(r[..., 1], axis=1)).tolist()}
    out["same_steps"] = bool(all(np.array_equal(a[..., :3], b[..., :3], equal_nan=True)
                                 for a, b in zip(runs["python"], runs["native"])))
    for key in ("drafting_us_per_step", "feeding_us_per_step"):
        out[f"{key}_ratio"] = out["python"][key] / out["native"][key]
    out["native"]["host_us_per_step"] = out["native"]["drafting_us_per_step"] + out["native"]["feeding_us_per_step"]
    if profile is not None:
        out["native_profile"] = profile_shares(profile, args.profile)
    return out


def profile_shares(profile: cProfile.Profile, top: int) -> list[dict]:
    """The ``top`` functions by own time, each with its share of the profiled time and calls."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    total = stats.total_tt
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    return [{"function": f"{os.path.basename(file)}:{line}({name})", "share": own / total, "calls": calls}
            for (file, line, name), (_, calls, own, _, _) in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="trace JSONL files (each reported on its own)")
    parser.add_argument("--groups", type=int, default=None, help="first N groups of each file (default: all)")
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--tree", default="dynamic-80")
    parser.add_argument("--group-field", default="sample_group")
    parser.add_argument("--text-field", default="trace")
    parser.add_argument("--prompt-field", default="problem")
    parser.add_argument("--profile", type=int, default=0, help="profile the native runs; print the top N functions")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    tokenizer = load_tokenizer("smollm2-135m")
    results = []
    for path in args.traces:
        out = bench_file(path, args, tokenizer)
        results.append(out)
        print(json.dumps({k: v for k, v in out.items() if k not in (*STORES, "native_profile")}, indent=1))
        for name in STORES:
            print(name, {k: round(v, 2) for k, v in out[name].items() if not isinstance(v, list)})
        for row in out.get("native_profile", []):
            print(f"  {100 * row['share']:5.1f}%  {row['calls']:>8}  {row['function']}")
    if args.json:
        write_json_atomic(args.json, {"files": results})


if __name__ == "__main__":
    main()
