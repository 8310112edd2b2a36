"""Acceptance at a fixed budget on the default model: STAND's τ and α per depth on prompts of two
datasets, one sequence per prompt (``x1``) and four trajectories sharing a store (``x4``).

A fixed budget (``--tree dynamic-K``) drafts the same number of nodes per step whatever the machine's
timing, so τ and α compare drafts across code versions and settings without a quiet machine (run the
script from two checkouts, or with two ``--confidence`` values, on the same prompts and seeds). The
tokens/s column is meaningful only on a quiet machine, configurations interleaved, so plain decoding
(``ar``) runs beside STAND on every prompt.

``stand+cross`` runs STAND over a cross-prompt memory, one per dataset and workload, fed by every
prompt before (docs/algorithms.md §2.6).

Run: ``python benchmarks/bench_acceptance.py --gsm8k 150 --humaneval 10 --prompts 10 --tree dynamic-16 --json out.json``
"""

from __future__ import annotations

import argparse
import time
from datetime import date


def run(model, tokenizer, text: str, workload: str, method, params, tokens: int, seed: int, base=None) -> list:
    """The :class:`DecodeStats` of one workload on one prompt (``base``: a cross-prompt memory under its store)."""
    from stand_runtime import generate

    vocab = model.config.vocab_size
    memory = method.new_memory(vocab, base=base) if workload == "x4" or base is not None else None
    return [generate(model, tokenizer, text, method=method, sampling=params, max_new_tokens=tokens, seed=seed + t,
                     eos_token_ids=[], store=memory).stats for t in range(4 if workload == "x4" else 1)]


def summary(stats: list) -> dict:
    """τ, α at depths 1-3, drafted nodes per step and tokens/s over ``stats``."""
    from stand_runtime.engine.metrics import acceptance_by_depth

    tokens, forwards = sum(s.new_tokens for s in stats), sum(s.target_forwards for s in stats)
    accepted = [a for s in stats for a in s.accepted_per_step]
    bonus = [b for s in stats for b in s.bonus_per_step]
    drafted = [d for s in stats for d in s.drafted_per_step]
    alpha = [d["rate"] for d in acceptance_by_depth(accepted, bonus)[:3]]
    seconds = sum(s.total_s for s in stats)
    return {"tokens": tokens, "forwards": forwards, "tau": tokens / forwards, "alpha": alpha,
            "drafted_per_step": sum(drafted) / max(1, len(drafted)), "seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", type=int, default=150, help="first GSM8K prompt")
    parser.add_argument("--gsm8k-file", default="../shared/data/gsm8k_test.jsonl")
    parser.add_argument("--humaneval", type=int, default=10, help="first HumanEval prompt")
    parser.add_argument("--prompts", type=int, default=10, help="prompts per dataset")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--tree", default="dynamic-16")
    parser.add_argument("--confidence", type=float, default=None, help="the dynamic tree's confidence (default: its own)")
    parser.add_argument("--workloads", default="x1,x4")
    parser.add_argument("--methods", default="ar,stand", help="ar,stand, or stand alone when only τ and α matter; "
                        "stand+cross: STAND over a cross-prompt memory of the dataset's prompts so far")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from dataclasses import replace

    from rich.console import Console
    from rich.table import Table

    from stand_runtime import DEFAULT_MODEL, Method, SamplingParams, load_model
    from stand_runtime.store.drafting import parse_dynamic
    from treeopt.data.datasets import load_prompts

    model, tokenizer = load_model(DEFAULT_MODEL)
    params = SamplingParams(temperature=args.temperature, top_p=0.95)
    tree = parse_dynamic(args.tree)
    if tree is not None and args.confidence is not None:
        tree = replace(tree, confidence=args.confidence)
    methods = {name: Method.parse("stand", tree or args.tree) if name.startswith("stand") else Method.parse(name)
               for name in args.methods.split(",")}
    bases: dict = {}  # (workload, dataset) -> the cross-prompt memory of stand+cross
    prompts = ([("gsm8k", p) for p in load_prompts(args.gsm8k_file, samples=args.prompts, offset=args.gsm8k)]
               + [("humaneval", p) for p in load_prompts("humaneval", samples=args.prompts, offset=args.humaneval)])
    totals: dict = {}
    for workload in args.workloads.split(","):
        for index, (dataset, prompt) in enumerate(prompts):
            order = list(methods) if index % 2 == 0 else list(methods)[::-1]
            for name in order:
                if name == "stand+cross" and (workload, dataset) not in bases:
                    bases[workload, dataset] = methods[name].new_memory(model.config.vocab_size)
                base = bases.get((workload, dataset)) if name == "stand+cross" else None
                stats = run(model, tokenizer, prompt.text, workload, methods[name], params, args.tokens, 1000 * index,
                            base)
                totals.setdefault((workload, dataset, name), []).extend(stats)
    table = Table(title=f"{args.tree} (confidence {args.confidence or 'default'}), T {args.temperature}, "
                        f"top-p 0.95, {args.tokens} tokens")
    for column in ("workload", "prompts", "method", "τ", "α1", "α2", "α3", "drafted/step", "tok/s"):
        table.add_column(column)
    out = []
    for (workload, group, name), stats in totals.items():
        row = summary(stats)
        out.append({"workload": workload, "prompts": group, "method": name, **row})
        alpha = [f"{a:.3f}" for a in row["alpha"]] + ["-"] * (3 - len(row["alpha"]))
        table.add_row(workload, group, name, f"{row['tau']:.3f}", *alpha, f"{row['drafted_per_step']:.1f}",
                      f"{row['tokens_per_s']:.1f}")
    Console().print(table)
    if args.json:
        from stand_runtime.files import write_json_atomic

        write_json_atomic(args.json, {"date": date.today().isoformat(), "settings": vars(args), "results": out,
                                      "written": time.strftime("%H:%M:%S")})


if __name__ == "__main__":
    main()
