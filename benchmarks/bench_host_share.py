"""Host share of a batched HF step: best-of-N rows of one prompt in one batch (issue 24).

``generate_batch`` decodes one GSM8K problem x ``--rows`` samples (best-of-N, the rows sharing one
store online) with STAND on each ``--trees`` tree, uncapped (``max_nodes=None``), and splits the batch's
wall time into drafting, target forward, verification and bookkeeping from the last-finishing row's
statistics (in a batch a lap counts fully for every row it served, so that row's stats cover every
step). Prints per tree the host ms per step (everything but the forward) and its share of the step.

Run from a checkout (PYTHONPATH=checkout) on a quiet machine, once per checkout or store to compare,
interleaved: ``python benchmarks/bench_host_share.py out.json --trees dynamic-80,auto``; with
``STAND_NATIVE=1`` for the native store.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from stand_runtime import SamplingParams, generate_batch, load_model
from stand_runtime.files import write_json_atomic
from stand_runtime.method import Method


def measure(model, tokenizer, prompt: str, tree: str, rows: int, tokens: int) -> dict:
    """One batch decode of ``prompt`` x ``rows`` with STAND on ``tree``: its time split per step."""
    method = Method.parse("stand", tree, model, rows, max_nodes=None)
    start = time.perf_counter()
    out = generate_batch(model, tokenizer, [prompt], n=rows, method=method, max_new_tokens=tokens, seed=3,
                         sampling=SamplingParams(temperature=0.6, top_p=0.95), eos_token_ids=[])
    wall = time.perf_counter() - start
    last = max(out, key=lambda r: r.stats.target_forwards).stats
    split = {k: getattr(last, k) for k in ("drafting_s", "forward_s", "verification_s", "bookkeeping_s")}
    host = split["drafting_s"] + split["verification_s"] + split["bookkeeping_s"]
    steps, emitted = last.target_forwards, sum(r.stats.new_tokens for r in out)
    return dict(steps=steps, tokens=emitted, wall_s=wall, **split, host_ms_per_step=1e3 * host / steps,
                forward_ms_per_step=1e3 * split["forward_s"] / steps, host_share=host / last.decode_s,
                tau=emitted / sum(r.stats.target_forwards for r in out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--trees", default="dynamic-80,auto")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48, help="tokens per row")
    parser.add_argument("--data", default="/work/shared/data/gsm8k_test.jsonl")
    parser.add_argument("--problem", type=int, default=20, help="line of --data")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_model("smollm2-135m")
    with open(args.data) as handle:
        prompt = json.loads(handle.readlines()[args.problem])["problem"]
    results = {}
    for tree in args.trees.split(","):
        results[tree] = measure(model, tokenizer, prompt, tree, args.rows, args.tokens)
        print(tree, {k: round(v, 4) if isinstance(v, float) else v for k, v in results[tree].items()}, flush=True)
    write_json_atomic(args.out, results)


if __name__ == "__main__":
    main()
