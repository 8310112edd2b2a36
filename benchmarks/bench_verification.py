"""The two rules for sampled drafts, drafter-invariant (Gumbel-max coupling) and the STAND paper's
recursive rejection sampling, on the same prompts and seeds, interleaved prompt by prompt.

Workloads (default model, HumanEval from offset 30, T ``--temperature``, top-p 0.95, ``--tokens``
tokens, EOS ignored):
- ``x1``: one sequence per prompt (``generate``);
- ``x4``: four trajectories per prompt one after another, sharing one store (best-of-4 decoded serially);
- ``bo8``: best-of-8 as one batch of 8 rows sharing the prompt's store (``generate_batch``).

Per workload and prompt, plain decoding (``ar``) and STAND (``--tree``, default the method's default
tree) under each rule run in alternating order; each configuration gets a fresh SizingSession per
prompt so one rule's learning never helps the other. Prints tokens per target forward (τ) and
tokens/s over plain decoding of the same rule, and writes everything to ``--json``. Run on a quiet
machine.

Run: ``python benchmarks/bench_verification.py --prompts 8 --x4-prompts 3 --bo8-prompts 2 --json out.json``
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date

from rich.console import Console
from rich.table import Table

RULES = ("invariant", "rejection")


def machine() -> str:
    """This CPU's model name and core count (``/proc/cpuinfo``; the platform's name elsewhere)."""
    import os

    try:
        with open("/proc/cpuinfo") as handle:
            name = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{os.cpu_count()}-core {name}"


def run_once(model, tokenizer, text: str, workload: str, method, params, tokens: int, seed: int, sizing):
    """(tokens, forwards, seconds) of one workload on one prompt."""
    from stand_runtime import generate, generate_batch

    started = time.perf_counter()
    if workload == "bo8":
        rows = generate_batch(model, tokenizer, [text], n=8, method=method, sampling=params, max_new_tokens=tokens,
                              seed=seed, eos_token_ids=[], sizing=sizing)
        stats = [r.stats for r in rows]
    else:
        memory = method.new_memory(model.config.vocab_size) if workload == "x4" else None
        stats = [generate(model, tokenizer, text, method=method, sampling=params, max_new_tokens=tokens, seed=seed + t,
                          eos_token_ids=[], store=memory, sizing=sizing).stats
                 for t in range(4 if workload == "x4" else 1)]
    seconds = time.perf_counter() - started
    return sum(s.new_tokens for s in stats), sum(s.target_forwards for s in stats), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts of the x1 workload")
    parser.add_argument("--x4-prompts", type=int, default=3)
    parser.add_argument("--bo8-prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--tree", default=None, help="STAND's tree (default: its default tree)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from stand_runtime import DEFAULT_MODEL, Method, SamplingParams, SizingSession, load_model
    from treeopt.data.datasets import load_prompts

    model, tokenizer = load_model(DEFAULT_MODEL)
    params = SamplingParams(temperature=args.temperature, top_p=0.95)
    counts = {"x1": args.prompts, "x4": args.x4_prompts, "bo8": args.bo8_prompts}
    configs = [(name, rule) for name in ("ar", "stand") for rule in RULES]
    rows: dict = {}
    for workload, count in counts.items():
        batch = 8 if workload == "bo8" else 1
        methods = {(name, rule): Method.parse(name, args.tree if name == "stand" else None, model, batch,
                                              verification=rule) for name, rule in configs}
        for index, prompt in enumerate(load_prompts("humaneval", samples=count, offset=30)):
            order = configs if index % 2 == 0 else configs[::-1]
            for name, rule in order:
                sizing = SizingSession.for_model(model)
                done = run_once(model, tokenizer, prompt.text, workload, methods[name, rule], params, args.tokens,
                                1000 * index, sizing)
                total = rows.setdefault((workload, name, rule), [0, 0, 0.0])
                for k in range(3):
                    total[k] += done[k]
                print(workload, prompt.id, name, rule, done, flush=True)
    table = Table(title=f"verification rules: T={args.temperature}, top-p 0.95, {args.tokens} tokens, "
                        f"tree {args.tree or 'default'}")
    for column in ("workload", "rule", "plain tok/s", "STAND tok/s", "speedup", "STAND τ"):
        table.add_column(column)
    out = []
    for workload in counts:
        for rule in RULES:
            plain, stand = rows[(workload, "ar", rule)], rows[(workload, "stand", rule)]
            speedup = (stand[0] / stand[2]) / (plain[0] / plain[2])
            table.add_row(workload, rule, f"{plain[0] / plain[2]:.1f}", f"{stand[0] / stand[2]:.1f}", f"{speedup:.2f}",
                          f"{stand[0] / stand[1]:.2f}")
            out.append({"workload": workload, "rule": rule, "prompts": counts[workload],
                        "plain": dict(zip(("tokens", "forwards", "seconds"), plain)),
                        "stand": dict(zip(("tokens", "forwards", "seconds"), stand)),
                        "speedup": speedup, "stand_tau": stand[0] / stand[1]})
    Console().print(table)
    if args.json:
        from stand_runtime.files import write_json_atomic as write_json

        write_json(args.json, {"date": date.today().isoformat(), "machine": machine(),
                               "command": "python benchmarks/bench_verification.py " + " ".join(
                                   f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
                               "results": out})


if __name__ == "__main__":
    main()
