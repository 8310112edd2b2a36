"""Peak memory of a long prompt's prefill, per method (each method in a fresh process).

    python benchmarks/bench_prefill_memory.py [--tokens 8191] [--methods ar,stand,recycle]

Prints the peak resident memory (ru_maxrss) of a process that loads the default model and decodes
one token after a prompt of ``--tokens`` tokens (HumanEval prompts concatenated), and the same for
a process that only loads the model, so the prefill's own peak is their difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import torch
from stand_runtime import generate, load_model
from treeopt.data.datasets import load_prompts
method, tokens = sys.argv[1], int(sys.argv[2])
model, tokenizer = load_model("smollm2-135m", device="cpu")
ids = []
for prompt in load_prompts("humaneval"):
    ids += tokenizer(prompt.text)["input_ids"]
    if len(ids) >= tokens:
        break
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if method != "none":
    generate(model, tokenizer, ids[:tokens], method=method, max_new_tokens=1, seed=0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"method": method, "loaded_mb": loaded / 1024, "peak_mb": peak / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8191)
    parser.add_argument("--methods", default="none,ar,stand,recycle")
    args = parser.parse_args()
    rows = []
    for method in args.methods.split(","):
        out = subprocess.run([sys.executable, "-c", CHILD, method, str(args.tokens)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{method:8s} peak {rows[-1]['peak_mb']:8.0f} MB (after loading {rows[-1]['loaded_mb']:.0f} MB)", flush=True)
    base = next((r for r in rows if r["method"] == "ar"), None)
    if base:
        for row in rows:
            print(f"{row['method']:8s} peak / ar peak = {row['peak_mb'] / base['peak_mb']:.2f}")


if __name__ == "__main__":
    main()
