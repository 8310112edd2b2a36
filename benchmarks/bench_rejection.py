"""vLLM's rejection sampler on CPU: its own ``forward`` against this package's
(stand_runtime/vllm/cpu032/rejection.py), on the default model's logits, interleaved call by call.

A step of ``--requests`` sampled requests (T ``--temperature``, top-p 0.95) with a given number of
draft tokens spread over them (``--drafts``, e.g. 0, 8 and 32 for 16 requests); the rows are the
default model's logits at the positions of the first ``--prompts`` HumanEval prompts, each draft
token drawn from p before top-p and offered with that q. Both paths run with this package's top-p cut
and recovery noise (the plugin's other replacements), so the difference is the verification of the
draft rows alone. Also times vLLM's sampler on the requests' rows alone: the step plain decoding
makes. Median ms per call over ``--repeats`` calls.

Run: ``python benchmarks/bench_rejection.py --drafts 0,8,32 --json out.json``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch


def step(logits: torch.Tensor, requests: int, drafts: int, temperature: float, seed: int):
    """(metadata, draft_probs, logits, sampling_metadata) of a step whose drafts are spread round-robin."""
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    generator = torch.Generator().manual_seed(seed)
    counts = [drafts // requests + (1 if i < drafts % requests else 0) for i in range(requests)]
    rows = logits[torch.randperm(logits.shape[0], generator=generator)[:drafts + requests]].contiguous()
    target, bonus, row = [], [], 0
    for count in counts:
        target += range(row, row + count)
        bonus.append(row + count)
        row += count + 1
    q = torch.softmax(rows[target] / temperature, dim=-1).contiguous()
    ids = torch.multinomial(q, 1, generator=generator)[:, 0] if drafts else torch.zeros(0, dtype=torch.long)
    metadata = SpecDecodeMetadata(
        draft_token_ids=ids.to(torch.int32), num_draft_tokens=counts,
        cu_num_draft_tokens=torch.tensor(np.cumsum(counts), dtype=torch.int32),
        cu_num_sampled_tokens=torch.tensor(np.cumsum([c + 1 for c in counts]), dtype=torch.int32),
        target_logits_indices=torch.tensor(target, dtype=torch.int32),
        bonus_logits_indices=torch.tensor(bonus, dtype=torch.int32), logits_indices=torch.arange(row, dtype=torch.int32))
    sampling = SamplingMetadata(
        temperature=torch.full((requests,), temperature), all_greedy=False, all_random=True,
        top_p=torch.full((requests,), 0.95), top_k=None, generators={}, max_num_logprobs=None, no_penalties=True,
        prompt_token_ids=None, frequency_penalties=torch.zeros(requests), presence_penalties=torch.zeros(requests),
        repetition_penalties=torch.ones(requests), output_token_ids=[[] for _ in range(requests)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors())
    return metadata, q if drafts else None, rows, sampling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--drafts", default="0,8,32")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_nucleus import model_logits
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    from stand_runtime.vllm.cpu032.cpu_sampling import VLLM_ORIGINALS
    from stand_runtime.vllm.cpu032.rejection import FORWARD, rejection_forward
    from stand_runtime.vllm.cpu032 import fix_cpu_sampling

    getattr(current_platform, "register_triton_kernel_overrides", lambda: None)()
    fix_cpu_sampling()
    sampler = RejectionSampler(Sampler())
    methods = {"vllm": VLLM_ORIGINALS[FORWARD], "stand": rejection_forward,
               "plain-sampler": lambda self, metadata, q, rows, sampling: self.sampler(
                   rows[metadata.bonus_logits_indices], sampling)}
    logits = model_logits(args.prompts)
    results = []
    for drafts in map(int, args.drafts.split(",")):
        inputs = step(logits, args.requests, drafts, args.temperature, seed=drafts)
        times = {name: [] for name in methods}
        for _ in range(args.repeats):
            for name, forward in methods.items():
                metadata, q, rows, sampling = inputs
                copy = rows.clone()
                started = time.perf_counter()
                forward(sampler, metadata, q, copy, sampling)
                times[name].append(1000 * (time.perf_counter() - started))
        ms = {name: statistics.median(values) for name, values in times.items()}
        results.append({"requests": args.requests, "drafts": drafts, "ms_per_step": ms})
        print(f"{args.requests} requests, {drafts:3d} drafts: " + ", ".join(f"{n} {v:.2f} ms" for n, v in ms.items())
              + f"; draft rows {ms['vllm'] - ms['plain-sampler']:.2f} -> {ms['stand'] - ms['plain-sampler']:.2f} ms")
    if args.json is not None:
        from stand_runtime.files import write_json_atomic

        write_json_atomic(args.json, {"device": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
                                      "temperature": args.temperature, "top_p": 0.95, "results": results})


if __name__ == "__main__":
    main()
