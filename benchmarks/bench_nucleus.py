"""The top-p cut of vLLM's CPU sampler on the default model's own logits: vLLM's full sort, the torch
probe and the native cut (stand_runtime/target/sampling.py, csrc/nucleus.cpp), interleaved.

The logits are the default model's at every position of the first ``--prompts`` HumanEval prompts
(one forward each), divided by the temperature; a call cuts ``--rows`` of them at top-p 0.95, as
vLLM's sampler does for 16 requests (plain decoding) or for 16 requests' draft positions. Each
method's median ms per call over ``--repeats`` calls (the methods alternate call by call), and the
native cut's speedup over the others. Also checks that the three keep the same tokens.

Run: ``python benchmarks/bench_nucleus.py --rows 16,64 --temperatures 0.6,1.0 --json out.json``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch


def model_logits(prompts: int) -> torch.Tensor:
    """``[positions, vocab]`` float32 logits of the default model over the first HumanEval prompts."""
    from stand_runtime.target.models import load_model
    from stand_runtime.target.prompts import encode_prompt
    from treeopt import load_prompts

    model, tokenizer = load_model()
    rows = []
    with torch.no_grad():
        for prompt in load_prompts("humaneval", field=None, samples=prompts, offset=0):
            ids = torch.tensor([encode_prompt(tokenizer, prompt.text)])
            rows.append(model(ids).logits[0].float())
    return torch.cat(rows)


def cuts():
    """label → function(logits [rows, vocab], p [rows]) → logits masked (in place)."""
    from stand_runtime.vllm.cpu032 import cpu_sampling
    from vllm.v1.sample.ops import topk_topp_sampler

    vllm_sort = cpu_sampling.VLLM_ORIGINALS.get("apply_top_k_top_p_pytorch",
                                                topk_topp_sampler.apply_top_k_top_p_pytorch)
    cpu_sampling.VLLM_ORIGINALS.setdefault("apply_top_k_top_p_pytorch", vllm_sort)

    def probe(native: bool):
        def cut(logits, p):
            os.environ["STAND_NATIVE_NUCLEUS"] = "1" if native else "0"
            return cpu_sampling.top_p_by_probe(logits, None, p)
        return cut

    return {"vllm-sort": lambda logits, p: vllm_sort(logits, None, p), "torch-probe": probe(False),
            "native": probe(True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--rows", default="16,64")
    parser.add_argument("--temperatures", default="0.6,1.0")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    logits = model_logits(args.prompts)
    methods = cuts()
    results = []
    for temperature in map(float, args.temperatures.split(",")):
        for rows in map(int, args.rows.split(",")):
            picked = (logits[torch.randperm(logits.shape[0], generator=torch.Generator().manual_seed(rows))[:rows]]
                      / temperature).contiguous()
            p = torch.full((rows,), 0.95)
            kept = {name: torch.isfinite(cut(picked.clone(), p)) for name, cut in methods.items()}
            same = all(torch.equal(kept["vllm-sort"], other) for other in kept.values())
            times = {name: [] for name in methods}
            for _ in range(args.repeats):
                for name, cut in methods.items():
                    copy = picked.clone()
                    started = time.perf_counter()
                    cut(copy, p)
                    times[name].append(1000 * (time.perf_counter() - started))
            ms = {name: statistics.median(values) for name, values in times.items()}
            results.append({"temperature": temperature, "rows": rows, "ms_per_call": ms, "same_tokens": same,
                            "nucleus_mean": float(kept["native"].sum(-1).float().mean())})
            print(f"T {temperature} rows {rows:3d}: " + ", ".join(f"{n} {v:.2f} ms" for n, v in ms.items())
                  + f"; native {ms['torch-probe'] / ms['native']:.1f}x the probe, {ms['vllm-sort'] / ms['native']:.0f}x"
                  f" the sort; same tokens: {same}")
    os.environ.pop("STAND_NATIVE_NUCLEUS", None)
    if args.json is not None:
        from stand_runtime.files import write_json_atomic

        write_json_atomic(args.json, {"device": torch.backends.cpu.get_cpu_capability(),
                                      "threads": torch.get_num_threads(), "results": results})


if __name__ == "__main__":
    main()
