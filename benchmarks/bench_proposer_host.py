"""Host time of the STAND vLLM proposer's ``propose()`` without an engine (issue 23).

R requests of one prompt (``n = R``) against the test suite's stand-in runner (``tests/runtime/vllm/test_vllm.py``
``FakeRunner``): each step hands the proposer real logits of the default model (rows of one prefill
of GSM8K text, picked by the previous token), commits the drafts that agree with that text (80% of
them) and one more token, and times ``propose()``. Prints ms per call and drafted tokens per step;
compare checkouts interleaved (``PYTHONPATH=checkout``) on a quiet machine:
``python benchmarks/bench_proposer_host.py --rows 16 --options '{}'`` (fixed K) or ``'{"sized": true}'``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch


def logit_bank(path: str, tokens: int) -> tuple[list[int], torch.Tensor]:
    """``tokens`` ids of the problems of the JSONL file ``path`` (GSM8K) and the default model's
    ``[tokens, vocab]`` float32 logits after each."""
    from stand_runtime import load_model

    model, tokenizer = load_model("smollm2-135m")
    with open(path) as handle:
        text = " ".join(json.loads(line)["problem"] for line in handle.readlines()[:16])
    ids = tokenizer(text)["input_ids"][:tokens]
    with torch.inference_mode():
        return ids, model(input_ids=torch.tensor([ids])).logits[0].float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--options", default="{}", help="STAND_VLLM_OPTIONS (JSON)")
    parser.add_argument("--data", default="/work/shared/data/gsm8k_test.jsonl")
    args = parser.parse_args()
    os.environ["STAND_VLLM_OPTIONS"] = args.options
    torch.set_num_threads(2)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_vllm import FakeRunner, _vllm_params
    from stand_runtime.vllm.proposer import StandProposer

    text, bank = logit_bank(args.data, 600)
    follows = {}
    for a, b in zip(text, text[1:]):
        follows.setdefault(a, b)
    rng = np.random.default_rng(0)
    rows, prompt = args.rows, text[:200]
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=args.k),
                             model_config=SimpleNamespace(max_model_len=2048, get_vocab_size=lambda: bank.shape[-1]))
    runner = FakeRunner([(f"r{i}", prompt, _vllm_params(0.6, 0.95, seed=i)) for i in range(rows)])
    proposer = StandProposer(config)
    runner.load_model(proposer)
    tokens = np.zeros((rows, 2048), dtype=np.int32)
    tokens[:, :200] = prompt
    lengths, drafts, total = [200] * rows, [[] for _ in range(rows)], 0.0
    for step in range(args.steps + 10):
        last = [int(tokens[i, lengths[i] - 1]) for i in range(rows)]
        verified = [t for i in range(rows) for t in [last[i], *drafts[i]]]
        logits = bank[torch.as_tensor([t % len(bank) for t in verified])]
        sampled = []
        for i in range(rows):
            out, previous = [], last[i]
            for token in drafts[i]:
                if token != follows.get(previous, text[0]) or rng.random() >= 0.8:
                    break
                out.append(token)
                previous = token
            out.append(int(follows.get(previous, text[0])) if rng.random() < 0.7 else int(rng.integers(0, 5000)))
            tokens[i, lengths[i]: lengths[i] + len(out)] = out
            lengths[i] += len(out)
            sampled.append(out)
        counts = None if step == 0 else [len(d) for d in drafts]
        start = time.perf_counter()
        drafts = runner.step(logits, counts, sampled, list(lengths), tokens)
        if step >= 10:
            total += time.perf_counter() - start
    print(f"rows {rows}: {1e3 * total / args.steps:.2f} ms per propose; "
          f"drafted tokens per step {proposer.totals['drafted'] / proposer.totals['steps']:.2f}")


if __name__ == "__main__":
    main()
