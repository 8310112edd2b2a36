"""Where a vLLM engine step's wall time goes, per engine: plain decoding, a proposer that drafts nothing,
and STAND (issue 23).

Engines run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), started once, and decode the same
HumanEval prompts with ``n`` samples each, interleaved per prompt (the order rotated). Functions of
vLLM's engine step (forward, sampling, the rejection sampler and its parts, the proposer call) and of
STAND's proposer are wrapped with wall-clock timers; each is reported in ms per engine step.
``null`` is a ``custom_class`` proposer that drafts nothing and reads nothing: the price of vLLM's
speculative path alone. On a quiet machine::

    python benchmarks/bench_vllm_step_split.py --offset 30 --samples 3 --n 16 --json split.json

Engine-to-engine forward times differ by up to ~10% for the same work (each engine holds its own
weights), so compare the components, not single tokens/s ratios.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

TIMES: dict = collections.defaultdict(float)
CALLS: dict = collections.defaultdict(int)
CURRENT = ["?"]  # the engine decoding now
PROPOSERS: dict = {}  # engine label -> its STAND proposer (its stats are reported)


class NullProposer:
    """A ``custom_class`` proposer that drafts nothing and reads nothing."""

    def __init__(self, vllm_config) -> None:
        pass

    def load_model(self, model) -> None:
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        return [[] for _ in sampled_token_ids]


def timed(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` (a class's method or a module's function) by a timed wrapper."""
    function = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if label == "stand.propose":
            PROPOSERS[CURRENT[0]] = args[0]
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            TIMES[(CURRENT[0], label)] += time.perf_counter() - started
            CALLS[(CURRENT[0], label)] += 1

    setattr(owner, name, wrapper)


def instrument() -> None:
    """Wrap the functions this script reports (before any engine starts)."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from stand_runtime.drafters.chain_budget import ChainBudget
    from stand_runtime.vllm import rejection
    from stand_runtime.vllm.proposer import StandProposer
    from stand_runtime.vllm.cpu032 import fix_cpu_sampling

    fix_cpu_sampling()  # the plugin first: the timers wrap what the engines run (it leaves wrapped functions)
    timed(EngineCore, "step", "step")
    for name in ("_model_forward", "_sample", "sample_tokens", "propose_draft_token_ids", "_prepare_inputs",
                 "_get_spec_decode_draft_probs"):
        timed(GPUModelRunner, name, f"runner.{name}")
    timed(Scheduler, "schedule", "scheduler.schedule")
    timed(Scheduler, "update_from_output", "scheduler.update_from_output")
    timed(rejection_sampler.RejectionSampler, "forward", "rejection_sampler")
    for name in ("apply_sampling_constraints", "rejection_sample"):  # vLLM's own forward
        timed(rejection_sampler, name, f"rejection_sampler.{name}")
    for name in ("cut_rows", "accepted", "assemble"):  # this package's (stand_runtime/vllm/cpu032/rejection.py)
        timed(rejection, name, f"rejection.{name}")
    for name in ("propose", "_cursor", "_merge_feeds", "_observe_rows", "_finish", "_fill_roots"):
        timed(StandProposer, name, f"stand.{name}")
    timed(ChainBudget, "allocate", "stand.allocate")


def start(names: list[str], ids: list[list[int]], n: int) -> dict:
    """label → vLLM ``LLM`` for ``ar``, ``null`` and ``stand-auto`` (with the successor prior at T 0.6,
    top-p 0.95, as ``bench-vllm``)."""
    from stand_runtime import SamplingParams
    from stand_runtime.files import write_bytes_atomic
    from stand_runtime.vllm import default_model_folder, load_llm
    from stand_runtime.vllm import engine as vllm_engine
    from stand_runtime.vllm.options import speculative_config
    from treeopt.evaluate.vllm_bench import start_engines
    from treeopt_cli import loading

    folder = default_model_folder()
    target, tokenizer = loading.load_model("smollm2-135m", "float32")
    found = loading.successor_prior(target, tokenizer, ["stand"], SamplingParams(0.6, 0.95, 0))
    prior = Path(tempfile.mkdtemp()) / "prior.npz"
    write_bytes_atomic(prior, found.to_bytes())
    del target
    engines, _ = start_engines(["ar"] + [name for name in names if name == "stand-auto"], None, folder, "float32",
                               ids[0], n, stand_options={"prior": str(prior)})
    if "null" in names:
        sys.modules.setdefault("bench_vllm_step_split", sys.modules[__name__])
        original = vllm_engine.method_config
        vllm_engine.method_config = lambda *args, **kwargs: {**speculative_config(4),
                                                             "model": "bench_vllm_step_split.NullProposer"}
        try:
            engines["null"] = ("null", load_llm(folder, "stand", k=4, dtype="float32"))
        finally:
            vllm_engine.method_config = original
    return {name: engines[name][1] for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offset", type=int, default=30)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--engines", default="ar,null,stand-auto")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from vllm import SamplingParams as VLLMSampling
    from vllm import TokensPrompt

    from stand_runtime import load_tokenizer
    from stand_runtime.target.prompts import encode_prompt
    from treeopt import load_prompts

    names = args.engines.split(",")
    prompts = load_prompts("humaneval", field=None, samples=args.samples, offset=args.offset)
    tokenizer = load_tokenizer("smollm2-135m")
    ids = [encode_prompt(tokenizer, prompt.text) for prompt in prompts]
    instrument()
    engines = start(names, ids, args.n)
    TIMES.clear()
    CALLS.clear()
    wall, tokens = collections.defaultdict(float), collections.defaultdict(int)
    for index, prompt in enumerate(ids):
        for name in names[index % len(names):] + names[: index % len(names)]:
            CURRENT[0] = name
            params = VLLMSampling(n=args.n, temperature=0.6, top_p=0.95, max_tokens=args.max_new_tokens,
                                  ignore_eos=True, seed=1000 * index)
            started = time.perf_counter()
            output = engines[name].generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0]
            wall[name] += time.perf_counter() - started
            tokens[name] += sum(len(sample.token_ids) for sample in output.outputs)
    labels = sorted({label for _, label in TIMES})
    result = {"settings": {"prompts": f"HumanEval {args.offset}-{args.offset + args.samples - 1}", "n": args.n,
                           "max_new_tokens": args.max_new_tokens, "temperature": 0.6, "top_p": 0.95,
                           "ignore_eos": True, "dtype": "float32"}, "engines": {}}
    for name in names:
        steps = CALLS[(name, "step")]
        split = {label: 1000 * TIMES[(name, label)] / max(steps, 1) for label in labels if CALLS[(name, label)]}
        result["engines"][name] = {"tokens": tokens[name], "seconds": wall[name],
                                   "tokens_per_s": tokens[name] / wall[name], "engine_steps": steps,
                                   "ms_per_step": split}
        if name in PROPOSERS:
            stats = PROPOSERS[name].stats()
            result["engines"][name]["proposer"] = {key: stats.get(key) for key in (
                "steps", "forwards", "tokens", "drafted", "chain_lengths", "positions_by_kind", "sized")}
        print(f"{name}: {tokens[name] / wall[name]:.1f} tok/s, {steps} engine steps"
              + (f", proposer {result['engines'][name]['proposer']}" if name in PROPOSERS else ""))
        for label, ms in split.items():
            print(f"  {label:42s} {ms:8.3f} ms/step")
    if args.json is not None:
        from stand_runtime.files import write_json_atomic

        write_json_atomic(args.json, result)


if __name__ == "__main__":
    main()
