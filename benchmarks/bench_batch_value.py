"""Value-sized drafts in a batch: each row alone vs one node budget per forward (docs/algorithms.md §3.7).

Best-of-N sampling on GSM8K prompts with ``generate_batch``: each problem's N samples share one
n-gram store (best-of-N's memory), decoded B rows at a time (N / B batches per problem). Methods:
plain decoding (``ar``, the reference), STAND on its default tree (``auto``, sized for B rows),
STAND's value-sized dynamic tree with each row sized alone (``dynamic-auto``, ``Method.ablated(allocation="row")``)
and with one node budget per forward spent over every row's candidates (``allocation="batch"``,
:mod:`stand_runtime.sizing.allocation`). Each method is parsed once per batch size (its value rule
learns over every problem); methods run problem by problem, their order rotating, so all see the same
machine state. Prints per batch size each method's tokens per second (wall time of its
``generate_batch`` calls, prefill included) and its ratio to ``ar``, the acceptance length, drafted
nodes per row and step, the padding waste (padded / forwarded tokens) and, batch-allocated, the
modelled gain a packed (unpadded) forward would have had.

Run (quiet machine): ``python benchmarks/bench_batch_value.py --problems 10 --json out.json``;
a smoke run: ``python benchmarks/bench_batch_value.py --problems 1 --n 2 --batches 2 --max-new-tokens 8``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from stand_runtime import Method, SamplingParams, SizingSession, generate_batch
from stand_runtime.engine.metrics import padding_waste
from stand_runtime.files import write_json_atomic
from stand_runtime.target.model_facts import vocab_size
from stand_runtime.target.models import load_model

METHODS = {"ar": ("ar", None, "batch"), "stand": ("stand", None, "batch"),
           "value-row": ("stand", "dynamic-auto", "row"), "value-batch": ("stand", "dynamic-auto", "batch")}
"""Label → (method, tree, allocation)."""


def load_problems(path: str, count: int) -> list[str]:
    with open(path) as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [f"{row['problem']}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
            for row in rows[:count]]


def run_method(model, tokenizer, method: tuple, prompt: str, n: int, batch: int, params, tokens: int, seed: int):
    """The problem's n samples, ``batch`` rows at a time, sharing one store: (results, wall seconds);
    ``method``: ``(Method, SizingSession or None, list)``, each call's packing gains added to the list."""
    method, sizing, packing = method
    store = method.new_memory(vocab_size(model)) if method.name != "ar" else None
    results, seconds = [], 0.0
    for start in range(0, n, batch):
        begin = time.perf_counter()
        results += generate_batch(model, tokenizer, [prompt], n=min(batch, n - start), method=method, sampling=params,
                                  max_new_tokens=tokens, seed=seed + start, store=store, sizing=sizing)
        seconds += time.perf_counter() - begin
        if sizing is not None:
            packing += sizing.last_rule.packing
    return results, seconds


def summarise(runs: dict, methods: dict) -> dict:
    out = {}
    for label, (results, seconds) in runs.items():
        stats = [r.stats for r in results]
        steps = sum(s.target_forwards for s in stats)
        out[label] = {"tokens": sum(s.new_tokens for s in stats), "seconds": seconds,
                      "tokens_per_s": sum(s.new_tokens for s in stats) / seconds,
                      "acceptance_length": sum(s.new_tokens for s in stats) / steps,
                      "drafted_per_row_step": sum(sum(s.drafted_per_step) for s in stats) / steps,
                      "padding_waste": padding_waste(stats)}
        packing = methods[label][2]
        if packing:
            out[label]["packed_gain_modelled"] = float(np.mean(packing))
    for label in out:
        out[label]["ratio_vs_ar"] = out[label]["tokens_per_s"] / out["ar"]["tokens_per_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/work/shared/data/gsm8k_test.jsonl")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--problems", type=int, default=10)
    parser.add_argument("--n", type=int, default=8, help="samples per problem (best-of-N)")
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 8], help="rows per forward")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    print(f"loaded {args.model}", flush=True)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    prompts = load_problems(args.data, args.problems)
    report = {"model": args.model, "problems": len(prompts), "n": args.n, "max_new_tokens": args.max_new_tokens,
              "temperature": args.temperature, "top_p": args.top_p, "batches": {}}
    for batch in args.batches:
        methods = {}
        for label, (name, tree, allocation) in METHODS.items():
            method, sizing = Method.parse(name, tree, model, batch=batch).ablated(allocation=allocation), None
            if method.value_sized:
                sizing = SizingSession.for_model(model)
                sizing.record_packing = True  # the packed allocation's modelled gain
            methods[label] = (method, sizing, [])
        runs = {label: ([], 0.0) for label in methods}
        labels = list(methods)
        for p, prompt in enumerate(prompts):
            for label in labels[p % len(labels):] + labels[: p % len(labels)]:
                results, seconds = run_method(model, tokenizer, methods[label], prompt, args.n, batch, params,
                                              args.max_new_tokens, args.seed + 1000 * p)
                runs[label] = (runs[label][0] + results, runs[label][1] + seconds)
                print(f"  batch {batch} problem {p} {label}: {seconds:.1f} s", flush=True)
        report["batches"][batch] = summarise(runs, methods)
        print(f"batch {batch} ({len(prompts)} problems x {args.n} samples, {args.max_new_tokens} tokens):")
        for label, row in report["batches"][batch].items():
            extra = f"  packed/padded (modelled) {row['packed_gain_modelled']:.3f}" if "packed_gain_modelled" in row else ""
            print(f"  {label:12s} {row['tokens_per_s']:8.1f} tok/s  x{row['ratio_vs_ar']:.3f} vs ar  "
                  f"tau {row['acceptance_length']:.2f}  drafted/row-step {row['drafted_per_row_step']:5.1f}  "
                  f"padding {100 * row['padding_waste']:4.1f}%{extra}")
    if args.json:
        write_json_atomic(args.json, report)


if __name__ == "__main__":
    main()
