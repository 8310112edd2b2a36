"""GPU check of the Hugging Face engine (run on a machine with CUDA; not part of the test suite).

    python benchmarks/gpu/gpu_check.py [--device cuda] [--out results.json]

1. Losslessness on the device: a tiny random Qwen2 (vocab 16) decoded greedily with every method
   must equal plain decoding token for token; tree logits must equal each path run alone; a
   chi-square of STAND's 3-token continuations against the exact distribution.
2. Speed where the tree forward is nearly free: a random-weight model of SmolLM2-135M's exact shape
   (the config in this folder; weights random, so acceptance is meaningless) gives the latency
   profile t(n) for n = 1..128 new tokens in float32 and bfloat16, and one decoding run's split of
   a step into forward and host work (drafting, verification, bookkeeping) per method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from conftest import tiny_model  # noqa: E402  (the tests' helpers: one tiny model, one chi-square)
from test_engine import chi_square_against  # noqa: E402
from stand_runtime import Method, NGramStore, SamplingParams, generate, load_tree, measure_latency
from stand_runtime.target.forward import tree_forward
from stand_runtime.target.kv_cache import new_cache
from stand_runtime.target.sampling import target_probs


def tiny(device):
    """The tests' tiny random Qwen2 (vocab 16), on ``device``."""
    return tiny_model("qwen2").to(device)


def losslessness(device) -> dict:
    model = tiny(device)
    prompt = [3, 1, 4, 1, 5] * 6
    plain = generate(model, None, prompt, sampling=SamplingParams(temperature=0), method="ar", max_new_tokens=40, eos_token_ids=[])
    out = {"greedy_identity": {}}
    for method in ("stand", "stand-det", "pld", "recycle"):
        tree = None if method == "pld" else "heuristic-80"
        fast = generate(model, None, prompt, method=Method.parse(method, tree, model), sampling=SamplingParams(temperature=0), max_new_tokens=40, eos_token_ids=[])
        out["greedy_identity"][method] = {"equal": fast.tokens == plain.tokens, "steps": fast.stats.target_forwards}
    tree = load_tree("heuristic-80").tree
    gen = torch.Generator().manual_seed(0)
    tokens = [prompt[-1]] + torch.randint(0, 16, (tree.num_nodes,), generator=gen).tolist()
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.tensor([prompt[:-1]], device=device), cache=cache)
        logits = tree_forward(model, cache, tokens, tree.depths, tree.ancestor_mask, len(prompt) - 1)
        worst = 0.0
        for node in range(tree.num_nodes + 1):
            path, walk = [], node
            while walk > 0:
                path.append(tokens[walk])
                walk = int(tree.parents[walk])
            alone = model(input_ids=torch.tensor([prompt + path[::-1]], device=device)).logits[0, -1]
            worst = max(worst, float((logits[node] - alone).abs().max()))
    out["tree_logits_max_abs_diff"] = worst
    loop = prompt + plain.tokens[:30]
    params = SamplingParams(0.8, 0.95)
    exact = {(): 1.0}
    for _ in range(3):
        grown = {}
        for prefix, prob in exact.items():
            with torch.inference_mode():
                p = target_probs(model(input_ids=torch.tensor([loop + list(prefix)], device=device)).logits[0, -1], params)
            p = p.double().cpu().numpy()
            for token in np.flatnonzero(p):
                grown[prefix + (int(token),)] = prob * p[token]
        exact = grown
    counts, accepted, samples = {}, 0, 2000
    start = time.perf_counter()
    for seed in range(samples):
        result = generate(model, None, loop, method=Method.parse("stand", "heuristic-80", model), sampling=params, max_new_tokens=3, seed=seed, eos_token_ids=[])
        counts[tuple(result.tokens)] = counts.get(tuple(result.tokens), 0) + 1
        accepted += result.stats.new_tokens - result.stats.target_forwards
    possible = {k: c for k, c in counts.items() if k in exact}  # impossible samples are reported, not tested
    out["chi_square"] = {"pvalue": float(chi_square_against(possible, exact, sum(possible.values())).pvalue),
                         "samples": samples, "accepted_drafts": accepted,
                         "impossible_samples": samples - sum(possible.values()),
                         "seconds": time.perf_counter() - start}
    return out


def shaped_model(device, dtype):
    """SmolLM2-135M's shape with random weights, its output layer scaled so p is sharp (a nucleus of
    a few tokens, as a trained model's), which makes host work per step realistic."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig.from_dict(json.loads((Path(__file__).parent / "smollm2-135m-config.json").read_text()))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval().requires_grad_(False)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(40.0)  # tied with the output layer: sharp logits
    return model.to(device)


def speed(device) -> dict:
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = shaped_model(device, dtype)
        profile = measure_latency(model, rounds=9)
        entry = {"latency_ms": {n: round(s * 1e3, 3) for n, s in zip(profile.sizes, profile.seconds)},
                 "spread_ms": {n: round(s * 1e3, 3) for n, s in zip(profile.sizes, profile.spread)}}
        prompt = torch.randint(0, model.config.vocab_size, (512,), generator=torch.Generator().manual_seed(1)).tolist()
        runs = {}
        for method, tree in (("ar", None), ("stand", "heuristic-80"), ("pld", None), ("recycle", "heuristic-80")):
            for temperature in (0.0, 0.6):
                store = NGramStore() if method == "stand" else None
                result = generate(model, None, prompt, method=Method.parse(method, tree, model), sampling=SamplingParams(temperature=temperature, top_p=0.95), max_new_tokens=128, seed=0, eos_token_ids=[], store=store)
                s = result.stats
                steps = max(s.target_forwards, 1)
                runs[f"{method}@T{temperature}"] = {
                    "tokens_per_s": round(s.tokens_per_s, 1), "acceptance_length": round(s.acceptance_length, 3),
                    "drafted_per_step": round(sum(s.drafted_per_step) / steps, 1),
                    "ms_per_step": {"forward": round(s.forward_s / steps * 1e3, 3),
                                    "drafting": round(s.drafting_s / steps * 1e3, 3),
                                    "verification": round(s.verification_s / steps * 1e3, 3),
                                    "bookkeeping": round(s.bookkeeping_s / steps * 1e3, 3)},
                    "host_fraction": round(1 - s.forward_s / s.decode_s, 3) if s.decode_s else None,
                }
        entry["runs"] = runs
        out[str(dtype).removeprefix("torch.")] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    import transformers

    report["transformers"] = transformers.__version__
    report["losslessness"] = losslessness(device)
    print(json.dumps(report["losslessness"], indent=1), flush=True)
    report["speed"] = speed(device)
    print(json.dumps(report["speed"], indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
