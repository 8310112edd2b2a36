"""How many prompts a tokens/s comparison of two methods needs: the per-prompt spread of their ratio.

    python benchmarks/prompts_needed.py benchmarks/results/matrix31-*.json [--against pld,suffix] [--json out.json]

Each method of a `treeopt bench` run samples its own texts (every method is lossless, so each text is a
draw from the target, but not the same draw), and at one trajectory a text that loops gives a method
several times the speed of a text that does not. Per prompt this script takes each method's tokens/s
(its trajectories' tokens over their decoding seconds) and the log of STAND's over another method's;
the mean of those logs over prompts is the ratio's geometric mean, and their standard deviation says
how many prompts resolve it: a 95% interval of +-5% needs n = (1.96 sd / ln 1.05)^2 prompts, and
telling a ratio of 1.1 from 1.0 (the interval's half-width below ln(1.1) / 2) n = (3.92 sd / ln 1.1)^2.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics


def per_prompt_rates(result: dict) -> dict[str, float]:
    """Prompt id -> tokens/s of one method's result (all its trajectories of that prompt together)."""
    rates = {}
    for prompt in result["per_prompt"]:
        tokens = sum(t["tokens"] for t in prompt["trajectories"])
        seconds = sum(t["decode_s"] for t in prompt["trajectories"])
        if seconds > 0:
            rates[prompt["prompt"]] = tokens / seconds
    return rates


def compare(path: str, against: list[str]) -> list[dict]:
    """One row per other method of ``path``'s run: STAND's per-prompt ratio over it, summarised."""
    with open(path) as handle:
        data = json.load(handle)
    results = {r["label"]: r for r in data["results"]}
    stand = next((label for label in results if label.startswith("stand")), None)
    if stand is None:
        return []
    mine = per_prompt_rates(results[stand])
    rows = []
    for label in against:
        if label not in results:
            continue
        theirs = per_prompt_rates(results[label])
        logs = [math.log(mine[p] / theirs[p]) for p in mine if p in theirs]
        if len(logs) < 2:
            continue
        mean, sd = statistics.mean(logs), statistics.stdev(logs)
        half = 1.96 * sd / math.sqrt(len(logs))
        rows.append({"file": path, "stand": stand, "other": label, "prompts": len(logs),
                     "geometric_mean": math.exp(mean), "interval_95": [math.exp(mean - half), math.exp(mean + half)],
                     "sd_log": sd, "prompts_for_5pct": math.ceil((1.96 * sd / math.log(1.05)) ** 2),
                     "prompts_for_1_1_vs_1_0": math.ceil((3.92 * sd / math.log(1.1)) ** 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="treeopt bench --json files")
    parser.add_argument("--against", default="pld,suffix", help="methods to compare STAND with (labels)")
    parser.add_argument("--json", dest="json_out", help="also write the rows as JSON")
    args = parser.parse_args()
    rows = [row for path in args.files for row in compare(path, args.against.split(","))]
    print(f"{'file':44s} {'pair':28s} {'n':>3s} {'geo':>6s} {'95% interval':>16s} {'sd(log)':>7s} "
          f"{'n for +-5%':>10s} {'n for 1.1 vs 1.0':>16s}")
    for row in rows:
        low, high = row["interval_95"]
        print(f"{row['file'].rsplit('/', 1)[-1]:44s} {row['stand'] + ' / ' + row['other']:28s} {row['prompts']:3d} "
              f"{row['geometric_mean']:6.3f} [{low:6.3f}, {high:6.3f}] {row['sd_log']:7.2f} "
              f"{row['prompts_for_5pct']:10d} {row['prompts_for_1_1_vs_1_0']:16d}")
    if args.json_out:
        from stand_runtime.files import write_json_atomic

        write_json_atomic(args.json_out, rows)


if __name__ == "__main__":
    main()
